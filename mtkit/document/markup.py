"""HTML kept through translation: a fragment taken apart into texts to translate, and put
back together around their translations with each tag where the word links place it.

    fragment = parse_fragment('<p>Dijo <b>Dios</b>: sea la luz.</p><p>Y fué la luz.</p>')
    fragment.texts        # ('Dijo Dios: sea la luz.', 'Y fué la luz.')
    render(fragment, ['And God said: Let there be light.', 'And there was light.'],
           [links0, links1])   # one translation and its word links per text

**Texts.** Block elements (p, div, li, td, h1-h6, ... and br, see htmltree.BLOCK) end a
text: each stretch of text between them is one entry of `Fragment.texts`, translated on
its own (never one sentence across `</p><p>`). Inline elements (b, i, a, span, em, ...)
live inside a text, over its words. A text is the stretch's characters with entities
decoded, every run of whitespace (and control characters) made one space (one U+00A0
when the run holds a non-breaking space), and the leading and trailing whitespace cut
off (written back around the translation as it was).

**Links** are (i, j) pairs, i a whitespace word of the text, j one of the translation,
both from 0: the form of `Aligned.links` (mtkit/decode/align.py).

**What comes back as written:** every tag with its attributes (`title` and `alt` text
included: attributes are never translated), comments, declarations, the whole content of
script, style, code, pre and textarea and of any element marked `translate="no"` or
`class="notranslate"`, and whatever lies between blocks. Void and self-closing tags,
comments and kept elements inside a text are tied to the word they touch and go beside
that word's translation. Elements the source left open are closed, stray end tags are
dropped, a stray `<` or `&` becomes text (`&lt;`, `&amp;`): the repair an HTML parser makes.

**The translation** is written escaped (`&`, `<`, `>`), each character the source wrote
as an entity written with that entity; one space (or the translation's non-breaking
space) between its words, outside the tags at that point. Whitespace just inside an
inline element's tags moves outside them: `a<b> b </b>c` comes back as `a <b>b</b> c`.

**Limits.** A tag inside a word (`un<b>believ</b>able`) marks the whole word, and the
translation of it. An element needs at least one translated word per innermost element
it holds; with fewer words in the translation than that, the elements left over come back
empty (`<b></b>`) beside their neighbours.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mtkit.document.htmltree import BLOCK, Element, Markup, Node, Text, outer, parse_tree
from mtkit.document.spans import ancestry, linked, place
from mtkit.document.textrun import Piece, Run, is_punctuation, write_run

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Fragment:
    """An HTML fragment taken apart: `texts` to translate; `parts`, markup written as it
    was and runs (one per text), in order; `entities`, how the source wrote characters."""

    texts: tuple[str, ...]
    parts: tuple[str | Run, ...]
    entities: tuple[tuple[str, str], ...]


def parse_fragment(html: str) -> Fragment:
    """Take one HTML fragment (or a whole page) apart. Never fails."""
    builder = _Layout()
    builder.lay(parse_tree(html))
    builder.flush()
    return Fragment(tuple(builder.texts), tuple(builder.parts),
                    tuple(sorted(builder.entities.items())))


def render(fragment: Fragment, translations: Sequence[str],
           links: Sequence[Sequence[tuple[int, int]]],
           kept: Sequence[tuple[str, ...]] = ()) -> str:
    """The fragment with each text replaced by its translation, tags placed by the links
    (for text k: pairs (word of texts[k], word of translations[k])); `kept[k]`: strings
    of translation k that no tag may cut (its placeholders), none by default."""
    if not len(translations) == len(links) == len(fragment.texts):
        raise ValueError(f"{len(fragment.texts)} texts, but {len(translations)} "
                         f"translations and {len(links)} link lists")
    entities = dict(fragment.entities)
    return "".join(part if isinstance(part, str) else
                   _render_run(part, translations[part.text], links[part.text], entities,
                               kept[part.text] if kept else ())
                   for part in fragment.parts)


def clean(text: str) -> str:
    """Control characters (NUL, escape, ...) as spaces: never part of a word. Those that
    are whitespace (tab, line breaks) stay, so the whitespace around a text is written
    back as it was."""
    return "".join(" " if unicodedata.category(ch) == "Cc" and not ch.isspace() else ch
                   for ch in text)


def breaks(node: Node) -> bool:
    """Whether the node ends a text: a block, or an element holding one."""
    if isinstance(node, Markup):
        return node.name in BLOCK
    if isinstance(node, Element):
        return node.name in BLOCK or (not node.kept and any(map(breaks, node.children)))
    return False


def has_words(nodes: list[Node]) -> bool:
    for node in nodes:
        if isinstance(node, Text) and clean(node.decoded).strip():
            return True
        if isinstance(node, Element) and not node.kept and has_words(node.children):
            return True
    return False


class _Layout:
    """Walks the tree: block markup into `parts` as written, inline stretches into runs."""

    def __init__(self) -> None:
        self.parts: list[str | Run] = []
        self.texts: list[str] = []
        self.entities: dict[str, str] = {}
        self.inline: list[Node] = []

    def lay(self, nodes: list[Node]) -> None:
        for node in nodes:
            if not breaks(node):
                self.inline.append(node)
                continue
            self.flush()
            if isinstance(node, Element) and not node.kept:
                self.parts.append(node.start)
                self.lay(node.children)
                self.flush()
                self.parts.append(node.end_tag)
            else:
                self.parts.append(outer(node))

    def flush(self) -> None:
        nodes, self.inline = self.inline, []
        if not has_words(nodes):
            if nodes:
                self.parts.append("".join(map(outer, nodes)))
            return
        run, text = _RunBuilder(self.entities).build(nodes, len(self.texts))
        self.parts.append(run)
        self.texts.append(text)


class _RunBuilder:
    def __init__(self, entities: dict[str, str]):
        self.entities = entities
        self.chunks: list[str] = []
        self.owner: list[int] = []  # per character of the text, its innermost element
        self.starts: list[str] = []
        self.ends: list[str] = []
        self.parents: list[int] = []
        self.offsets: list[int] = []
        self.marks: list[tuple[int, str, int]] = []  # (offset, raw, parent) of each piece

    def walk(self, nodes: list[Node], parent: int) -> None:
        for node in nodes:
            if isinstance(node, Text):
                decoded = clean(node.decoded)
                if node.raw.startswith("&") and len(decoded) == 1 and \
                        decoded not in (" ", node.raw):  # a reference, not a stray '&'
                    self.entities.setdefault(decoded, node.raw)
                self.chunks.append(decoded)
                self.owner += [parent] * len(decoded)
            elif isinstance(node, Element) and not node.kept and has_words(node.children):
                element = len(self.starts)
                self.starts.append(node.start)
                self.ends.append(node.end_tag)
                self.parents.append(parent)
                self.offsets.append(len(self.owner))
                self.walk(node.children, element)
            else:
                self.marks.append((len(self.owner), outer(node), parent))

    def build(self, nodes: list[Node], index: int) -> tuple[Run, str]:
        self.walk(nodes, -1)
        chars = "".join(self.chunks)
        words = [(m.start(), m.end()) for m in _WORD.finditer(chars)]
        owners = [Counter(self.owner[a:b]).most_common(1)[0][0] for a, b in words]
        first = min([words[0][0]] + [offset for offset, _, _ in self.marks])
        last = max([words[-1][1]] + [offset for offset, _, _ in self.marks])
        text = chars[words[0][0]:words[0][1]] + "".join(
            ("\u00a0" if "\u00a0" in chars[end:start] else " ") + chars[start:stop]
            for (_, end), (start, stop) in zip(words, words[1:]))
        ranges, edges = self.extents(chars, words)
        run = Run(index, len(words), tuple(self.starts), tuple(self.ends), tuple(self.parents),
                  tuple(self.offsets), tuple(owners), tuple(ranges), tuple(edges),
                  tuple(_pieces(self.marks, words, chars)), chars[:first], chars[last:])
        return run, text

    def extents(self, chars: str, words: list[tuple[int, int]]
                ) -> tuple[list[tuple[int, int]], list[tuple[bool, bool]]]:
        """Each element's first and last source word, and whether its text starts and
        ends with punctuation (`<b>¿Quién?</b>` does, `¿<b>Quién</b>?` does not)."""
        word_at = [-1] * len(chars)
        for w, (a, b) in enumerate(words):
            word_at[a:b] = [w] * (b - a)
        held: list[list[int]] = [[] for _ in self.starts]  # the word characters of each
        for c, owner in enumerate(self.owner):
            if word_at[c] >= 0:
                for e in ancestry(self.parents, owner):
                    held[e].append(c)
        ranges = [(word_at[mine[0]], word_at[mine[-1]]) for mine in held]
        edges = [(is_punctuation(chars[mine[0]]), is_punctuation(chars[mine[-1]]))
                 for mine in held]
        return ranges, edges


def _pieces(marks: list[tuple[int, str, int]], words: list[tuple[int, int]],
            chars: str) -> list[Piece]:
    starts, ends = [a for a, _ in words], [b for _, b in words]
    pieces = []
    for k, (offset, raw, parent) in enumerate(marks):
        before = bisect.bisect_right(ends, offset) - 1  # the last word ending by offset
        after = bisect.bisect_left(starts, offset)  # the first word starting at or after it
        inside = after - 1 if after > 0 and starts[after - 1] < offset < ends[after - 1] \
            else None
        has_prev = before >= 0 or k > 0
        has_next = after < len(words) or k + 1 < len(marks)
        same_prev = k > 0 and marks[k - 1][0] == offset
        same_next = k + 1 < len(marks) and marks[k + 1][0] == offset
        space_before = (inside is None and has_prev and not same_prev and offset > 0
                        and chars[offset - 1].isspace())
        space_after = (inside is None and has_next and not same_next and offset < len(chars)
                       and chars[offset].isspace())
        if inside is not None:
            word, tied_after = inside, True
        elif before >= 0 and ends[before] == offset and not (
                after < len(words) and starts[after] == offset):
            word, tied_after = before, True
        elif after < len(words):
            word, tied_after = after, False
        else:
            word, tied_after = before, True
        pieces.append(Piece(raw, parent, offset, word, tied_after, space_before, space_after))
    return pieces


def _render_run(run: Run, translation: str, links: Sequence[tuple[int, int]],
                entities: dict[str, str], kept: tuple[str, ...]) -> str:
    words = [(m.group(), translation[prev:m.start()]) for prev, m in _with_prev(translation)]
    spans = place(run.parents, run.word_owner, run.ranges, links, len(words))
    by_source = linked(links, run.n_words, len(words))
    return write_run(run, words, spans, by_source, entities, kept)


def _with_prev(text: str):
    prev = 0
    for m in _WORD.finditer(text):
        yield prev, m
        prev = m.end()
