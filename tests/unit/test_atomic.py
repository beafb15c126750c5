"""atomic.py, mtkit's one atomic writer: a failed write keeps the previous file, modes
are plain, and a directory swap recovers from a crash between its two renames."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from mtkit.errors import OutputError
from mtkit.files.atomic import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    old_dir,
    recover_dir,
    replace_dir,
)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"previous")

    def fail(file) -> None:
        file.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError) as info:
        atomic_write(path, fail)
    assert str(info.value) == (
        f"{path}: cannot write (No space left on device); the previous file, if any, is intact"
    )
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]  # the temp file is gone

    with pytest.raises(OutputError, match="cannot write"):  # no parent directories made
        atomic_write_json(tmp_path / "missing" / "x.json", {})
    assert not (tmp_path / "missing").exists()


def test_atomic_write_gives_a_plain_file_mode(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    atomic_write_json(tmp_path / "x.json", {"a": 1})
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == '{\n  "a": 1\n}\n'
    mode = stat.S_IMODE((tmp_path / "x.json").stat().st_mode)
    assert mode == stat.S_IMODE(plain.stat().st_mode)  # what open() gives, not mkstemp's 0600


def test_replace_dir_and_recovery_from_a_crash_between_the_renames(tmp_path: Path) -> None:
    out, old = tmp_path / "export", old_dir(tmp_path / "export")
    assert old == tmp_path / "export.old"

    def build(name: str, content: str) -> Path:
        partial = tmp_path / name
        partial.mkdir()
        (partial / "file").write_text(content)
        return partial

    replace_dir(build("p1", "first"), out)  # no previous OUT
    replace_dir(build("p2", "second"), out)
    assert (out / "file").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]

    # a crash after OUT -> OUT.old, before PARTIAL -> OUT: only OUT.old (and PARTIAL) remain
    build("p3", "third")
    os.replace(out, old)
    recover_dir(out)
    assert (out / "file").read_text() == "second" and not old.exists()
    recover_dir(out)  # nothing to do: a no-op
    assert (out / "file").read_text() == "second"
    shutil.rmtree(out)
    recover_dir(out)  # neither exists: still a no-op
    assert not out.exists() and not old.exists()


def char_device(path: Path, minor: int) -> Path:
    """A copy of /dev/null (minor 3) or /dev/full (minor 7) at `path` (root only)."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_atomic_write_follows_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"previous")
    (tmp_path / "link").symlink_to("real")
    atomic_write_bytes(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_atomic_write_writes_through_a_device_and_a_fifo(tmp_path: Path) -> None:
    null = char_device(tmp_path / "null", 3)
    atomic_write_bytes(null, b"gone")
    assert stat.S_ISCHR(null.stat().st_mode)  # still the device, not a file

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    atomic_write_bytes(fifo, b"through the pipe")
    reader.join(timeout=30)
    assert read == [b"through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_full_device_is_an_output_error(tmp_path: Path) -> None:
    full = char_device(tmp_path / "full", 7)
    with pytest.raises(OutputError) as info:
        atomic_write_bytes(full, b"x" * 100_000)
    assert str(info.value) == f"{full}: cannot write (No space left on device)"
    assert stat.S_ISCHR(full.stat().st_mode)


def test_replace_dir_never_replaces_a_file(tmp_path: Path) -> None:
    (tmp_path / "partial").mkdir()
    (tmp_path / "out").write_bytes(b"a file")
    with pytest.raises(OutputError, match="not a directory"):
        replace_dir(tmp_path / "partial", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"a file"
