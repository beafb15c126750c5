"""What a translation job counts (sentences, tokens, truncated and invalid lines) and the
summary line `translate` ends with on stderr."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("mtkit")


@dataclass
class Stats:
    sentences: int = 0
    tokens: int = 0  # target tokens produced (best hypothesis, without EOS)
    truncated: int = 0
    invalid_utf8: int = 0
    seconds: float = 0.0

    def add(self, other: Stats) -> None:
        """Count another process's share of the same job (the clock stays this one's)."""
        self.sentences += other.sentences
        self.tokens += other.tokens
        self.truncated += other.truncated
        self.invalid_utf8 += other.invalid_utf8

    def summary(self) -> str:
        rate = self.sentences / max(self.seconds, 1e-9)
        text = (f"translated {counted(self.sentences, 'sentence')}, "
                f"{counted(self.tokens, 'token')} in {self.seconds:.1f}s ({rate:.1f} "
                "sentences/s)")
        if self.truncated:
            text += f"; {counted(self.truncated, 'input')} truncated"
        if self.invalid_utf8:
            text += (f"; {counted(self.invalid_utf8, 'line')} had invalid UTF-8 "
                     "(replaced)")
        return text

    def truncation(self, line_number: int, length: int, limit: int, what: str = "") -> None:
        """Count an input cut to the model's `limit` tokens; warn of the first three."""
        self.truncated += 1
        if self.truncated <= 3:  # then only counted, in the summary line
            log.warning(
                "input line %d: %s%d tokens, truncated to the model's %d%s",
                line_number, what, length, limit,
                "; further truncations are counted in the summary"
                if self.truncated == 3 else "",
            )


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
