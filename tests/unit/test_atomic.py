"""atomic.py, mtkit's one atomic writer: a failed write keeps the previous file, modes
are plain, and a directory swap recovers from a crash between its two renames."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from mtkit.errors import OutputError
from mtkit.files.atomic import atomic_write, atomic_write_json, old_dir, recover_dir, replace_dir


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
