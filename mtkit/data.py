"""Parallel data: reading text, binarising it to token arrays, and batching for training.

On disk, each split and side is two files: `{split}.{side}.bin`, every sentence's token ids
one after the other, and `{split}.{side}.idx`, n+1 int64 offsets into it. The token file
is read through a memory map, so a dataset of any size opens at once and costs (almost)
no memory; only the offsets, 8 bytes a sentence, are loaded.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import shutil
import sys
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from .errors import DataError
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

FORMAT_NAME = "mtkit-bin"
FORMAT_VERSION = 1
CHUNK_LINES = 2000  # lines encoded per task: big enough to amortise IPC, small for memory
DROP_REASONS = ("empty", "too_long", "ratio")
SIDES = ("src", "tgt")

# --------------------------------------------------------------------------- text files


def _open_binary(path: Path, decompress: bool = True) -> IO[bytes]:
    try:
        if decompress and path.suffix == ".gz":
            return gzip.open(path, "rb")
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None


def read_lines(path: Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (plain or .gz) without their line terminator.

    Only '\\n' ends a line (str.splitlines would also split on U+2028 and friends, which
    would silently misalign parallel files); a '\\r' before it is dropped too.
    """
    path = Path(path)
    with _open_binary(path) as f:
        try:
            for number, raw in enumerate(f, start=1):
                yield _decode_line(raw, path, number)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: cannot read: {exc}") from None


def _decode_line(raw: bytes, path: Path, number: int) -> str:
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}:{number}: invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
            f"{exc.start + 1}); fix or re-encode the file"
        ) from None
    if number == 1 and line.startswith("\ufeff"):
        line = line[1:]  # a byte-order mark is an editor artefact, not text
    return line


def _chunks(path: Path, size: int = 1 << 22, decompress: bool = True) -> Iterator[bytes]:
    with _open_binary(path, decompress) as f:
        try:
            while chunk := f.read(size):
                yield chunk
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: cannot read: {exc}") from None


def count_lines(path: Path) -> int:
    """Number of lines read_lines yields (a last line without '\\n' counts)."""
    count, last = 0, b"\n"
    for chunk in _chunks(Path(path)):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def file_fingerprint(path: Path) -> str:
    """Hex digest of the file's bytes (as stored, so compressed for .gz)."""
    digest = hashlib.blake2b(digest_size=20)
    for chunk in _chunks(Path(path), decompress=False):
        digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- encoding

_worker_tokenizer: Tokenizer | None = None

# One encoded chunk: flat src ids, src lengths, flat tgt ids, tgt lengths
Encoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _init_worker(src: bytes, tgt: bytes | None) -> None:
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(src, tgt, threads=1)  # the pool is the parallelism


def _encode_in_worker(chunk: tuple[list[str], list[str]]) -> Encoded:
    assert _worker_tokenizer is not None
    return _encode_chunk(_worker_tokenizer, chunk)


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
            self.local = Tokenizer(tokenizer.src_bytes, tokenizer.tgt_bytes, threads=1)
        else:
            # fork starts workers instantly; they only run SentencePiece, never torch
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self.pool = multiprocessing.get_context(method).Pool(
                workers, _init_worker, (tokenizer.src_bytes, tokenizer.tgt_bytes)
            )

    def map(self, chunks: Iterable[tuple[list[str], list[str]]]) -> Iterator[Encoded]:
        if self.pool is None:
            yield from (_encode_chunk(self.local, chunk) for chunk in chunks)
            return
        # Pool.imap would read the whole input ahead; a bounded queue keeps memory flat
        pending: deque = deque()
        for chunk in chunks:
            pending.append(self.pool.apply_async(_encode_in_worker, (chunk,)))
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
        for f in (self.bin, self.idx):
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
) -> dict[str, Any]:
    writers = [_SideWriter(out / f"{split}.{side}", dtype) for side in SIDES]
    lines, dropped = 0, dict.fromkeys(DROP_REASONS, 0)
    try:
        chunks = _parallel_chunks(split, src, tgt)
        for src_flat, src_lens, tgt_flat, tgt_lens in encoder.map(chunks):
            lines += len(src_lens)
            keep = np.ones(len(src_lens), dtype=bool)
            if limits is not None:
                keep, counts = _keep_mask(src_lens, tgt_lens, *limits)
                dropped = {k: dropped[k] + counts[k] for k in DROP_REASONS}
            writers[0].append(src_flat, src_lens, keep)
            writers[1].append(tgt_flat, tgt_lens, keep)
    finally:
        for writer in writers:
            writer.close()
    return {
        "lines": lines,
        "pairs": lines - sum(dropped.values()),
        "src_tokens": writers[0].tokens,
        "tgt_tokens": writers[1].tokens,
        "filtered": limits is not None,
        "dropped": dropped,
        "src": {"path": os.path.abspath(src), "fingerprint": file_fingerprint(src)},
        "tgt": {"path": os.path.abspath(tgt), "fingerprint": file_fingerprint(tgt)},
    }


