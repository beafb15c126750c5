"""An HTML fragment as a repaired tree that remembers the source text of every token.

`html.parser` tokenises anything (a stray `<` or `&` comes out as text) but nests
nothing; `parse_tree` nests its tokens as a browser does in the common cases (void
elements, an open `<p>` closed by the next block, `<li>` by the next `<li>`, an end tag
closing the elements left open inside it, stray end tags dropped, elements left open
closed at the end) and keeps each token's exact source text, so that `outer` writes the
markup back verbatim and adds only what the source left out: the end tags of elements
it never closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser

VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
# Content never translated and written back exactly (the list, plus textarea,
# whose content is raw text too); an element marked translate="no" or class="notranslate"
# (the HTML attribute and the convention web translators honour) is kept the same way.
KEPT = frozenset({"script", "style", "code", "pre", "textarea"})
BLOCK = frozenset(
    "address article aside blockquote body caption dd details dialog div dl dt fieldset "
    "figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li "
    "main menu nav ol option p pre section select summary table tbody td tfoot th thead "
    "title tr ul br".split())  # br ends a text run too: lines of verse, addresses
_P_SCOPE = frozenset({"button", "table", "td", "th", "caption", "object", "template"})
# start tag -> (the open elements it closes, the elements that stop the search for them)
IMPLIED_END: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu"})),
    "dt": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "dd": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "tr": (frozenset({"tr", "td", "th"}), frozenset({"table", "thead", "tbody", "tfoot"})),
    "td": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "th": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "option": (frozenset({"option"}), frozenset({"select"})),
}
_CLOSES_P = BLOCK - {"br", "td", "th", "tr", "tbody", "thead", "tfoot", "caption", "option",
                     "title", "head", "body", "html", "dt", "dd", "legend", "summary"}
CDATA = frozenset({"script", "style"})  # content the parser reads raw up to the end tag
MAX_DEPTH = 256  # deeper start tags are dropped (their text stays): recursion stays bounded


@dataclass
class Text:
    """Character data as written (entities unexpanded)."""

    raw: str

    @property
    def decoded(self) -> str:
        return unescape(self.raw)


@dataclass
class Markup:
    """Markup that holds no text: a void or self-closing tag, a comment, a declaration, a
    processing instruction."""

    raw: str
    name: str = ""  # the tag name for tags, "" for the others


@dataclass
class Element:
    name: str
    start: str  # the start tag as written
    kept: bool  # content not translated: script, style, code, pre, translate="no"
    children: list[Node] = field(default_factory=list)
    end: str | None = None  # the end tag as written; None when the source left it open

    @property
    def end_tag(self) -> str:
        return self.end if self.end is not None else f"</{self.name}>"


Node = Text | Markup | Element


def outer(node: Node) -> str:
    """The node as written, with the end tags the source left out."""
    if isinstance(node, Element):
        return node.start + "".join(outer(child) for child in node.children) + node.end_tag
    return node.raw


def is_kept(name: str, attrs: list[tuple[str, str | None]]) -> bool:
    values = {key.lower(): (value or "").strip().lower() for key, value in attrs}
    return (name in KEPT or values.get("translate") == "no"
            or "notranslate" in values.get("class", "").split())


class _Builder(HTMLParser):
    """Collects the tokens with their source offsets; `parse_tree` nests them."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=False)  # entities stay as written in the tokens
        self.source = source
        self.line_starts = [0] + [i + 1 for i, ch in enumerate(source) if ch == "\n"]
        # (kind, tag name, attributes, start offset, length when known)
        self.tokens: list[tuple[str, str, list[tuple[str, str | None]], int, int | None]] = []

    def _add(self, kind: str, name: str = "", attrs: list | None = None,
             length: int | None = None) -> None:
        line, column = self.getpos()  # where the token being handled starts
        self.tokens.append((kind, name, attrs or [], self.line_starts[line - 1] + column,
                            length))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs, len(self.get_starttag_text() or ""))

    def handle_startendtag(self, tag, attrs):
        self._add("markup", tag, None, len(self.get_starttag_text() or ""))

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("text")

    def handle_entityref(self, name):
        self._add("text")

    def handle_charref(self, name):
        self._add("text")

    def handle_comment(self, data):
        self._add("markup")

    def handle_decl(self, decl):
        self._add("markup")

    def handle_pi(self, data):
        self._add("markup")

    def unknown_decl(self, data):
        self._add("markup")


def parse_tree(html: str) -> list[Node]:
    """The fragment's top-level nodes. Never fails: every input is some tree."""
    builder = _Builder(html)
    builder.feed(html)
    builder.close()
    offsets = [token[3] for token in builder.tokens] + [len(html)]
    root = Element("", "", False)
    stack = [root]
    for (kind, name, attrs, start, length), end in zip(builder.tokens, offsets[1:]):
        # what the parser skipped (a '&' it could not read at the end) follows as text
        cut = min(end, start + length) if length else end
        raw, skipped = html[start:cut], html[cut:end]
        if kind == "text":
            skipped, raw = raw, ""
        elif kind == "markup" or (kind == "start" and name in VOID):
            stack[-1].children.append(Markup(raw, name))
        elif kind == "start":
            _close_implied(stack, name)
            if len(stack) <= MAX_DEPTH:
                element = Element(name, raw, stack[-1].kept or is_kept(name, attrs))
                stack[-1].children.append(element)
                stack.append(element)
        else:
            _close(stack, name, raw)
        if skipped:
            if stack[-1].name not in CDATA:  # a stray "<", text to the parser: escaped, so
                skipped = skipped.replace("<", "&lt;")  # no tag written after it joins it
            stack[-1].children.append(Text(skipped))
    return root.children


def _close_implied(stack: list[Element], name: str) -> None:
    """Close what the start tag `name` ends implicitly (an open <p> before a block, ...)."""
    closes, stops = IMPLIED_END.get(name, (frozenset(), frozenset()))
    if name in _CLOSES_P:
        closes, stops = closes | {"p"}, stops | _P_SCOPE
    for depth in range(len(stack) - 1, 0, -1):
        if stack[depth].name in closes:
            del stack[depth:]
            return
        if stack[depth].name in stops or stack[depth].kept:
            return


def _close(stack: list[Element], name: str, raw: str) -> None:
    """An end tag closes its element and those left open inside it; a stray one is
    dropped (a browser drops it too)."""
    for depth in range(len(stack) - 1, 0, -1):
        if stack[depth].name == name:
            stack[depth].end = raw
            del stack[depth:]
            return
