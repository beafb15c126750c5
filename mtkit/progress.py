"""Progress bars for long work: on stderr, and only when stderr is a terminal, so logs,
pipes and stdout (data only) never see them."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def on_terminal() -> bool:
    """Whether bars are shown at all: when stderr is a terminal."""
    return sys.stderr.isatty()


def progress_bar(total: int | None, unit: str, initial: int = 0,
                 enabled: bool = True) -> tqdm | None:
    """A tqdm bar (count, rate, and an ETA when `total` is known), or None."""
    if not enabled or not on_terminal():
        return None
    columns, rows = _terminal_size()
    return tqdm(total=total or None, initial=initial, unit=unit, file=sys.stderr, leave=True,
                ncols=columns, nrows=rows)


def _terminal_size() -> tuple[int, int]:
    """The terminal's columns and rows, 80 x 24 where it reports none: a new
    pseudo-terminal says 0 x 0, and tqdm then draws nothing at all."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except OSError:
        return 80, 24
    return size.columns or 80, size.lines or 24
