"""Which whitespace word of a line each of its pieces spells: how word-level links
(alignments) map to the pieces a model reads, and back.

Decoding prefixes, rather than reading piece spellings, works for any tokenizer: a
piece that starts a word, one that continues it, byte pieces that make up a character
and pieces a vocabulary maps to nothing all come out as the decoder spells them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from mtkit.data.tokenizer import Tokenizer

UNITS = ("word", "subword")


def piece_words(prefix_texts: Sequence[str]) -> list[int | None]:
    """The whitespace word (from 0) of each piece of a sequence, given the decoded text of
    each growing prefix of it (pieces 0..k for k = 0, 1, ...): the text's last word when
    piece k changed its visible characters, None when it added only whitespace or nothing."""
    units: list[int | None] = []
    before = ""
    for text in prefix_texts:
        words = text.split()
        visible = "".join(words)
        units.append(len(words) - 1 if visible and visible != before else None)
        before = visible
    return units


@dataclass(frozen=True)
class SourceIds:
    """What mapping a tokenizer's source pieces to words needs, looked up once."""

    tags: frozenset[int]  # tag and language tokens (the one `--tag` puts first among them)
    unk: int
    # a piece that decodes to one visible character: put in place of unknown pieces, which
    # decode to nothing, so that a word made of them still counts (None: none found)
    stand_in: int | None


@functools.lru_cache(maxsize=16)
def source_ids(tokenizer: Tokenizer) -> SourceIds:
    tags = {tokenizer.tagged(tag).source_tag for tag in tokenizer.tags} | {tokenizer.source_tag}
    pieces = tokenizer.pieces("src")
    stand_in = next((i for i, p in enumerate(pieces) if len(p) == 1 and p.isalnum()), None)
    return SourceIds(frozenset(i for i in tags if i is not None), tokenizer.specials.unk,
                     stand_in)


def source_units(tokenizer: Tokenizer, ids: list[int], unit: str) -> list[int | None]:
    """Each source piece's unit: its word of the source line, or its place among the
    line's pieces (subword); None for tag and language tokens. The tag that `--tag` puts
    before the line is no part of it: counting starts after it."""
    known = source_ids(tokenizer)
    skip = 1 if tokenizer.source_tag is not None and ids[:1] == [tokenizer.source_tag] else 0
    body = ids[skip:]
    if unit == "subword":
        units: list[int | None] = list(range(len(body)))
    else:
        shown = [known.stand_in if i == known.unk and known.stand_in is not None else i
                 for i in body]
        units = piece_words(tokenizer.decode_src([shown[: k + 1] for k in range(len(shown))]))
    return [None] * skip + [None if i in known.tags else u for i, u in zip(body, units)]


def output_units(tokenizer: Tokenizer, ids: list[int], unit: str) -> list[int | None]:
    """Each output piece's unit: its word of the output text, or its place (subword)."""
    if unit == "subword":
        return list(range(len(ids)))
    return piece_words(tokenizer.decode_tgt([ids[: k + 1] for k in range(len(ids))]))


