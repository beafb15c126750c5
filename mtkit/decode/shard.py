"""Sharded translation of a big file: each rank of a torchrun job, or each job of a
scheduler's array (`mtkit translate --shard I/N`), translates one contiguous share of
the input's lines. Under torchrun the other ranks send their shares to rank 0, which
writes them after its own, so the output is byte-identical to one process's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mtkit.decode.stats import Stats
from mtkit.errors import ConfigError
from mtkit.files.textio import count_lines, line_offsets
from mtkit.runtime import distributed as dist

CHUNK_BYTES = 1 << 22  # of translated text per message to rank 0


@dataclass(frozen=True)
class Shard:
    index: int  # from 0
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, slash, count = text.partition("/")
        if slash and index.isdigit() and count.isdigit() and int(index) < int(count):
            return cls(int(index), int(count))
        raise ConfigError(f"--shard {text}: expected I/N with 0 <= I < N, e.g. --shard 0/4 "
                          "for the first of four shares")


@dataclass(frozen=True)
class LineRange:
    """A shard's lines of a file: lines [first, last) at bytes [start, end)."""

    first: int
    last: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.last - self.first


def line_range(path: Path, shard: Shard) -> LineRange:
    """The shard's contiguous share of the file's lines (the shares differ by at most one
    line; with fewer lines than shards some are empty)."""
    total = count_lines(path, decompress=False)
    first = total * shard.index // shard.count
    last = total * (shard.index + 1) // shard.count
    start, end = line_offsets(path, [first, last])
    return LineRange(first, last, start, end)


def send_share(translate: Callable[[BinaryIO], Stats], spool: BinaryIO) -> None:
    """A rank other than 0: translate into `spool` (a temporary file), then send it to
    rank 0 in chunks, and its Stats last."""
    stats = translate(spool)
    spool.seek(0)
    while chunk := spool.read(CHUNK_BYTES):
        dist.send_object(chunk, to=0)
    dist.send_object(stats, to=0)


def receive_shares(out: BinaryIO, stats: Stats) -> None:
    """Rank 0, after its own share: write every other rank's share to `out`, in rank
    order, and add their counts to `stats`."""
    for rank in range(1, dist.world_size()):
        while isinstance(message := dist.receive_object(source=rank), bytes):
            out.write(message)
        stats.add(message)
    out.flush()
