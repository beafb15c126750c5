"""Crash-safe output: a file or a whole directory is replaced at once, never seen half-written.

A file is written to a temporary file next to it, fsynced and renamed over the old one
(atomic_write). A directory is built under another name and swapped in with two renames
(replace_dir); every reader calls recover_dir first, which undoes the one state a crash
between those renames can leave.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from mtkit.errors import OutputError

# --------------------------------------------------------------------------- files


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call write(file) on a temporary file next to `path`, fsync it, then rename it over.

    On any error (disk full, read-only directory) the temporary file is removed and the
    previous file under `path` is left as it was; an OSError becomes an OutputError. The
    parent directory must exist: creating it is the caller's decision. A symlink is
    followed (the file it names is replaced, the link stays); a device, FIFO or socket
    is written through as a shell's `>` would (see _write_through).
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    if _exists_but_not_regular(target):
        _write_through(path, target, write)
        return
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=target.parent)
        # mkstemp creates the file 0600; give it the mode open() would, so that a model or
        # manifest others may read keeps the permissions a plain write gave it
        if hasattr(os, "fchmod"):  # not on Windows, where the mode bits mean little
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        fsync_dir(target.parent)
    except Exception as exc:  # noqa: BLE001 - an OSError, or a writer's error over one
        failed = _os_error_under(exc)
        if failed is None:
            raise
        raise OutputError(f"{path}: cannot write ({failed.strerror or failed}); the "
                          "previous file, if any, is intact") from None
    finally:
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _os_error_under(exc: BaseException) -> OSError | None:
    """The OSError that `exc` is or was raised over. A writer may report a failed write as
    its own error: torch.save's zip writer raises a RuntimeError ("unexpected pos") while
    the disk-full OSError of the write is unwinding, so that OSError is its context."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _exists_but_not_regular(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # missing (or unreadable: the write itself will say why)
        return False


def _write_through(path: Path, target: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write straight into a device or FIFO (`-o /dev/null`, a named pipe): renaming a
    regular file over it would replace the device with a file, and it has no previous
    content to protect. A directory fails here too, with its own error."""
    try:
        with open(target, "wb") as file:
            write(file)
            file.flush()  # (a device such as /dev/full fails here: ENOSPC)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def make_parent_dirs(path: Path, option: str = "-o") -> None:
    """Create the missing directories above the output `path` (`mtkit plot -o
    curves/run.png`); an OutputError naming the option and what is in the way else, where
    mkdir alone would say only `notes.txt: File exists`."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()),
                       None)
        why = (f"{blocker} is a file, not a directory" if blocker is not None
               else f"cannot create {parent} ({exc.strerror or exc})")
        raise OutputError(f"{option} {path}: {why}") from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda file: file.write(data))


def atomic_write_json(path: Path, value: Any, indent: int = 2) -> None:
    """`value` as JSON (UTF-8, ending in a newline)."""
    text = json.dumps(value, indent=indent) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable; a no-op where directories cannot be fsynced."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    try:  # Linux: readable without changing it, so no other thread sees a passing umask
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- directories
#
# OUT is replaced by two renames: OUT -> OUT.old, then PARTIAL -> OUT. A crash between
# them leaves only OUT.old, which recover_dir (called by every reader first) renames back.
# Anything else under another name, such as a half-built PARTIAL, is never trusted, and
# the writer's next run removes it.


def old_dir(out_dir: Path) -> Path:
    """Where replace_dir parks the previous OUT while it swaps the new one in."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".old")


def replace_dir(partial: Path, out_dir: Path) -> None:
    """Make the complete directory `partial` become `out_dir`, replacing any previous one.

    `partial` must be fsynced already and be on the same file system as `out_dir`;
    old_dir(out_dir) must not exist (a leftover is the caller's to judge and remove).
    """
    partial, out_dir = Path(partial), Path(out_dir)
    old = old_dir(out_dir)
    if out_dir.exists() and not out_dir.is_dir():  # a file there is not ours to replace
        raise OutputError(f"{out_dir}: exists and is not a directory; give a directory path")
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(partial, out_dir)
    fsync_dir(out_dir.parent)
    shutil.rmtree(old, ignore_errors=True)


def recover_dir(out_dir: Path) -> None:
    """Undo a crash between replace_dir's two renames: only OUT.old is there."""
    out_dir = Path(out_dir)
    old = old_dir(out_dir)
    if not out_dir.exists() and old.is_dir():
        try:
            os.replace(old, out_dir)
        except FileNotFoundError:
            pass  # another process (e.g. another rank) recovered it first
