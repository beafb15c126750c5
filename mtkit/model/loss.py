"""Label-smoothed cross-entropy, as in the paper (epsilon 0.1) and fairseq."""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, pad_id: int
) -> tuple[Tensor, Tensor, int]:
    """Summed label-smoothed loss, summed plain NLL and the number of non-pad targets.

    logits: (N, V) or (B, T, V), any float dtype; the maths runs in fp32.
    target: (N,) or (B, T) token ids; positions holding pad_id count for nothing.

    The smoothed target puts 1 - epsilon on the reference token and epsilon / V on every
    token (the reference included), so per position, with lse = log sum_v exp(z_v):

        nll  = lse - z_target
        loss = (1 - epsilon) * nll + (epsilon / V) * sum_v(lse - z_v)

    No dense (N, V) target and no (N, V) log-probabilities are built: the logits are the
    largest tensor of a training step, and on a CPU every pass over them costs.
    """
    vocab = logits.size(-1)
    logits = logits.reshape(-1, vocab)  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target.ne(pad_id)  # (N,)
    loss, nll = _SmoothedCrossEntropy.apply(logits, target, keep, epsilon)
    return loss, nll, int(keep.sum())


# Rows of the (N, V) logits each pass of the loss handles at once: about a million values,
# so that the fp32 temporaries stay in the cache and come from the allocator's free list
# instead of fresh pages (the whole (N, V) in fp32 is the largest tensor of a step).
CHUNK_VALUES = 1 << 20


def row_chunks(rows: int, vocab: int) -> list[slice]:
    step = max(1, CHUNK_VALUES // vocab)
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Forward reads the logits once per chunk of rows (logsumexp, the target's logit, row
    sums); backward writes the gradient in one fused pass per chunk:
    (softmax(z) - smoothed_target) * keep. The maths is fp32 whatever the logits' dtype."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, epsilon: float):
        rows, vocab = logits.shape
        lse, z_target, z_sum = (logits.new_empty(rows, dtype=torch.float32) for _ in range(3))
        for part in row_chunks(rows, vocab):
            z = logits[part].float()  # (n, V); no copy when already fp32
            lse[part] = torch.logsumexp(z, dim=1)
            z_target[part] = z.gather(1, target[part, None]).squeeze(1)
            z_sum[part] = z.sum(dim=1)
        nll = lse - z_target  # (N,)
        smooth = vocab * lse - z_sum  # (N,) = sum_v -log p_v
        weight = keep.to(lse.dtype)  # (N,) 0 at padding
        loss = ((1.0 - epsilon) * nll + (epsilon / vocab) * smooth) * weight
        ctx.save_for_backward(logits, target, lse, weight)
        ctx.epsilon = epsilon
        return loss.sum(), (nll * weight).sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target, lse, weight = ctx.saved_tensors
        eps, vocab = ctx.epsilon, logits.size(1)
        # d loss / d z = softmax(z) - ((1 - eps) onehot + eps / V); d nll / d z = softmax - onehot
        scale = (grad_loss + grad_nll) * weight  # (N,)
        uniform = grad_loss * eps / vocab * weight  # (N,)
        onehot = -(grad_loss * (1.0 - eps) + grad_nll) * weight  # (N,)
        grad = torch.empty_like(logits)
        in_place = logits.dtype == torch.float32
        for part in row_chunks(*logits.shape):
            # (n, V) in fp32: written straight into grad when that is fp32
            g = torch.sub(logits[part], lse[part, None], out=grad[part] if in_place else None)
            g.exp_()  # softmax
            g.mul_(scale[part, None])
            g.sub_(uniform[part, None])
            g.scatter_add_(1, target[part, None], onehot[part, None])
            if not in_place:
                grad[part] = g
        return grad, None, None, None


def guided_alignment_loss(attention: Tensor, links: Tensor) -> Tensor:
    """Summed cross-entropy between given links and one layer's cross-attention, heads
    averaged (guided alignment, Garg et al. 2019): each target position with links spreads
    probability 1 evenly over its linked source positions, and pays -share x log(attention)
    for each. Positions without links cost nothing.

    attention: (B, H, T, S) weights, rows summing to 1; links: (K, 3) long (row, target
    position, source position), as batching.Batch.links. The maths is fp32."""
    batch, _, length, _ = attention.shape
    if links.numel() == 0:
        return attention.new_zeros((), dtype=torch.float32)
    rows, targets, sources = links.unbind(1)  # each (K,)
    picked = attention.float().mean(dim=1)[rows, targets, sources]  # (K,)
    position = rows * length + targets  # (K,) which target position each link is of
    shares = torch.bincount(position, minlength=batch * length)[position]  # (K,)
    return -(picked.clamp_min(1e-9).log() / shares).sum()
