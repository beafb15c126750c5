"""The decoder cache: what `Transformer.decode_step` keeps between calls.

Self-attention keys/values grow by one position per step (preallocated buffers, filled up
to `step`); cross-attention keys/values are computed once per sentence and shared by its
beam rows. `reorder` follows the search as it re-ranks hypotheses and drops sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.model.step import StepWeights
from mtkit.runtime.compiled import compiled_function


@dataclass
class DecoderCache:
    """What `decode_step` needs between calls, for n sentences with `beam` rows each.

    Row i*beam + j is hypothesis j of sentence i. Self-attention K/V are per row,
    preallocated for `max_len` positions and filled up to `step`: writing into a buffer
    beats concatenating a growing tensor every step. Cross-attention K/V are per sentence,
    shared by its beam rows (see CrossAttention).
    """

    self_kv: Tensor  # (layers, 2, R, H, max_len, dh): every layer's K and V in one tensor,
    # so one gather reorders them all; the first `rows` of R are in use, positions < step
    spare_kv: Tensor  # the same shape: where reorder gathers rows into; then they swap
    rows: int  # hypotheses in use = sentences * beam
    beam: int
    cross_k: list[Tensor]  # per decoder layer, (n, H, S, dh); fixed for the whole search
    cross_v: list[Tensor]
    src_keep: Tensor | None  # (n, 1, 1, S) True where attention may look; None = no padding
    max_len: int  # how many decode_step calls the buffers hold
    weights: StepWeights  # the decoder's weights as decode_step reads them (step.py)
    step: int = 0  # positions decoded so far = position of the next token

    @property
    def sentences(self) -> int:
        return self.cross_k[0].size(0)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep row rows[i] as new row i; `sentences` (kept sentence indices, in order)
        when the set of sentences changes, None when it does not.

        Rows may repeat (beam re-ranking). New row i must come from a row of the sentence
        that will be number i // beam: the search only ever re-ranks inside a sentence and
        drops whole sentences. Only the `step` filled positions are copied, and no memory
        is allocated per step: on the CPU, when at most half the rows change (the search
        keeps rows in place where it can), only those are gathered, into the spare buffer,
        and copied back; otherwise every row is gathered into the spare buffer, which then
        swaps with the current one. (On a GPU, counting the changed rows would be a wait
        per step, so it always gathers every row.)
        """
        kept = self.sentences if sentences is None else sentences.numel()
        if rows.numel() != kept * self.beam:
            raise ValueError(f"reorder needs {kept} x {self.beam} rows, got {rows.numel()}")
        count = rows.numel()
        gather = compiled_gather_rows() if rows.device.type == "cpu" else gather_rows
        if gather(self.self_kv, self.spare_kv, rows, self.step):
            self.self_kv, self.spare_kv = self.spare_kv, self.self_kv
        self.rows = count
        if sentences is not None:
            # the sentences that move, found once for all the tensors kept by sentence
            moved_sentences = _changed(sentences) if sentences.device.type == "cpu" else None
            self.cross_k = [_keep_rows(t, sentences, moved_sentences) for t in self.cross_k]
            self.cross_v = [_keep_rows(t, sentences, moved_sentences) for t in self.cross_v]
            if self.src_keep is not None:
                self.src_keep = _keep_rows(self.src_keep, sentences, moved_sentences)

    def gathered(self, into_spare: bool) -> None:
        """Every sentence's rows were reordered outside `reorder`, by gather_rows on this
        cache's buffers (beam.cached_beam_step): swap them if the rows went into the
        spare one."""
        if into_spare:
            self.self_kv, self.spare_kv = self.spare_kv, self.self_kv


def gather_rows(kv: Tensor, spare: Tensor, rows: Tensor, used: int) -> bool:
    """Positions < used of row i of kv (layers, 2, R, H, max_len, dh) become those of old
    row rows[i] (`DecoderCache.reorder`): in place, through `spare`, when on the CPU at most
    half the rows change (False), else gathered into `spare` (True: the two then swap).
    In the Python TorchScript compiles (`compiled_gather_rows`)."""
    count = rows.numel()
    kv = kv[:, :, :, :, :used]  # (layers, 2, R, H, used, dh)
    if rows.device.type == "cpu":
        moved = _changed(rows)
        if 2 * moved.numel() <= count:
            if moved.numel() > 0:  # in about a third of one sentence's steps, no row moves
                _copy_moved(kv, 2, rows, moved, spare[:, :, : moved.numel(), :, :used])
            return False
    torch.index_select(kv, 2, rows, out=spare[:, :, :count, :, :used])
    return True


# gather_rows compiled by TorchScript, once a process (the Python function where it cannot be)
compiled_gather_rows = compiled_function(gather_rows)


def _changed(rows: Tensor) -> Tensor:
    """The new rows i that do not keep their own old row (rows[i] != i)."""
    return (rows != torch.arange(rows.numel(), device=rows.device)).nonzero().squeeze(1)


def _copy_moved(t: Tensor, dim: int, rows: Tensor, moved: Tensor,
                out: Tensor | None = None) -> None:
    """In place along `dim`: row i of t becomes old row rows[i] for each i in `moved`; the
    sources are gathered first (into `out` when given), as some are also destinations."""
    if out is None:
        sources = torch.index_select(t, dim, rows[moved])
    else:
        sources = torch.index_select(t, dim, rows[moved], out=out)
    t.index_copy_(dim, moved, sources)


def _keep_rows(t: Tensor, rows: Tensor, moved: Tensor | None) -> Tensor:
    """t's rows `rows`, in that order: on the CPU (`moved` = _changed(rows)) the first
    rows.numel() rows of t, rewritten in place where they change (t is the cache's own);
    elsewhere (`moved` None) a gather."""
    if moved is None:
        return t.index_select(0, rows)
    _copy_moved(t, 0, rows, moved)
    return t[: rows.numel()]
