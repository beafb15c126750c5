"""Label-smoothed cross-entropy, as in the paper (epsilon 0.1) and fairseq."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, pad_id: int
) -> tuple[Tensor, Tensor, int]:
    """Summed label-smoothed loss, summed plain NLL and the number of non-pad targets.

    logits: (N, V) or (B, T, V), any float dtype; the maths runs in fp32.
    target: (N,) or (B, T) token ids; positions holding pad_id count for nothing.

    The smoothed target puts 1 - epsilon on the reference token and epsilon / V on every
    token (the reference included), so per position

        loss = (1 - epsilon) * nll + (epsilon / V) * sum_v(-log p_v),   nll = -log p_target

    computed with a gather and a sum instead of a dense (N, V) target distribution.
    """
    vocab = logits.size(-1)
    logp = F.log_softmax(logits.reshape(-1, vocab).float(), dim=-1)  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target.ne(pad_id)  # (N,)
    nll = -logp.gather(1, target[:, None]).squeeze(1)  # (N,)
    smooth = -logp.sum(dim=-1)  # (N,) = sum over the vocabulary of -log p_v
    nll = nll.masked_fill(~keep, 0.0)
    smooth = smooth.masked_fill(~keep, 0.0)
    loss = (1.0 - epsilon) * nll + (epsilon / vocab) * smooth
    return loss.sum(), nll.sum(), int(keep.sum())
