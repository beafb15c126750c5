"""Shares of a file's lines: contiguous, in order, covering every line once, as equal as
line counts allow; and the reader stops at a share's end."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from mtkit.decode.shard import Shard, line_range
from mtkit.decode.stream import read_line_buffers
from mtkit.errors import ConfigError
from mtkit.files.textio import count_lines, line_offsets

TEXTS = {
    "empty": b"",
    "one newline": b"\n",
    "no final newline": b"a\n\nb\nlast",
    "final newline": b"a\n\nb\nlast\n",
    "crlf and blanks": b"x\r\n\r\n\n\ny\r\n",
}


def random_text(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    lines = [b"w" * rng.choice([0, 0, 1, 5, 80, 3000]) for _ in range(size)]
    return b"\n".join(lines) + (b"\n" if seed % 2 else b"")


def share_lines(path: Path, shard: Shard) -> list[bytes]:
    lines = line_range(path, shard)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, lines.start, os.SEEK_SET)
        got = [line for buffer in read_line_buffers(fd, 7, lines.end - lines.start)
               for line in buffer]
    finally:
        os.close(fd)
    assert len(got) == lines.count
    return got


@pytest.mark.parametrize("name", [*TEXTS, "random", "over a 4 MiB chunk"])
def test_shares_cover_the_file_in_order(tmp_path, name):
    text = {"random": random_text(300, 1), "over a 4 MiB chunk": random_text(10_000, 2)}.get(
        name, TEXTS.get(name))
    path = tmp_path / "f.txt"
    path.write_bytes(text)
    assert len(text) > (1 << 22) or name != "over a 4 MiB chunk"
    everything = text.split(b"\n")
    if text.endswith(b"\n") or not text:
        everything.pop()  # a final '\n' ends the last line; it starts none
    assert len(everything) == count_lines(path, decompress=False)
    for count in (1, 2, 3, 7, 64):
        ranges = [line_range(path, Shard(i, count)) for i in range(count)]
        assert ranges[0].start == 0 and ranges[-1].end == len(text)
        assert all(a.end == b.start and a.last == b.first for a, b in zip(ranges, ranges[1:]))
        assert max(r.count for r in ranges) - min(r.count for r in ranges) <= 1
        assert [line for i in range(count) for line in share_lines(path, Shard(i, count))] \
            == everything


def test_line_offsets(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"ab\n\ncd\nlast")
    assert line_offsets(path, [0, 1, 2, 3, 4, 9]) == [0, 3, 4, 7, 11, 11]


def test_shard_parse():
    assert Shard.parse("2/5") == Shard(2, 5)
    for bad in ("5/5", "", "1", "x/2", "1/-2", " 1/2"):
        with pytest.raises(ConfigError, match="expected I/N with 0 <= I < N"):
            Shard.parse(bad)
