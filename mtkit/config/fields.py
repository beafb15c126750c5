"""Field metadata helpers of the recipe's sections (sections.py says what they declare)."""

from __future__ import annotations

from typing import Any

# the largest seed: SentencePiece's generator takes none above 2^32 - 1, numpy's none below 0
SEED_MAX = 2**32 - 1


def between(low: float | None, high: float | None = None, doc: str = "",
            above: bool = False) -> dict[str, Any]:
    """Field metadata: the inclusive range of a number (None = unbounded) and its doc line;
    with `above`, `low` itself is refused (a value must be above it).

    Every number declares one (a test checks it): `between(None)` says "any value" on purpose.
    """
    return {"range": (low, high), "above": above, "doc": doc}


def doc(text: str) -> dict[str, Any]:
    """Field metadata of a key that is not a number: its one-line description."""
    return {"doc": text}
