"""Batching: which sentences go together, and padding them into the model's tensors.

Training batches are length-bucketed under a padded-token budget and resumable
(BatchSampler); inference batches go longest first (token_batches); make_batch turns the
pairs of a batch into a Batch of padded id tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from mtkit.data.tokenizer import SpecialIds

# an epoch's pairs: (indices into the data, repeats allowed; their widths), both (m,)
EpochItems = Callable[[int], tuple[np.ndarray, np.ndarray]]


def pair_widths(src_lens: np.ndarray, tgt_lens: np.ndarray) -> np.ndarray:
    """Padded positions a pair needs: the longer side, +1 for the EOS / BOS the model adds."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    if src_lens.shape != tgt_lens.shape:
        raise ValueError("src_lens and tgt_lens must have the same length")
    return np.maximum(src_lens, tgt_lens).astype(np.int64) + 1


class BatchSampler:
    """Length-bucketed batches under a padded-token budget, reproducible and resumable.

    Each epoch's batches are a pure function of (seed, epoch): the epoch's pairs
    (`epoch_items`: every pair once, or a weighted sample of several corpora) are sorted
    by length with random tie-breaking, cut into batches, and the batch order is
    shuffled. The list does not depend on how many processes train: under torchrun every
    rank computes the same list, and an update takes its next batches (`take`) and shares
    them out, so the position is one number for the whole job.
    """

    def __init__(self, epoch_items: EpochItems, max_tokens: int, seed: int,
                 shuffle: bool = True):
        if max_tokens < 1:
            raise ValueError(f"bad sampler settings: {max_tokens=}")
        self.epoch_items = epoch_items
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[np.ndarray]] | None = None

    @classmethod
    def fixed(cls, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int,
              shuffle: bool = True) -> BatchSampler:
        """Every pair once an epoch."""
        widths = pair_widths(src_lens, tgt_lens)  # (n,)
        items = np.arange(len(widths))
        return cls(lambda epoch: (items, widths), max_tokens, seed, shuffle)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first batch, unless already in it (e.g. just restored)."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def __len__(self) -> int:
        return len(self._batches(self.epoch))

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches(self.epoch)
        while self.position < len(batches):
            self.position += 1  # before yielding: a checkpoint taken now resumes after it
            yield batches[self.position - 1].tolist()
        # a finished epoch moves on by itself, so a saved state is never ambiguous
        self.epoch, self.position = self.epoch + 1, 0

    def take(self, count: int) -> list[tuple[int, list[int]]]:
        """The next `count` batches of this epoch as (position in the epoch, indices);
        fewer at its end, none once it is over (then `set_epoch` the next one)."""
        batches = self._batches(self.epoch)
        start = min(self.position, len(batches))
        self.position = min(start + count, len(batches))
        return [(i, batches[i].tolist()) for i in range(start, self.position)]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _batches(self, epoch: int) -> list[np.ndarray]:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def _make_batches(self, epoch: int) -> list[np.ndarray]:
        items, widths = self.epoch_items(epoch)  # (m,), (m,)
        rng = np.random.default_rng([self.seed, epoch])
        if self.shuffle:
            order = np.lexsort((rng.random(len(widths)), widths))
        else:
            order = np.argsort(widths, kind="stable")
        batches = _cut_sorted(items[order], widths[order], self.max_tokens)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _cut_sorted(order: np.ndarray, widths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut `order` (widths ascending) into the fewest consecutive batches within budget."""
    batches, start, n = [], 0, len(order)
    while start < n:
        # the largest k with k * widths[start + k - 1] <= max_tokens; grows monotonically
        low, high = 1, min(n - start, max_tokens)
        while low < high:
            mid = (low + high + 1) // 2
            if mid * widths[start + mid - 1] <= max_tokens:
                low = mid
            else:
                high = mid - 1
        batches.append(order[start : start + low])
        start += low
    return batches


def token_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Inference batches: indices longest first, each batch's padded size <= max_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable for ties
    batches, start = [], 0
    while start < len(order):
        size = max(1, max_tokens // max(lengths[order[start]], 1))
        batches.append(order[start : start + size])
        start += size
    return batches


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) long: ids + eos, right-padded with pad
    tgt_in: torch.Tensor  # (B, T) long: start + ids (decoder input)
    tgt_out: torch.Tensor  # (B, T) long: ids + EOS (what the decoder predicts)
    ntokens: int  # non-pad tokens in tgt_out: the loss normaliser
    # (K, 3) long: the pairs' piece links as (row, target position, source position), the
    # target position indexing tgt_out; None when not asked for
    links: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        src, tgt_in, tgt_out = (
            t.to(device, non_blocking=non_blocking) for t in (self.src, self.tgt_in, self.tgt_out)
        )
        links = None if self.links is None else self.links.to(device, non_blocking=non_blocking)
        return Batch(src, tgt_in, tgt_out, self.ntokens, links)


class Pairs(Protocol):
    """Random access to sentence pairs' token ids (dataset.ParallelData, corpora.EpochData)."""

    def src(self, i: int) -> np.ndarray: ...

    def tgt(self, i: int) -> np.ndarray: ...

    def links(self, i: int) -> np.ndarray: ...


def make_batch(data: Pairs, indices: list[int], specials: SpecialIds,
               max_len: int | None = None, links: bool = False) -> Batch:
    """Pad the pairs at `indices` into tensors with the model's special ids; `max_len` cuts
    longer sides (dev sets keep every line, so a line longer than the model allows is
    shortened rather than dropped). `links`: with the pairs' piece links (Batch.links)."""
    src_pieces = [data.src(i)[:max_len] for i in indices]
    tgt_pieces = [data.tgt(i)[:max_len] for i in indices]
    src_lens = np.array([len(p) for p in src_pieces], dtype=np.int64)  # (B,)
    tgt_lens = np.array([len(p) for p in tgt_pieces], dtype=np.int64)  # (B,)
    rows = np.arange(len(indices))
    pad, eos = specials.pad, specials.eos
    # cut first, then ended (specials.source_input): a language token after eos is kept
    width = int(src_lens.max()) + 1
    if specials.tag_after_eos:
        src = _pad_right([np.asarray(specials.source_input(p), dtype=np.int64)
                          for p in src_pieces], src_lens + 1, width, pad)
    else:  # the ids then eos, as source_input ends them, without a loop over the rows
        src = _pad_right(src_pieces, src_lens, width, pad)
        src[rows, src_lens] = eos
    tgt_out = _pad_right(tgt_pieces, tgt_lens, int(tgt_lens.max()) + 1, pad)
    tgt_out[rows, tgt_lens] = eos
    # the decoder input is the output shifted right by one, without eos, after the start
    # token (set last: it may be eos itself, as in models whose decoder starts from </s>)
    tgt_in = np.empty_like(tgt_out)
    tgt_in[:, 1:] = tgt_out[:, :-1]
    tgt_in[tgt_in == eos] = pad
    tgt_in[:, 0] = specials.start
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        ntokens=int(tgt_lens.sum()) + len(indices),
        links=_batch_links(data, indices, src_lens, tgt_lens, specials) if links else None,
    )


