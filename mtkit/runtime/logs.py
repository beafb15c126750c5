"""mtkit's log lines: on stderr, with a time stamp, never on stdout (stdout carries data)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def log_to_stderr(level: int) -> None:
    """mtkit's log lines on stderr, from `level` up (also in `serve --processes` children)."""
    log = logging.getLogger("mtkit")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


class RunLogFile(logging.FileHandler):
    """A copy of the log lines in a file (RUN_DIR/train.log). A write that fails (a full
    disk) is said once, as a warning on the other handlers, and the file is given up: every
    line is on stderr still, and the files a run needs (checkpoints, metrics.jsonl) report
    their own failures. logging's default is a traceback per line."""

    def __init__(self, path: Path):
        super().__init__(path, encoding="utf-8")
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        failed = sys.exc_info()[1]
        if not isinstance(failed, OSError):
            super().handleError(record)
            return
        self._give_up(failed)

    def close(self) -> None:
        try:
            super().close()  # flushes what is buffered: may fail too
        except OSError as failed:
            self._give_up(failed)

    def _give_up(self, failed: OSError) -> None:
        if self.failed:
            return
        self.failed = True  # before logging: this handler must not take the warning
        logging.getLogger("mtkit").warning(
            "%s: cannot write (%s); the log goes on on stderr only", self.baseFilename,
            failed.strerror or failed)
