"""Binarising parallel text: encode it with the tokenizer into token arrays on disk.

Each split and side becomes two files: `{split}.{side}.bin`, every sentence's token ids
one after the other, and `{split}.{side}.idx`, n+1 int64 offsets into it (read back by
dataset.ParallelData); `{split}.lines` holds the line number (int64, from 0) of each pair
kept. Lines are encoded in chunks by a pool of worker processes, and the training splits
are filtered on the way. The output directory is built under another name and swapped in
whole (atomic.replace_dir), with manifest.json written last; a split whose files, tag,
tokenizer and filters are unchanged is hard-linked from the old directory, not encoded
again, so adding a corpus encodes only that corpus.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import multiprocessing
import os
import re
import shutil
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mtkit.data.manifest import (
    DROP_REASONS,
    MANIFEST_NAME,
    Manifest,
    SourceFile,
    SplitInfo,
    load_manifest,
)
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError, DataError
from mtkit.files.atomic import old_dir, recover_dir, replace_dir
from mtkit.files.textio import count_lines, file_fingerprint, read_lines
from mtkit.progress import progress_bar
from mtkit.runtime.devices import usable_cores

CHUNK_LINES = 2000  # lines encoded per task: big enough to amortise IPC, small for memory
SIDES = ("src", "tgt")

# --------------------------------------------------------------------------- encoding

_worker_tokenizer: Tokenizer | None = None

# One encoded chunk: flat src ids, src lengths, flat tgt ids, tgt lengths
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _init_worker(src: bytes, tgt: bytes | None, vocab: bytes | None) -> None:
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(src, tgt, threads=1, vocab=vocab)  # the pool is the parallelism


def _encode_in_worker(chunk: tuple[list[str], list[str]], tag: str | None) -> Encoded:
    assert _worker_tokenizer is not None
    return _encode_chunk(_worker_tokenizer.tagged(tag), chunk)


def _encode_chunk(tokenizer: Tokenizer, chunk: tuple[list[str], list[str]]) -> Encoded:
    src_lines, tgt_lines = chunk
    return (*_flatten(tokenizer.encode_src(src_lines)), *_flatten(tokenizer.encode_tgt(tgt_lines)))


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    # numpy arrays pickle far faster than lists of lists on their way back from a worker
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(lens.sum()))
    return flat, lens


class _Encoder:
    """Encodes chunks in input order, in worker processes or (workers=1) in this process."""

    def __init__(self, tokenizer: Tokenizer, workers: int):
        self.workers = workers
        self.pool = None
        self.local = None
        if workers == 1:
            self.local = Tokenizer(tokenizer.src_bytes, tokenizer.tgt_bytes, threads=1,
                                   vocab=tokenizer.vocab_bytes)
        else:
            # fork starts workers instantly; they only run SentencePiece, never torch
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self.pool = multiprocessing.get_context(method).Pool(
                workers, _init_worker,
                (tokenizer.src_bytes, tokenizer.tgt_bytes, tokenizer.vocab_bytes)
            )

    def map(self, chunks: Iterable[tuple[list[str], list[str]]],
            tag: str | None = None) -> Iterator[Encoded]:
        if self.pool is None:
            local = self.local.tagged(tag)
            yield from (_encode_chunk(local, chunk) for chunk in chunks)
            return
        # Pool.imap would read the whole input ahead; a bounded queue keeps memory flat
        pending: deque = deque()
        for chunk in chunks:
            pending.append(self.pool.apply_async(_encode_in_worker, (chunk, tag)))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _parallel_chunks(split: str, src: Path, tgt: Path) -> Iterator[tuple[list[str], list[str]]]:
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)
    while True:
        src_chunk = list(itertools.islice(src_lines, CHUNK_LINES))
        tgt_chunk = list(itertools.islice(tgt_lines, CHUNK_LINES))
        if len(src_chunk) != len(tgt_chunk):  # a file changed since we counted its lines
            raise _length_mismatch(split, src, tgt, count_lines(src), count_lines(tgt))
        if not src_chunk:
            return
        yield src_chunk, tgt_chunk


def _length_mismatch(split: str, src: Path, tgt: Path, src_lines: int, tgt_lines: int) -> DataError:
    return DataError(
        f"{split}: {src} has {src_lines} lines but {tgt} has {tgt_lines}; "
        "parallel files must have the same number of lines"
    )


# --------------------------------------------------------------------------- filtering


def _keep_mask(
    src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int, max_ratio: float
) -> tuple[np.ndarray, dict[str, int]]:
    """Which pairs to keep, and how many were dropped for each reason (first reason wins)."""
    empty = (src_lens == 0) | (tgt_lens == 0)
    too_long = ~empty & ((src_lens > max_len) | (tgt_lens > max_len))
    longer, shorter = np.maximum(src_lens, tgt_lens), np.minimum(src_lens, tgt_lens)
    ratio = ~empty & ~too_long & (longer > max_ratio * shorter)
    dropped = {
        "empty": int(empty.sum()),
        "too_long": int(too_long.sum()),
        "ratio": int(ratio.sum()),
    }
    return ~(empty | too_long | ratio), dropped


class _SideWriter:
    """Appends encoded sentences of one split and side to its .bin and .idx files."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.dtype = dtype
        self.bin = open(f"{prefix}.bin", "wb")
        self.idx = open(f"{prefix}.idx", "wb")
        self.tokens = 0
        self.idx.write(np.zeros(1, dtype=np.int64))

    def append(self, flat: np.ndarray, lens: np.ndarray, keep: np.ndarray) -> None:
        if not keep.all():
            flat, lens = flat[np.repeat(keep, lens)], lens[keep]
        self.bin.write(np.ascontiguousarray(flat, dtype=self.dtype))
        self.idx.write(self.tokens + np.cumsum(lens, dtype=np.int64))
        self.tokens += int(lens.sum())

    def close(self) -> None:
        _close_synced(self.bin)
        _close_synced(self.idx)


