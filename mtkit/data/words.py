"""Which whitespace word of a line each of its pieces spells: how word-level links
(alignments) map to the pieces a model reads, and back.

A line that was read (a source line; a training pair's target) counts the words as
written, found by where in the line SentencePiece took each piece from
(`Tokenizer.spans`): its normaliser can split a word (NFKC makes ´ a space and an
accent) or drop one (control characters), and the links must index the line's own. An
output counts the words of its decoded text, read off growing prefixes of it: a piece
that starts a word, one that continues it, byte pieces that make up a character and
pieces a vocabulary maps to nothing all come out as the decoder spells them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from mtkit.data.tokenizer import Tokenizer

UNITS = ("word", "subword")
SPACE_PIECE = "\u2581"  # SentencePiece's ▁, a space in a piece


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


def line_words(line: str) -> list[int | None]:
    """The whitespace word (from 0, as `str.split` counts) of each character of a line;
    None for whitespace."""
    words: list[int | None] = [None] * len(line)
    for word, match in enumerate(re.finditer(r"\S+", line)):  # \s is str.isspace
        words[match.start():match.end()] = [word] * (match.end() - match.start())
    return words


def spelled_words(tokenizer: Tokenizer, side: str, line: str, ids: list[int]
                  ) -> list[int | None]:
    """The word of `line` (as written: `line_words`) each of its pieces `ids` spells, ids
    as the tokenizer encodes the line (or the first of them): the word of the first
    visible character the piece stands for. A piece standing for no character (one of a
    character's byte pieces but the last) takes the word of the character at its place,
    unless it spells nothing but a space (a lone ▁); tags and language tokens have none."""
    words, pieces = line_words(line), _pieces(tokenizer, side)
    units: list[int | None] = []
    for piece, span in zip(ids, tokenizer.spans(side, line)[: len(ids)], strict=True):
        if span is None:
            units.append(None)
            continue
        begin, end = span
        if begin == end and pieces[piece].strip(SPACE_PIECE):
            end = begin + 1
        units.append(next((w for w in words[begin:end] if w is not None), None))
    return units


@functools.lru_cache(maxsize=16)
def _pieces(tokenizer: Tokenizer, side: str) -> list[str]:
    return tokenizer.pieces(side)


@functools.lru_cache(maxsize=16)
def _tag_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """Tag and language tokens (the one `--tag` puts first among them)."""
    tags = {tokenizer.tagged(tag).source_tag for tag in tokenizer.tags} | {tokenizer.source_tag}
    return frozenset(i for i in tags if i is not None)


def source_units(tokenizer: Tokenizer, line: str, ids: list[int], unit: str
                 ) -> list[int | None]:
    """Each source piece's unit, `ids` being `line` as the tokenizer encodes it (or the
    first of them): its whitespace word of the line as written, or its place among the
    line's pieces (subword); None for tag and language tokens. The tag that `--tag` puts
    before the line is no part of it: counting starts after it."""
    skip = 1 if tokenizer.source_tag is not None and ids[:1] == [tokenizer.source_tag] else 0
    body = ids[skip:]
    if unit == "subword":
        units: list[int | None] = [None] * skip + list(range(len(body)))
    else:
        units = spelled_words(tokenizer, "src", line, ids)
    tags = _tag_ids(tokenizer)
    return [None if i in tags else u for i, u in zip(ids, units)]


def target_units(tokenizer: Tokenizer, line: str, ids: list[int]) -> list[int | None]:
    """Each piece's whitespace word of a target line as written (guided alignment's
    links count those), `ids` being the line as the tokenizer encodes it."""
    return spelled_words(tokenizer, "tgt", line, ids)


def output_units(tokenizer: Tokenizer, ids: list[int], unit: str) -> list[int | None]:
    """Each output piece's unit: its word of the output text, or its place (subword)."""
    if unit == "subword":
        return list(range(len(ids)))
    return piece_words(tokenizer.decode_tgt([ids[: k + 1] for k in range(len(ids))]))


