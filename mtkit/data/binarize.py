"""Binarising parallel text: encode it with the tokenizer into token arrays on disk.

Each split and side becomes two files: `{split}.{side}.bin`, every sentence's token ids
one after the other, and `{split}.{side}.idx`, n+1 int64 offsets into it (read back by
dataset.ParallelData); `{split}.lines` holds the line number (int64, from 0) of each pair
kept; a split with an alignments file also gets its pairs' piece links (links.py).
Lines are encoded in chunks by a pool of worker processes, and the training splits are
filtered on the way. The output directory is built under another name and swapped in
whole (atomic.replace_dir), with manifest.json written last; a split whose files, tag,
tokenizer and filters are unchanged is hard-linked from the old directory, not encoded
again, so adding a corpus encodes only that corpus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import os
import re
import shutil
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mtkit.data.bindir import (
    SplitInput,
    link_split,
    old_manifest,
    prepare_out_dir,
    reusable_split,
)
from mtkit.data.links import SIDE as LINKS
from mtkit.data.links import encode_links
from mtkit.data.manifest import (
    DROP_REASONS,
    Manifest,
    SplitInfo,
)
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError, DataError, OutputError
from mtkit.files.atomic import replace_dir
from mtkit.files.textio import count_lines, read_lines, require_text_file
from mtkit.progress import progress_bar
from mtkit.runtime.devices import usable_cores

CHUNK_LINES = 2000  # lines encoded per task: big enough to amortise IPC, small for memory
SIDES = ("src", "tgt")

# --------------------------------------------------------------------------- encoding

_worker_tokenizer: Tokenizer | None = None

# A chunk of lines: (src, tgt, alignments or None, the line number of its first pair)
Chunk = tuple[list[str], list[str], list[str] | None, int]
# One encoded chunk: flat src ids, src lengths, flat tgt ids, tgt lengths, then the flat
# piece links (links.py) and their lengths, empty when the split has no alignments
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_NO_LINKS = (np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64))


def _init_worker(src: bytes, tgt: bytes | None, vocab: bytes | None) -> None:
    global _worker_tokenizer
    # Ctrl-C reaches the whole process group: the parent stops the pool (SIGTERM, which a
    # worker dies of quietly); a KeyboardInterrupt here would print each worker's traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_tokenizer = Tokenizer(src, tgt, threads=1, vocab=vocab)  # the pool is the parallelism


def _encode_in_worker(chunk: Chunk, tag: str | None, links_file: str | None) -> Encoded:
    assert _worker_tokenizer is not None
    return _encode_chunk(_worker_tokenizer.tagged(tag), chunk, links_file)


def _encode_chunk(tokenizer: Tokenizer, chunk: Chunk, links_file: str | None) -> Encoded:
    src_lines, tgt_lines, link_lines, first = chunk
    src_ids, tgt_ids = tokenizer.encode_src(src_lines), tokenizer.encode_tgt(tgt_lines)
    links = _NO_LINKS if link_lines is None else encode_links(
        tokenizer, (src_lines, tgt_lines, link_lines), (src_ids, tgt_ids), (links_file, first))
    return (*_flatten(src_ids), *_flatten(tgt_ids), *links)


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

    def map(self, chunks: Iterable[Chunk], tag: str | None = None,
            links_file: str | None = None) -> Iterator[Encoded]:
        if self.pool is None:
            local = self.local.tagged(tag)
            yield from (_encode_chunk(local, chunk, links_file) for chunk in chunks)
            return
        # Pool.imap would read the whole input ahead; a bounded queue keeps memory flat
        pending: deque = deque()
        for chunk in chunks:
            pending.append(self.pool.apply_async(_encode_in_worker, (chunk, tag, links_file)))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _parallel_chunks(split: str, src: Path, tgt: Path, links: Path | None) -> Iterator[Chunk]:
    files = [read_lines(src), read_lines(tgt)] + ([] if links is None else [read_lines(links)])
    first = 1
    while True:
        chunks = [list(itertools.islice(lines, CHUNK_LINES)) for lines in files]
        if len({len(chunk) for chunk in chunks}) > 1:  # a file changed since we counted
            paths = [src, tgt] + ([] if links is None else [links])
            raise _length_mismatch(split, paths)
        if not chunks[0]:
            return
        yield chunks[0], chunks[1], chunks[2] if links is not None else None, first
        first += len(chunks[0])


def _length_mismatch(split: str, files: list[Path]) -> DataError:
    counts = [f"{path} has {count_lines(path)}" for path in files]
    return DataError(f"{split}: {counts[0]} lines but {' and '.join(counts[1:])}; "
                     "parallel files must have the same number of lines")


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
    split: SplitInput,
    encoder: _Encoder,
    out: Path,
    dtype: np.dtype,
    limits: tuple[int, float] | None,  # (max_len, max_ratio) for filtered splits
    total_lines: int,  # for the progress bar
) -> SplitInfo:
    name, links = split.name, split.paths[2]
    writers = [_SideWriter(out / f"{name}.{side}", dtype) for side in SIDES]
    if links is not None:
        writers.append(_SideWriter(out / f"{name}.{LINKS}", np.dtype(np.int32)))
    kept_lines = open(out / f"{name}.lines", "wb")
    lines, dropped = 0, dict.fromkeys(DROP_REASONS, 0)
    bar = progress_bar(total_lines, "line")
    try:
        chunks = _parallel_chunks(name, *split.paths)
        for encoded in encoder.map(chunks, split.tag, None if links is None else str(links)):
            src_lens, tgt_lens = encoded[1], encoded[3]
            if bar is not None:
                bar.update(len(src_lens))
            keep = np.ones(len(src_lens), dtype=bool)
            if limits is not None:
                keep, counts = _keep_mask(src_lens, tgt_lens, *limits)
                dropped = {k: dropped[k] + counts[k] for k in DROP_REASONS}
            for k, writer in enumerate(writers):
                writer.append(encoded[2 * k], encoded[2 * k + 1], keep)
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
        src=split.files[0],
        tgt=split.files[1],
        tag=split.tag,
        links=split.files[2],
    )


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
    alignments: dict[str, Path] | None = None,
) -> Manifest:
    """Encode parallel text files into `out_dir`; return the manifest (also manifest.json).

    Pairs of the splits in `filter_splits` are dropped when empty, longer than `max_len`
    tokens or more unbalanced than `max_ratio`; other splits keep every line, so their
    outputs stay aligned with references. `tags` (split -> tag) starts each source line of
    a split with its tag; `alignments` (split -> file) gives its pairs' word links, kept
    as piece links (links.py). `workers`: 0 = one per CPU, 1 = in-process.
    """
    out_dir = Path(out_dir)
    tags, alignments = tags or {}, alignments or {}
    inputs = {name: (Path(src), Path(tgt), None if name not in alignments
                     else Path(alignments[name])) for name, (src, tgt) in splits.items()}
    lines = _check_splits(inputs)
    for tag in tags.values():
        tokenizer.tagged(tag)  # a tag the tokenizer lacks fails here, before any work
    prepare_out_dir(out_dir)
    vocab = max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    out = _Output(
        out_dir=out_dir,
        partial=out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}"),
        old=old_manifest(out_dir),
        dtype=np.dtype(np.uint16 if vocab <= 65535 else np.int32),
        tokenizer=tokenizer.fingerprint(),
        filters=(max_len, max_ratio),
    )
    encoder = _Encoder(tokenizer, workers or usable_cores())
    try:
        with _sigterm_ends_cleanly():  # installed after the workers start: theirs is the default
            shutil.rmtree(out.partial, ignore_errors=True)
            out.partial.mkdir(parents=True)
            stats: dict[str, SplitInfo] = {}
            for name, paths in inputs.items():
                # each file read once here to fingerprint it
                split = SplitInput.of(name, paths, tags.get(name))
                stats[name] = _make_split(out, encoder, split, lines[name],
                                          name in filter_splits)
            manifest = Manifest(dtype=out.dtype.name, tokenizer=out.tokenizer,
                                max_len=max_len, max_ratio=max_ratio, splits=stats)
            manifest.write(out.partial)  # last, and it fsyncs `partial`: every entry durable
            replace_dir(out.partial, out_dir)
    except OSError as exc:  # a failed read is a DataError by now: this is a write (disk full)
        raise OutputError(f"{out_dir}: cannot write the binarised data ({exc.strerror or exc}); "
                          "the previous data, if any, is intact") from None
    finally:
        encoder.close()
        shutil.rmtree(out.partial, ignore_errors=True)  # a no-op after a successful swap
    return manifest


@contextlib.contextmanager
def _sigterm_ends_cleanly() -> Iterator[None]:
    """SIGTERM (`kill`, `timeout`, a job scheduler) ends binarize as Ctrl-C does, through
    its cleanup: the workers stopped, the half-built directory removed, exit 143. Left to
    its default it ended this process at once, and the workers printed BrokenPipeError
    tracebacks as they found it gone."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler; a caller's thread keeps the default
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclasses.dataclass(frozen=True)
class _Output:
    """Where one binarize call writes, and what the directory it replaces already holds."""

    out_dir: Path
    partial: Path  # built beside out_dir, then swapped in for it whole
    old: Manifest | None  # out_dir's manifest before this call
    dtype: np.dtype  # of the stored token ids: uint16 while every id fits
    tokenizer: str  # the tokenizer's fingerprint
    filters: tuple[int, float]  # (max_len, max_ratio) of the filtered splits