def _describe(stats: dict[str, Any], max_len: int, max_ratio: float) -> str:
    text = f"{stats['lines']} lines, {stats['pairs']} pairs kept"
    if stats["filtered"]:
        d = stats["dropped"]
        text += (
            f"; dropped {d['empty']} empty, {d['too_long']} longer than {max_len} tokens, "
            f"{d['ratio']} with length ratio above {max_ratio:g}"
        )
    return text


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
) -> dict[str, Any]:
    """Encode parallel text files into `out_dir`; return the manifest (also manifest.json).

    Pairs of the splits in `filter_splits` are dropped when empty, longer than `max_len`
    tokens or more unbalanced than `max_ratio`; other splits keep every line, so their
    outputs stay aligned with references. `workers`: 0 = one per CPU, 1 = in-process.
    """
    out_dir = Path(out_dir)
    splits = {name: (Path(src), Path(tgt)) for name, (src, tgt) in splits.items()}
    _check_splits(splits)
    _prepare_out_dir(out_dir)

    vocab = max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    dtype = np.dtype(np.uint16 if vocab <= 65535 else np.int32)
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": dtype.name,
        "tokenizer": tokenizer.fingerprint(),
        "max_len": max_len,
        "max_ratio": max_ratio,
        "splits": {},
    }
    workers = workers or _cpu_count()
    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    encoder = None
    try:
        encoder = _Encoder(tokenizer, workers)
        for name, (src, tgt) in splits.items():
            limits = (max_len, max_ratio) if name in filter_splits else None
            stats = _binarize_split(name, src, tgt, encoder, partial, dtype, limits)
            summary = _describe(stats, max_len, max_ratio)
            print(f"binarize {name}: {summary}", file=sys.stderr)
            if stats["pairs"] == 0:
                raise DataError(
                    f"{name}: no sentence pair left after filtering ({summary}); "
                    "check the data or raise data.max_len / data.max_ratio"
                )
            manifest["splits"][name] = stats
        _write_json(partial / "manifest.json", manifest)
        _fsync_dir(partial)
        _swap_in(partial, out_dir)
    finally:
        if encoder is not None:
            encoder.close()
        shutil.rmtree(partial, ignore_errors=True)  # a no-op after a successful swap
    return manifest


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):  # the CPUs this process may use, not the machine's
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_splits(splits: dict[str, tuple[Path, Path]]) -> None:
    """Fail before any work: missing files, empty files, line count mismatches."""
    if not splits:
        raise ValueError("binarize needs at least one split")
    for name, (src, tgt) in splits.items():
        if not _SPLIT_NAME.match(name):
            raise ValueError(f"split name {name!r}: use letters, digits, '_' or '-'")
        src_lines, tgt_lines = count_lines(src), count_lines(tgt)
        if src_lines != tgt_lines:
            raise _length_mismatch(name, src, tgt, src_lines, tgt_lines)
        if src_lines == 0:
            raise DataError(f"{name}: {src} and {tgt} are empty")