def _batch_links(data: Pairs, indices: list[int], src_lens: np.ndarray, tgt_lens: np.ndarray,
                 specials: SpecialIds) -> torch.Tensor:
    """(K, 3) (row, target position, source position) of the pairs' links that fall
    within their (cut) sides; source positions where the encoder reads them."""
    rows = []
    for row, i in enumerate(indices):
        pairs = data.links(i)  # (k, 2) (source, target)
        inside = (pairs[:, 0] < src_lens[row]) & (pairs[:, 1] < tgt_lens[row])
        pairs = pairs[inside]
        where = np.asarray(specials.source_positions(int(src_lens[row])), dtype=np.int64)
        rows.append(np.stack([np.full(len(pairs), row), pairs[:, 1], where[pairs[:, 0]]],
                             axis=1))
    return torch.from_numpy(np.concatenate(rows).astype(np.int64)).reshape(-1, 3)


def _pad_right(pieces: list[np.ndarray], lens: np.ndarray, width: int, pad: int) -> np.ndarray:
    """(B, width) int64 array, row b = pieces[b] then pad; one vectorised scatter."""
    out = np.full((len(pieces), width), pad, dtype=np.int64)
    total = int(lens.sum())
    if total:
        rows = np.repeat(np.arange(len(pieces)), lens)  # (total,)
        cols = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)  # (total,)
        out[rows, cols] = np.concatenate(pieces)
    return out
