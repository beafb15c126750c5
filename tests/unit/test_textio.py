from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from mtkit.errors import DataError
from mtkit.files.textio import count_lines, file_fingerprint, read_json_lines, read_lines


def test_read_lines_strips_only_the_terminator(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(b"\xef\xbb\xbf one \r\nsplit\xe2\x80\xa8not\n\n  last  ")
    expected = [" one ", "split\u2028not", "", "  last  "]  # BOM gone, U+2028 kept inside
    assert list(read_lines(path)) == expected
    assert count_lines(path) == 4
    gz = tmp_path / "x.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert list(read_lines(gz)) == expected and count_lines(gz) == 4
    (tmp_path / "empty.txt").write_bytes(b"")
    assert count_lines(tmp_path / "empty.txt") == 0


def test_read_lines_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nok\nma\xf1ana\n")
    with pytest.raises(DataError, match=r"bad\.txt:3: invalid UTF-8 .*fix or re-encode the file"):
        list(read_lines(bad))
    with pytest.raises(DataError, match=r"missing\.txt: not found"):
        list(read_lines(tmp_path / "missing.txt"))
    truncated = tmp_path / "t.gz"
    truncated.write_bytes(gzip.compress(b"hello\n" * 1000)[:40])
    with pytest.raises(DataError, match=r"t\.gz: cannot read"):
        list(read_lines(truncated))


def test_file_fingerprint(tmp_path: Path, data_dir: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copy(data_dir / "dev.en", copy)
    assert file_fingerprint(copy) == file_fingerprint(data_dir / "dev.en")
    assert file_fingerprint(copy) != file_fingerprint(data_dir / "dev.es")


def test_read_json_lines_skips_lines_that_do_not_decode(tmp_path: Path) -> None:
    """A damaged byte is skipped like a line cut by a crash (plot and info read on)."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": \xff2}\n[3]\n{"step": 4}\n{"step": ')
    assert read_json_lines(path) == [{"step": 1}, {"step": 4}]
    assert read_json_lines(tmp_path / "missing.jsonl") == []


def test_a_remembered_fingerprint_follows_the_file(tmp_path):
    """Asked again, the digest comes from memory, but only while the file is as it was."""
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\n")
    first = file_fingerprint(path)
    assert file_fingerprint(path) == first == hashlib.blake2b(b"one\n", digest_size=20).hexdigest()
    path.write_bytes(b"two\n")  # the same size
    os.utime(path, ns=(10**9, 10**9))  # a time of its own (a coarse clock may repeat one)
    assert file_fingerprint(path) == hashlib.blake2b(b"two\n", digest_size=20).hexdigest()