def _make_split(out: _Output, encoder: _Encoder, split: SplitInput, lines: int,
                filtered: bool) -> SplitInfo:
    """One split into out.partial: linked from the old directory when made the same way
    from the same files, else encoded. Fails when filtering left no pair."""
    name = split.name
    same = reusable_split(out.old, out.out_dir, out.dtype, out.tokenizer, out.filters, split,
                     filtered)
    if same is not None:
        link_split(out.out_dir, same, out.partial, name)
        info = dataclasses.replace(same[1], src=split.files[0], tgt=split.files[1],
                                   links=split.files[2])
        reused = "unchanged, kept: "
    else:
        info = _binarize_split(split, encoder, out.partial, out.dtype,
                               out.filters if filtered else None, lines)
        reused = ""
    summary = info.describe(*out.filters)
    print(f"binarize {name} ({split.paths[0].name}): {reused}{summary}", file=sys.stderr)
    if info.pairs == 0:
        raise DataError(
            f"{name}: no sentence pair left after filtering ({summary}); "
            "check the data or raise data.max_len / data.max_ratio"
        )
    return info


def _check_splits(splits: dict[str, tuple[Path, Path, Path | None]]) -> dict[str, int]:
    """Fail before any work: missing files, empty files, line count mismatches. Returns
    the lines of each split."""
    if not splits:
        raise ConfigError("binarize needs at least one split")
    lines = {}
    for name, (src, tgt, links) in splits.items():
        if not _SPLIT_NAME.match(name):
            raise ConfigError(f"split name {name!r}: use letters, digits, '_' or '-'")
        files = [src, tgt] + ([] if links is None else [links])
        for path in files:
            require_text_file(path)
        src_lines, *others = map(count_lines, files)
        if any(count != src_lines for count in others):
            raise _length_mismatch(name, files)
        if src_lines == 0:
            raise DataError(f"{name}: {src} and {tgt} are empty")
        lines[name] = src_lines
    return lines