def _close_synced(f) -> None:
    if not f.closed:
        f.flush()
        os.fsync(f.fileno())
        f.close()


def _binarize_split(
    split: str,
    src: Path,
    tgt: Path,
    encoder: _Encoder,
    out: Path,
    dtype: np.dtype,
    limits: tuple[int, float] | None,  # (max_len, max_ratio) for filtered splits
    total_lines: int,  # for the progress bar
    tag: str | None,
    files: tuple[SourceFile, SourceFile],  # src and tgt as fingerprinted before encoding
) -> SplitInfo:
    writers = [_SideWriter(out / f"{split}.{side}", dtype) for side in SIDES]
    kept_lines = open(out / f"{split}.lines", "wb")
    lines, dropped = 0, dict.fromkeys(DROP_REASONS, 0)
    bar = progress_bar(total_lines, "line")
    try:
        chunks = _parallel_chunks(split, src, tgt)
        for src_flat, src_lens, tgt_flat, tgt_lens in encoder.map(chunks, tag):
            if bar is not None:
                bar.update(len(src_lens))
            keep = np.ones(len(src_lens), dtype=bool)
            if limits is not None:
                keep, counts = _keep_mask(src_lens, tgt_lens, *limits)
                dropped = {k: dropped[k] + counts[k] for k in DROP_REASONS}
            writers[0].append(src_flat, src_lens, keep)
            writers[1].append(tgt_flat, tgt_lens, keep)
            kept_lines.write(lines + np.flatnonzero(keep).astype(np.int64))
            lines += len(src_lens)
    finally:
        if bar is not None:
            bar.close()
        for writer in writers:
            writer.close()
        _close_synced(kept_lines)
    return SplitInfo(
        lines=lines,
        pairs=lines - sum(dropped.values()),
        src_tokens=writers[0].tokens,
        tgt_tokens=writers[1].tokens,
        filtered=limits is not None,
        dropped=dropped,
        src=files[0],
        tgt=files[1],
        tag=tag,
    )


