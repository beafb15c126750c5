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


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Forward reads the logits twice (logsumexp, row sums); backward writes the gradient
    in one fused pass: (softmax(z) - smoothed_target) * keep."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, epsilon: float):
        z = logits.float()  # (N, V); no copy when already fp32
        vocab = z.size(1)
        lse = torch.logsumexp(z, dim=1)  # (N,)
        nll = lse - z.gather(1, target[:, None]).squeeze(1)  # (N,)
        smooth = vocab * lse - z.sum(dim=1)  # (N,) = sum_v -log p_v
        weight = keep.to(z.dtype)  # (N,) 0 at padding
        loss = ((1.0 - epsilon) * nll + (epsilon / vocab) * smooth) * weight
        ctx.save_for_backward(logits, target, lse, weight)
        ctx.epsilon = epsilon
        return loss.sum(), (nll * weight).sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target, lse, weight = ctx.saved_tensors
        eps, vocab = ctx.epsilon, logits.size(1)
        # d loss / d z = softmax(z) - ((1 - eps) onehot + eps / V); d nll / d z = softmax - onehot
        grad = logits.float() - lse[:, None]  # (N, V)
        grad.exp_()  # softmax
        grad.mul_(((grad_loss + grad_nll) * weight)[:, None])
        grad.sub_((grad_loss * eps / vocab * weight)[:, None])
        onehot_weight = -(grad_loss * (1.0 - eps) + grad_nll) * weight  # (N,)
        grad.scatter_add_(1, target[:, None], onehot_weight[:, None])
        return grad.to(logits.dtype), None, None, None
