"""Sentence splitting of one line, keeping what separates the sentences so that the
line can be put back together exactly, and the translations joined the same way.

The splitter is `sentencex` (Wikimedia's; rules and abbreviation lists for about 300
languages, falling back to its generic rules for a code it does not know). It is the
`split` extra, not a core dependency: it is a compiled wheel, which on a platform
without one needs a Rust toolchain to build, and a user who translates sentence per line
never needs it. `mtkit serve` installs it with its own extra (`serve`), since the
LibreTranslate route splits by default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from mtkit.errors import ConfigError

# targets written without spaces between sentences (and words): joined with none; ISO
# 639-1 codes and the 639-3 ones of NLLB's codes (zho_Hans, jpn_Jpan, ...)
NO_SPACE_LANGS = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "yue",
                            "zho", "jpn", "tha", "lao", "khm", "mya", "bod"})
INSTALL = "pip install 'mtkit[split]' (or: pip install sentencex)"
# a tab (translate's column separator) and what str.splitlines and other readers take
# for a line break: a gap between sentences holding one is joined as a space
_SPACED = str.maketrans(dict.fromkeys("\t\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", " "))
_TRAILING_SPACE = re.compile(r"\s*\Z")


@dataclass(frozen=True)
class Piece:
    """One sentence of a line and the whitespace that followed it there."""

    text: str  # the sentence, without the whitespace after it
    gap: str  # the whitespace after it ("" for the last, unless the line ends in some)


def base_lang(code: str | None) -> str:
    """The language of a code as splitters and joins know it: `es`, `pt-BR` -> `pt`,
    NLLB's `spa_Latn` -> `spa`; "" for none."""
    return re.split(r"[-_]", code or "", maxsplit=1)[0].lower()


def no_space(lang: str | None) -> bool:
    """True for a language written without spaces between sentences."""
    return base_lang(lang) in NO_SPACE_LANGS


@lru_cache(maxsize=1)
def _sentencex() -> ModuleType:
    try:
        import sentencex
    except ImportError:
        raise ConfigError(f"sentence splitting needs sentencex: {INSTALL}") from None
    return sentencex


def require_splitter() -> None:
    """A ConfigError telling the pip command when sentencex is not installed."""
    _sentencex()


def splitter_available() -> bool:
    try:
        _sentencex()
    except ConfigError:
        return False
    return True


def split_sentences(text: str, lang: str | None) -> list[Piece]:
    """The sentences of `text` in language `lang` (a code; None or unknown: generic
    rules), each with the whitespace after it: `join_pieces` of them is `text` again.
    A line of whitespace only is one piece; an empty line none."""
    pieces: list[Piece] = []
    for segment in _sentencex().segment(base_lang(lang) or "en", text):
        gap = _TRAILING_SPACE.search(segment).group()
        body = segment[: len(segment) - len(gap)]
        if not body and pieces:  # whitespace alone: it belongs to the gap before it
            pieces[-1] = Piece(pieces[-1].text, pieces[-1].gap + gap)
        else:
            pieces.append(Piece(body, gap))
    if "".join(p.text + p.gap for p in pieces) != text:  # never seen; never lose text
        return [Piece(text, "")]
    return pieces


def join_pieces(pieces: list[Piece]) -> str:
    return "".join(piece.text + piece.gap for piece in pieces)


def join_translations(texts: list[str], pieces: list[Piece], tgt_lang: str | None) -> str:
    """The translations of a line's sentences as one line: each followed by the
    whitespace that followed its source sentence (none after the last, and none at all
    for a target written without spaces), as a line translated whole has no whitespace
    at its ends. A tab becomes a space (translate's output columns are TAB-separated),
    and so does a character a reader may take for a line break (CR, U+2028, ...)."""
    if no_space(tgt_lang):
        return "".join(text.strip() for text in texts)
    kept = [(text.strip(), piece.gap.translate(_SPACED))
            for text, piece in zip(texts, pieces, strict=True)]
    kept = [(text, gap) for text, gap in kept if text]
    return "".join(text + (gap if k < len(kept) - 1 else "")
                   for k, (text, gap) in enumerate(kept))
