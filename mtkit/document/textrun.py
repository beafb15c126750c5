"""One text of an HTML fragment with its inline markup, and writing it back around a
translation once `spans.place` has given each inline element its output words."""

from __future__ import annotations

import bisect
import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

from mtkit.document.spans import Interval, ancestry

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


@dataclass(frozen=True)
class Piece:
    """Markup in a text that holds no word (a void tag, a comment, a kept element), tied
    to source word `word`, before it or after it."""

    raw: str
    parent: int  # the inline element it sits in, -1 for none
    offset: int  # where it sat in the text's characters
    word: int
    after: bool
    space_before: bool  # whitespace between it and the word or piece before it
    space_after: bool


@dataclass(frozen=True)
class Run:
    """One text with its inline elements: element e is written starts[e] ... ends[e]."""

    text: int  # its index in Fragment.texts
    n_words: int
    starts: tuple[str, ...]
    ends: tuple[str, ...]
    parents: tuple[int, ...]
    offsets: tuple[int, ...]  # where each element opened in the text's characters
    word_owner: tuple[int, ...]  # each source word's innermost element (-1: none)
    ranges: tuple[Interval, ...]  # each element's first and last source word
    edges: tuple[tuple[bool, bool], ...]  # whether each one's text starts, ends with
    # punctuation: where it does not, a translated word's punctuation stays outside it
    pieces: tuple[Piece, ...]
    lead: str
    trail: str


@dataclass(frozen=True)
class Token:
    """Something written at a gap between output words: a piece, or an element left
    without words (written empty, with the pieces it held)."""

    text: str
    path: tuple[int, ...]  # the elements it sits in, outermost first
    offset: int
    space_before: bool = False
    space_after: bool = False


def escape(text: str, entities: dict[str, str]) -> str:
    return "".join(entities.get(ch) or _ESCAPES.get(ch, ch) for ch in text)


def path(parents: tuple[int, ...], element: int) -> tuple[int, ...]:
    return tuple(reversed(ancestry(parents, element)))


class Writing(NamedTuple):
    """What writing a run's words takes besides them: the source's entity spellings, and
    the strings (placeholders) no tag may cut."""

    entities: dict[str, str]
    kept: tuple[str, ...]


def write_run(run: Run, words: list[tuple[str, str]], spans: list[Interval],
              by_source: list[list[int]], entities: dict[str, str],
              kept: tuple[str, ...] = ()) -> str:
    """The run's HTML: `words` are the translation's (word, whitespace before it); no tag
    goes inside a string of `kept` (placeholders)."""
    n = len(words)
    innermost = [-1] * n
    for e, (start, end) in enumerate(spans):
        for j in range(start, end):  # spans nest: the deepest one holding j is written last
            if innermost[j] == -1 or \
                    len(ancestry(run.parents, e)) > len(ancestry(run.parents, innermost[j])):
                innermost[j] = e
    word_paths = [path(run.parents, e) for e in innermost]
    gaps: list[list[Token]] = [[] for _ in range(n + 1)]
    empty = [start == end for start, end in spans]
    allowed: dict[int, list[int]] = {}  # by parent: the gaps a piece may take
    for piece in run.pieces:
        if piece.parent >= 0 and empty[piece.parent]:
            continue  # written inside its empty element
        if piece.parent not in allowed:
            allowed[piece.parent] = _allowed_gaps(run, spans, n, piece.parent)
        gap = _nearest_gap(allowed[piece.parent], _wanted_gap(piece, by_source, n))
        gaps[gap].append(Token(piece.raw, path(run.parents, piece.parent), piece.offset,
                               piece.space_before, piece.space_after))
    for e, (start, _) in enumerate(spans):
        parent = run.parents[e]
        if empty[e] and (parent < 0 or not empty[parent]):
            gaps[start].append(Token(_written_empty(run, e), path(run.parents, parent),
                                     run.offsets[e]))
    tokens: list[Token | int] = []  # an int: output word j
    for g in range(n + 1):
        before = word_paths[g - 1] if g > 0 else ()
        after = word_paths[g] if g < n else ()
        tokens += sorted(gaps[g], key=lambda t: (_stage(t.path, before, after), t.offset))
        if g < n:
            tokens.append(g)
    return _write(run, tokens, words, word_paths, Writing(entities, kept))


def _wanted_gap(piece: Piece, by_source: list[list[int]], n_out: int) -> int:
    """Beside the output words of the piece's source word, or of the nearest one that has
    any; where it sat proportionally when no word has links."""
    n_src = len(by_source)
    for step in range(n_src):
        for w in ((piece.word,) if step == 0 else (piece.word - step, piece.word + step)):
            if 0 <= w < n_src and by_source[w]:
                after = piece.after if step == 0 else w < piece.word
                return by_source[w][-1] + 1 if after else by_source[w][0]
    return round((piece.word + piece.after) * n_out / max(n_src, 1))


def _nearest_gap(allowed: list[int], wanted: int) -> int:
    """The gap of `allowed` (ascending) nearest `wanted`, the lower one on a tie."""
    at = bisect.bisect_left(allowed, wanted)
    near = allowed[max(at - 1, 0):at + 1]
    return min(near, key=lambda g: (abs(g - wanted), g))


