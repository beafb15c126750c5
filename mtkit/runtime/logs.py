"""mtkit's log lines: on stderr, with a time stamp, never on stdout (stdout carries data)."""

from __future__ import annotations

import logging
import sys


def log_to_stderr(level: int) -> None:
    """mtkit's log lines on stderr, from `level` up (also in `serve --processes` children)."""
    log = logging.getLogger("mtkit")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False