def _source(path: Path) -> SourceFile:
    return SourceFile(os.path.abspath(path), file_fingerprint(path))


def _reusable(old: Manifest | None, old_dir: Path, dtype: np.dtype, tokenizer: str,
              filters: tuple[int, float], files: tuple[SourceFile, SourceFile],
              tag: str | None, filtered: bool) -> tuple[str, SplitInfo] | None:
    """A split of the old directory made from the same files in the same way, if any:
    (its name, its info)."""
    if old is None or (old.dtype, old.tokenizer) != (dtype.name, tokenizer):
        return None
    if filtered and (old.max_len, old.max_ratio) != filters:
        return None
    fingerprints = (files[0].fingerprint, files[1].fingerprint)
    for name, info in old.splits.items():
        if ((info.src.fingerprint, info.tgt.fingerprint) == fingerprints
                and (info.tag, info.filtered) == (tag, filtered)
                and all((old_dir / f"{name}{suffix}").is_file() for suffix in SPLIT_FILES)):
            return name, info
    return None


SPLIT_FILES = (".src.bin", ".src.idx", ".tgt.bin", ".tgt.idx", ".lines")


def _link_split(old_dir: Path, old_name: str, new_dir: Path, name: str) -> None:
    """The old split's files into new_dir under `name`: hard links (the files are never
    written again once made), or copies where the filesystem has no links."""
    for suffix in SPLIT_FILES:
        source, target = old_dir / f"{old_name}{suffix}", new_dir / f"{name}{suffix}"
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


# --------------------------------------------------------------------------- binarize


_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def binarize(
    tokenizer: Tokenizer,
    splits: dict[str, tuple[Path, Path]],
    out_dir: Path,
    workers: int = 0,
    max_len: int = 256,
    max_ratio: float = 3.0,
    filter_splits: tuple[str, ...] = ("train",),
    tags: dict[str, str] | None = None,
) -> Manifest:
    """Encode parallel text files into `out_dir`; return the manifest (also manifest.json).

    Pairs of the splits in `filter_splits` are dropped when empty, longer than `max_len`
    tokens or more unbalanced than `max_ratio`; other splits keep every line, so their
    outputs stay aligned with references. `tags` (split -> tag) starts each source line of
    a split with its tag. `workers`: 0 = one per CPU, 1 = in-process.
    """
    out_dir = Path(out_dir)
    splits = {name: (Path(src), Path(tgt)) for name, (src, tgt) in splits.items()}
    tags = tags or {}
    lines = _check_splits(splits)
    for tag in tags.values():
        tokenizer.tagged(tag)  # a tag the tokenizer lacks fails here, before any work
    _prepare_out_dir(out_dir)
    vocab = max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    out = _Output(
        out_dir=out_dir,
        partial=out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}"),
        old=_old_manifest(out_dir),
        dtype=np.dtype(np.uint16 if vocab <= 65535 else np.int32),
        tokenizer=tokenizer.fingerprint(),
        filters=(max_len, max_ratio),
    )
    shutil.rmtree(out.partial, ignore_errors=True)
    out.partial.mkdir(parents=True)
    encoder = None
    try:
        encoder = _Encoder(tokenizer, workers or usable_cores())
        stats: dict[str, SplitInfo] = {}
        for name, (src, tgt) in splits.items():
            stats[name] = _make_split(out, encoder, name, (src, tgt), lines[name],
                                      tags.get(name), name in filter_splits)
        manifest = Manifest(dtype=out.dtype.name, tokenizer=out.tokenizer, max_len=max_len,
                            max_ratio=max_ratio, splits=stats)
        manifest.write(out.partial)  # last, and it fsyncs `partial`: every entry is durable
        replace_dir(out.partial, out_dir)
    finally:
        if encoder is not None:
            encoder.close()
        shutil.rmtree(out.partial, ignore_errors=True)  # a no-op after a successful swap
    return manifest


