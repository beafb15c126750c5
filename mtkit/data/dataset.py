"""A binarised split on disk, opened for random access by sentence index.

The token file `{split}.{side}.bin` is read through a memory map, so a dataset of any
size opens at once and costs (almost) no memory; only the offsets `{split}.{side}.idx`,
8 bytes a sentence, are loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mtkit.data.links import SIDE as LINKS
from mtkit.data.manifest import load_manifest
from mtkit.errors import DataError

NO_LINKS = np.empty((0, 2), dtype=np.int32)


class ParallelData:
    """Random access to one binarised split; token arrays stay on disk (memory-mapped)."""

    def __init__(self, out_dir: Path, split: str):
        out_dir = Path(out_dir)
        manifest = load_manifest(out_dir)
        if manifest is None:
            raise DataError(f"{out_dir}: no binarised data found; binarise the data first")
        if split not in manifest.splits:
            have = ", ".join(manifest.splits)
            raise DataError(f"{out_dir}: no split '{split}' in the binarised data (has: {have})")
        dtype = np.dtype(manifest.dtype)
        self._src_offsets, self._src_tokens = _open_side(out_dir, split, "src", dtype)
        self._tgt_offsets, self._tgt_tokens = _open_side(out_dir, split, "tgt", dtype)
        if len(self._src_offsets) != len(self._tgt_offsets):
            raise DataError(f"{out_dir}: {split} src and tgt differ in length; binarise again")
        self.src_lens = np.diff(self._src_offsets)  # (n,) int64
        self.tgt_lens = np.diff(self._tgt_offsets)  # (n,) int64
        # the piece links of each pair (links.py), for splits binarised with alignments
        self.has_links = manifest.splits[split].links is not None
        if self.has_links:
            self._link_offsets, self._links = _open_side(out_dir, split, LINKS,
                                                         np.dtype(np.int32))
            if len(self._link_offsets) != len(self._src_offsets):
                raise DataError(f"{out_dir}: {split} links and src differ in length; "
                                "binarise again")

    def __len__(self) -> int:
        return len(self.src_lens)

    def src(self, i: int) -> np.ndarray:
        return self._src_tokens[self._src_offsets[i] : self._src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self._tgt_tokens[self._tgt_offsets[i] : self._tgt_offsets[i + 1]]

    def links(self, i: int) -> np.ndarray:
        """(K, 2) int32 (source piece, target piece) links of pair i; none without links."""
        if not self.has_links:
            return NO_LINKS
        flat = self._links[self._link_offsets[i] : self._link_offsets[i + 1]]
        return flat.reshape(-1, 2)


def _open_side(out_dir: Path, split: str, side: str, dtype: np.dtype) -> tuple[np.ndarray, Any]:
    idx, bin_ = out_dir / f"{split}.{side}.idx", out_dir / f"{split}.{side}.bin"
    try:
        offsets = np.fromfile(idx, dtype=np.int64)  # (n+1,): small, so read whole
        size = bin_.stat().st_size
    except OSError as exc:
        raise DataError(f"{out_dir}: cannot read {split}.{side}: {exc.strerror}") from None
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] * dtype.itemsize != size:
        raise DataError(f"{out_dir}: {split}.{side} is corrupt; binarise again")
    if size == 0:  # mmap refuses empty files
        return offsets, np.empty(0, dtype=dtype)
    return offsets, np.memmap(bin_, dtype=dtype, mode="r")
