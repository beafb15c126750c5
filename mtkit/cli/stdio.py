"""Standard input and output as the CLI hands them to commands: a closed stream, or a
write that fails (a full disk under `> FILE`), is one MtkitError line naming the stream,
wherever in a command it is used, instead of a traceback from that call site.

A broken pipe (`| head -1`) is left alone: it still raises BrokenPipeError, which the
commands that stream output end quietly on (exit 141).
"""

from __future__ import annotations

import io
import os
import sys
from typing import NoReturn

from mtkit.errors import DataError, MtkitError, OutputError


def guard_standard_streams() -> None:
    """Called once, before a command runs. Python sets sys.stdin/sys.stdout to None when
    the process starts with that descriptor closed (`<&-`, `>&-`)."""
    if sys.stdin is None:
        _occupy(0)
        sys.stdin = _Closed(DataError("standard input is closed; pipe or redirect the input "
                                      "in (or give -i FILE)"))
    if sys.stdout is None:
        _occupy(1)
        sys.stdout = _Closed(OutputError("standard output is closed; redirect it to a file "
                                         "(or give -o FILE)"))
    elif sys.stdout is sys.__stdout__ and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout = _named_stdout(sys.stdout)  # (not under a test's capture: it is replaced)


def _occupy(fd: int) -> None:
    """Hold a closed standard descriptor on /dev/null, so that the next file opened does
    not get it and receive what a library prints to "stdout" (or be read as stdin)."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:  # the lowest free descriptor: `fd` itself unless 0 and 1 are both closed
        os.dup2(null, fd)
        os.close(null)


class _Closed:
    """Stands for a closed stream: using it raises the stream's error; flushing (what the
    interpreter does at exit) does nothing."""

    def __init__(self, error: MtkitError):
        self._error = error

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> NoReturn:
        raise self._error


class _StdoutFile(io.FileIO):
    """File descriptor 1 whose write errors say "standard output". After one, further
    writes are dropped: the error was reported, and the interpreter's final flush must
    not report it again as an ignored exception."""

    failed = False

    def write(self, data) -> int:  # type: ignore[override]
        if self.failed:
            return len(data)
        try:
            return super().write(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = True
            raise OutputError(f"standard output: {exc.strerror or exc}") from None


def _named_stdout(old: io.TextIOWrapper) -> io.TextIOWrapper:
    """A new sys.stdout over _StdoutFile, with the old one's encoding and buffering."""
    old.flush()
    raw = _StdoutFile(old.fileno(), "wb", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=old.encoding, errors=old.errors,
                            line_buffering=old.line_buffering, write_through=old.write_through)