@dataclasses.dataclass(frozen=True)
class _Output:
    """Where one binarize call writes, and what the directory it replaces already holds."""

    out_dir: Path
    partial: Path  # built beside out_dir, then swapped in for it whole
    old: Manifest | None  # out_dir's manifest before this call
    dtype: np.dtype  # of the stored token ids: uint16 while every id fits
    tokenizer: str  # the tokenizer's fingerprint
    filters: tuple[int, float]  # (max_len, max_ratio) of the filtered splits


def _make_split(out: _Output, encoder: _Encoder, name: str, paths: tuple[Path, Path],
                lines: int, tag: str | None, filtered: bool) -> SplitInfo:
    """One split into out.partial: linked from the old directory when made the same way
    from the same files, else encoded. Fails when filtering left no pair."""
    files = (_source(paths[0]), _source(paths[1]))  # each file read once to fingerprint it
    same = _reusable(out.old, out.out_dir, out.dtype, out.tokenizer, out.filters, files, tag,
                     filtered)
    if same is not None:
        _link_split(out.out_dir, same[0], out.partial, name)
        split = dataclasses.replace(same[1], src=files[0], tgt=files[1])
        reused = "unchanged, kept: "
    else:
        split = _binarize_split(name, *paths, encoder, out.partial, out.dtype,
                                out.filters if filtered else None, lines, tag, files)
        reused = ""
    summary = split.describe(*out.filters)
    print(f"binarize {name} ({paths[0].name}): {reused}{summary}", file=sys.stderr)
    if split.pairs == 0:
        raise DataError(
            f"{name}: no sentence pair left after filtering ({summary}); "
            "check the data or raise data.max_len / data.max_ratio"
        )
    return split


def _old_manifest(out_dir: Path) -> Manifest | None:
    try:
        return load_manifest(out_dir) if out_dir.is_dir() else None
    except DataError:  # unreadable or of a newer mtkit: nothing to reuse, all is rebuilt
        return None


def _check_splits(splits: dict[str, tuple[Path, Path]]) -> dict[str, int]:
    """Fail before any work: missing files, empty files, line count mismatches. Returns
    the lines of each split."""
    if not splits:
        raise ConfigError("binarize needs at least one split")
    lines = {}
    for name, (src, tgt) in splits.items():
        if not _SPLIT_NAME.match(name):
            raise ConfigError(f"split name {name!r}: use letters, digits, '_' or '-'")
        src_lines, tgt_lines = count_lines(src), count_lines(tgt)
        if src_lines != tgt_lines:
            raise _length_mismatch(name, src, tgt, src_lines, tgt_lines)
        if src_lines == 0:
            raise DataError(f"{name}: {src} and {tgt} are empty")
        lines[name] = src_lines
    return lines


# --------------------------------------------------------------------------- the output directory
#
# OUT is swapped in by atomic.replace_dir; the new data is built in OUT.partial-PID, so
# that concurrent runs and a dead run's leftovers are told apart by the PID.


def _prepare_out_dir(out_dir: Path) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(out_dir)
    if out_dir.exists() and not _is_ours(out_dir):
        raise DataError(
            f"{out_dir}: exists and does not hold binarised data; "
            "choose another output directory or remove it"
        )
    old = old_dir(out_dir)
    if old.exists():  # OUT is complete, so OUT.old is a leftover of an interrupted cleanup
        shutil.rmtree(old)
    for stale in out_dir.parent.glob(f"{glob.escape(out_dir.name)}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _is_ours(path: Path) -> bool:
    """Only an empty directory or one we wrote may be replaced (and its old copy deleted)."""
    return path.is_dir() and ((path / MANIFEST_NAME).is_file() or not any(path.iterdir()))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
