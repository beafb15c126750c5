"""Reading text files: UTF-8 lines (plain or gzip), line counts and content fingerprints.

Every error is a one-line DataError that names the file (and the line, for bad UTF-8).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from mtkit.errors import DataError

# How compressed files mtkit does not read as such begin (gzip: read under a .gz name only);
# none begins as UTF-8 text does
_COMPRESSED = (
    (re.compile(rb"\xfd7zXZ\x00"), "xz"),
    (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
    (re.compile(rb"PK\x03\x04"), "zip"),
    (re.compile(rb"\x1f\x8b"), "gzip"),
)


def _open_binary(path: Path, decompress: bool = True) -> IO[bytes]:
    """The file to read; with `decompress`, a .gz decompressed, and a file that is
    compressed some other way refused, rather than read as text of a few odd lines."""
    try:
        if decompress and path.suffix == ".gz":
            return gzip.open(path, "rb")
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None
    if decompress and (kind := _compression(f)) is not None:
        f.close()
        rename = " under a .gz name" if kind == "gzip" else ""
        raise DataError(f"{path}: is {kind}-compressed; mtkit reads plain text or gzip{rename}"
                        + (": rename it" if rename else ": decompress it first"))
    return f


def _compression(f: IO[bytes]) -> str | None:
    """The compression the start of an open file shows, if any (it is not consumed)."""
    try:
        head = f.peek(10)[:10] if hasattr(f, "peek") else b""
    except OSError:  # reading says why, in its own words
        return None
    return next((kind for magic, kind in _COMPRESSED if magic.match(head)), None)


def text_file_problem(path: Path) -> str | None:
    """What makes `path` no file to read more than once, or None. Training data is read
    several times (counted, fingerprinted, encoded): the second read of a named pipe
    would wait forever for a writer, and a device reads as something else each time."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "not found"
    except OSError:  # reading says why, in its own words
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, expected a text file"
    if not stat.S_ISREG(mode):
        return ("is not a regular file (a named pipe or a device), and training data is read "
                "more than once; save it to a file first")
    return None


def require_text_file(path: Path) -> None:
    """DataError naming `path` when text_file_problem finds one."""
    if (problem := text_file_problem(path)) is not None:
        raise DataError(f"{path}: {problem}")


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


def stream_lines(stream: IO[bytes], name: str) -> Iterator[str]:
    """The lines of a binary stream (stdin) as `read_lines` gives a file's: a CR before
    the newline and a first line's byte-order mark dropped, bad UTF-8 a DataError
    naming `name` and the line."""
    for number, raw in enumerate(stream, start=1):
        yield _decode_line(raw, name, number)


def _decode_line(raw: bytes, path: Path | str, number: int) -> str:
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


def count_lines(path: Path, decompress: bool = True) -> int:
    """Number of lines read_lines yields (a last line without '\\n' counts); of the
    bytes as stored with `decompress=False`."""
    count, last = 0, b"\n"
    for chunk in _chunks(Path(path), decompress=decompress):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def line_offsets(path: Path, numbers: list[int]) -> list[int]:
    """The byte offsets (in the file as stored) at which the lines numbered `numbers`
    (from 0) start; a number past the last line gives the file's size."""
    found: dict[int, int] = {}
    wanted = sorted(set(numbers))
    line = base = 0  # lines before this chunk, and its offset
    for chunk in _chunks(Path(path), decompress=False):
        newlines = chunk.count(b"\n")
        while wanted and wanted[0] <= line + newlines:
            pos = -1  # line k starts after the k-th newline of the file
            for _ in range(wanted[0] - line):
                pos = chunk.index(b"\n", pos + 1)
            found[wanted.pop(0)] = base + pos + 1
        line += newlines
        base += len(chunk)
    for number in wanted:
        found[number] = base
    return [found[n] for n in numbers]


def file_fingerprint(path: Path) -> str:
    """Hex digest of the file's bytes (as stored, so compressed for .gz). Remembered for
    this process while the file keeps its inode, size and times: a run's checks and stages
    ask about the same corpora several times, and each ask read them whole."""
    try:
        st = os.stat(path)
    except OSError:  # reading says why, in its own words
        return _digest(Path(path))
    return _remembered_digest(os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns,
                              st.st_ctime_ns)


@functools.lru_cache(maxsize=256)
def _remembered_digest(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    return _digest(Path(path))


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for chunk in _chunks(path, decompress=False):
        digest.update(chunk)
    return digest.hexdigest()


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file's value (a stamp, scores.json), or None when it is missing or
    damaged, a value other than an object included (whatever it stood for is then redone
    or reported absent)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file such as metrics.jsonl (none if it is missing);
    a line that does not decode, as UTF-8 or as JSON (the last one cut by a crash, a
    damaged byte), is skipped."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError and json.JSONDecodeError alike
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
