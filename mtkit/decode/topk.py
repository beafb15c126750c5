"""The k largest values of each row of a vocabulary-wide tensor, as `Tensor.topk` gives
them, found faster on the CPU.

torch's CPU top-k walks a row value by value, while a maximum over a block of values is
one vectorised pass. So `top_k` cuts each row into blocks of BLOCK values and keeps the k
blocks with the largest maxima: every one of the k best values lies in one of them (a block
holding one has a maximum at least as large as the k-th best value, and at most k blocks
hold one), and a top-k over those k blocks (and the row's last, partial block) finds
them. That pays over a vocabulary of tens of thousands of tokens; over a few thousand,
torch's own top-k is as fast, and is used (docs/benchmarks.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 128  # values per block: a maximum over 128 floats is a few vector instructions
# The blocks are used on rows of at least MIN_LENGTH values, when the k blocks' values are
# at most MOST of a row: below, their dozen operators cost more than torch's top-k saves.
MIN_LENGTH = 12_000
MOST = 1 / 4


def top_k(x: Tensor, k: int, block: int = BLOCK, min_length: int = MIN_LENGTH,
          most: float = MOST) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest values along x's last axis, best first: the
    values of `x.topk(k)`, and its indices wherever the values differ (among equal values
    either may name another of them). Written in the Python TorchScript compiles (the
    compiled beam step calls it), which reads no module-level numbers: hence the
    defaults."""
    length = x.size(-1)
    blocks = length // block
    if x.device.type != "cpu" or length < min_length or k * block > most * length:
        values, indices = x.topk(k)
        return values, indices
    whole = blocks * block  # the values in whole blocks; a partial block after them
    by_block = x[..., :whole].unflatten(-1, [blocks, block])  # (..., blocks, block)
    _, best = by_block.amax(dim=-1).topk(k)  # (..., k) the k blocks
    kept = by_block.gather(-2, best.unsqueeze(-1).expand(list(best.shape) + [block]))
    kept = kept.flatten(-2)
    if whole < length:
        kept = torch.cat([kept, x[..., whole:]], dim=-1)  # (..., k*block + partial)
    values, at = kept.topk(k)  # `at` indexes `kept`
    in_block = at // block  # k and above: the partial block
    indices = best.gather(-1, in_block.clamp(max=k - 1)) * block + at % block
    if whole < length:
        indices = torch.where(in_block < k, indices, at - k * block + whole)
    return values, indices