def _allowed_gaps(run: Run, spans: list[Interval], n_out: int, parent: int) -> list[int]:
    """The gaps inside the parent's span (-1: the run) and outside its children's."""
    low, high = spans[parent] if parent >= 0 else (0, n_out)
    blocked = bytearray(high - low + 1)
    for e, p in enumerate(run.parents):
        if p == parent and spans[e][1] - spans[e][0] > 1:
            start, end = spans[e]
            blocked[start + 1 - low:end - low] = b"\x01" * (end - start - 1)
    return [low + k for k, no in enumerate(blocked) if not no]


def _written_empty(run: Run, element: int) -> str:
    inner = [(p.offset, 0, p.raw) for p in run.pieces if p.parent == element]
    inner += [(run.offsets[e], 1, _written_empty(run, e))
              for e, parent in enumerate(run.parents) if parent == element]
    return run.starts[element] + "".join(text for _, _, text in sorted(inner)) + \
        run.ends[element]


def _stage(token_path: tuple[int, ...], before: tuple[int, ...], after: tuple[int, ...]) -> int:
    """The token's place in the walk from the word before the gap (closing its elements
    outward) to the word after it (opening its elements inward)."""
    shared = 0
    while shared < min(len(before), len(after)) and before[shared] == after[shared]:
        shared += 1
    d = len(token_path)
    if d >= shared and before[:d] == token_path:
        return len(before) - d
    if after[:d] == token_path:
        return len(before) - shared + d - shared
    return len(before) - shared


def _write(run: Run, tokens: list[Token | int], words: list[tuple[str, str]],
           word_paths: list[tuple[int, ...]], how: Writing) -> str:
    entities, kept = how
    out = [escape(run.lead, entities)]
    stack: tuple[int, ...] = ()
    previous: Token | int | None = None
    spaced = True  # a space was written since the last word
    written = ""  # the part of the word written last that is out[-1], unescaped
    for token in tokens:
        target = word_paths[token] if isinstance(token, int) else token.path
        shared = 0
        while shared < min(len(stack), len(target)) and stack[shared] == target[shared]:
            shared += 1
        _close(run, out, list(reversed(stack[shared:])), previous, written, how)
        space = _space(previous, token, words, spaced)
        out.append(escape(space, entities))
        spaced = spaced or bool(space)
        stack = target
        if isinstance(token, int):
            written = _open_word(run, out, list(target[shared:]), words[token][0], how)
            spaced = False
        else:
            out += [run.starts[e] for e in target[shared:]] + [token.text]
        previous = token
    _close(run, out, list(reversed(stack)), previous, written, how)
    out.append(escape(run.trail, entities))
    return "".join(out)


def _open_word(run: Run, out: list[str], opening: list[int], word: str,
               how: Writing) -> str:
    """Open `opening` (outermost first) and write the word; its leading punctuation goes
    before the tags of the innermost elements whose source text did not start with
    punctuation (`¿<b>Quién</b>`), inside the others (`<b>¿Quién</b>`)."""
    entities, kept = how
    lead = word[:_uncut(word, len(_punctuation_run(word)), kept, False)]
    inner = len(opening)
    while lead and inner > 0 and not run.edges[opening[inner - 1]][0]:
        inner -= 1
    lead = lead if inner < len(opening) else ""
    out += [run.starts[e] for e in opening[:inner]] + [escape(lead, entities)]
    out += [run.starts[e] for e in opening[inner:]] + [escape(word[len(lead):], entities)]
    return word[len(lead):]


def _close(run: Run, out: list[str], closing: list[int], previous: Token | int | None,
           written: str, how: Writing) -> None:
    """Close `closing` (innermost first) after what was written last; a word's trailing
    punctuation goes after the end tags of the innermost elements whose source text did
    not end with punctuation (`<a>luz</a>.`)."""
    entities, kept = how
    trail = _punctuation_run(written[::-1])[::-1] if isinstance(previous, int) else ""
    trail = written[_uncut(written, len(written) - len(trail), kept, True):]
    count = 0
    while trail and count < len(closing) and not run.edges[closing[count]][1]:
        count += 1
    if count:
        out[-1] = escape(written[:len(written) - len(trail)], entities)
        out += [run.ends[e] for e in closing[:count]] + [escape(trail, entities)]
    out += [run.ends[e] for e in closing[count:]]


def _uncut(word: str, cut: int, kept: tuple[str, ...], onwards: bool) -> int:
    """`cut`, or where it goes so as not to split a kept string of the word: to the
    string's start, or (`onwards`) to its end."""
    moved = True
    while moved:
        moved = False
        for string in kept:
            at = word.find(string)
            while at >= 0:
                if at < cut < at + len(string):
                    cut, moved = (at + len(string) if onwards else at), True
                at = word.find(string, at + 1)
    return cut


def is_punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _punctuation_run(word: str) -> str:
    """The punctuation the word starts with, unless the word is all punctuation."""
    end = 0
    while end < len(word) and is_punctuation(word[end]):
        end += 1
    return word[:end] if end < len(word) else ""


def _space(previous: Token | int | None, token: Token | int, words: list[tuple[str, str]],
           spaced: bool) -> str:
    if previous is None:
        return ""
    if isinstance(previous, Token) and previous.space_after:
        return " "
    if isinstance(token, Token):
        return " " if token.space_before else ""
    if spaced and not isinstance(previous, int):
        return ""
    return "\u00a0" if "\u00a0" in words[token][1] else " "  # two words never touch