def _write_json(path: Path, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- crash safety
#
# OUT is replaced by two renames: OUT -> OUT.old, then OUT.partial-PID -> OUT. A crash
# between them leaves only OUT.old, which load_manifest renames back. Anything else under
# another name is never trusted, and the next binarize removes it.


def _old_dir(out_dir: Path) -> Path:
    return out_dir.with_name(out_dir.name + ".old")


def _prepare_out_dir(out_dir: Path) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _recover(out_dir)
    if out_dir.exists() and not _is_ours(out_dir):
        raise DataError(
            f"{out_dir}: exists and does not hold binarised data; "
            "choose another output directory or remove it"
        )
    old = _old_dir(out_dir)
    if old.exists():  # OUT is complete, so OUT.old is a leftover of an interrupted cleanup
        shutil.rmtree(old)
    for stale in out_dir.parent.glob(f"{glob.escape(out_dir.name)}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _is_ours(path: Path) -> bool:
    """Only an empty directory or one we wrote may be replaced (and its old copy deleted)."""
    return path.is_dir() and ((path / "manifest.json").is_file() or not any(path.iterdir()))


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


def _swap_in(partial: Path, out_dir: Path) -> None:
    old = _old_dir(out_dir)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(partial, out_dir)
    _fsync_dir(out_dir.parent)
    shutil.rmtree(old, ignore_errors=True)


def _recover(out_dir: Path) -> None:
    old = _old_dir(out_dir)
    if not out_dir.exists() and old.is_dir():
        try:
            os.replace(old, out_dir)  # a crash between the two renames of a swap
        except FileNotFoundError:
            pass  # another process (e.g. another rank) recovered it first


def load_manifest(out_dir: Path) -> dict[str, Any] | None:
    """The manifest of complete binarised data in `out_dir`, or None if there is none."""
    out_dir = Path(out_dir)
    _recover(out_dir)
    try:
        manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        return None
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise DataError(
            f"{out_dir}: binarised by a newer mtkit (format version {manifest['version']}); "
            "upgrade mtkit or binarise again"
        )
    return manifest


# --------------------------------------------------------------------------- dataset


class ParallelData:
    """Random access to one binarised split; token arrays stay on disk (memory-mapped)."""

    def __init__(self, out_dir: Path, split: str):
        out_dir = Path(out_dir)
        manifest = load_manifest(out_dir)
        if manifest is None:
            raise DataError(f"{out_dir}: no binarised data found; binarise the data first")
        if split not in manifest["splits"]:
            have = ", ".join(manifest["splits"])
            raise DataError(f"{out_dir}: no split '{split}' in the binarised data (has: {have})")
        dtype = np.dtype(manifest["dtype"])
        self._src_offsets, self._src_tokens = _open_side(out_dir, split, "src", dtype)
        self._tgt_offsets, self._tgt_tokens = _open_side(out_dir, split, "tgt", dtype)
        if len(self._src_offsets) != len(self._tgt_offsets):
            raise DataError(f"{out_dir}: {split} src and tgt differ in length; binarise again")
        self.src_lens = np.diff(self._src_offsets)  # (n,) int64
        self.tgt_lens = np.diff(self._tgt_offsets)  # (n,) int64

    def __len__(self) -> int:
        return len(self.src_lens)

    def src(self, i: int) -> np.ndarray:
        return self._src_tokens[self._src_offsets[i] : self._src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self._tgt_tokens[self._tgt_offsets[i] : self._tgt_offsets[i + 1]]


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


# --------------------------------------------------------------------------- batching


class BatchSampler:
    """Length-bucketed batches under a padded-token budget, reproducible and resumable.

    Each epoch's batches are a pure function of (seed, epoch): pairs are sorted by length
    with random tie-breaking, cut into batches, and the batch order is shuffled. With
    world_size > 1 every rank computes the same list and takes every world_size-th batch.
    """

    def __init__(
        self,
        src_lens: np.ndarray,
        tgt_lens: np.ndarray,
        max_tokens: int,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ):
        src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
        if src_lens.shape != tgt_lens.shape:
            raise ValueError("src_lens and tgt_lens must have the same length")
        if not 0 <= rank < world_size or max_tokens < 1:
            raise ValueError(f"bad sampler settings: {rank=} {world_size=} {max_tokens=}")
        # +1: the model appends EOS to the source and BOS/EOS to the target
        self.widths = np.maximum(src_lens, tgt_lens).astype(np.int64) + 1  # (n,)
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[np.ndarray]] | None = None

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

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _batches(self, epoch: int) -> list[np.ndarray]:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def _make_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        if self.shuffle:
            order = np.lexsort((rng.random(len(self.widths)), self.widths))
        else:
            order = np.argsort(self.widths, kind="stable")
        batches = _cut_sorted(order, self.widths[order], self.max_tokens)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        usable = len(batches) - len(batches) % self.world_size  # every rank gets as many
        return batches[self.rank : usable : self.world_size]


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
    src: torch.Tensor  # (B, S) long: ids + EOS, right-padded with PAD_ID
    tgt_in: torch.Tensor  # (B, T) long: BOS + ids (decoder input)
    tgt_out: torch.Tensor  # (B, T) long: ids + EOS (what the decoder predicts)
    ntokens: int  # non-pad tokens in tgt_out: the loss normaliser

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        src, tgt_in, tgt_out = (
            t.to(device, non_blocking=non_blocking) for t in (self.src, self.tgt_in, self.tgt_out)
        )
        return Batch(src, tgt_in, tgt_out, self.ntokens)


def make_batch(data: ParallelData, indices: list[int], max_len: int | None = None) -> Batch:
    """Pad the pairs at `indices` into tensors; `max_len` cuts longer sides (dev sets keep
    every line, so a line longer than the model allows is shortened rather than dropped)."""
    src_pieces = [data.src(i)[:max_len] for i in indices]
    tgt_pieces = [data.tgt(i)[:max_len] for i in indices]
    src_lens = np.array([len(p) for p in src_pieces], dtype=np.int64)  # (B,)
    tgt_lens = np.array([len(p) for p in tgt_pieces], dtype=np.int64)  # (B,)
    rows = np.arange(len(indices))
    src = _pad_right(src_pieces, src_lens, int(src_lens.max()) + 1)
    src[rows, src_lens] = EOS_ID
    tgt_out = _pad_right(tgt_pieces, tgt_lens, int(tgt_lens.max()) + 1)
    tgt_out[rows, tgt_lens] = EOS_ID
    # the decoder input is the output shifted right by one, starting with BOS, without EOS
    tgt_in = np.empty_like(tgt_out)
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = tgt_out[:, :-1]
    tgt_in[tgt_in == EOS_ID] = PAD_ID
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        ntokens=int(tgt_lens.sum()) + len(indices),
    )


def _pad_right(pieces: list[np.ndarray], lens: np.ndarray, width: int) -> np.ndarray:
    """(B, width) int64 array, row b = pieces[b] then PAD_ID; one vectorised scatter."""
    out = np.full((len(pieces), width), PAD_ID, dtype=np.int64)
    total = int(lens.sum())
    if total:
        rows = np.repeat(np.arange(len(pieces)), lens)  # (total,)
        cols = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)  # (total,)
        out[rows, cols] = np.concatenate(pieces)
    return out
