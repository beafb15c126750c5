"""HTML for the markup tests: a seeded generator of documents, and a strict reader (the
document must be well formed: every element closed, in order) that keeps what the tests
compare."""

from __future__ import annotations

import random
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

from mtkit.document.htmltree import VOID


class Strict(HTMLParser):
    """Reads a document that must be well formed: every element closed, in order. Keeps
    each data-k element's start tag, parent, text, and the comments."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str | None] = [None]  # data-k of the open elements (None: other)
        self.names: list[str] = []
        self.elements: dict[str, tuple[str, str | None]] = {}  # k -> (start tag, parent k)
        self.text: Counter[str] = Counter()  # k -> characters of text inside it
        self.words: dict[str | None, list[str]] = {}  # k -> the words inside it
        self.comments: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        k = self.record(attrs)
        if tag not in VOID:
            self.stack.append(k)
            self.names.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.record(attrs)  # a self-closing tag opens nothing: written as it was

    def record(self, attrs: list) -> str | None:
        k = dict(attrs).get("data-k")
        if k is not None:
            while k in self.elements:  # a damaged document may repeat one
                k += "+"
            parent = next((p for p in reversed(self.stack) if p is not None), None)
            self.elements[k] = (self.get_starttag_text(), parent)
        return k

    def handle_endtag(self, tag: str) -> None:
        assert self.names and self.names[-1] == tag, f"</{tag}> closes {self.names[-1:]}"
        self.names.pop()
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for k in self.stack:
            self.text[k] += len(data.strip())
            self.words.setdefault(k, []).extend(data.split())

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def read(self, html: str) -> Strict:
        self.feed(html)
        self.close()
        assert not self.names, f"left open: {self.names}"
        return self


def verses(data_dir: Path) -> list[str]:
    return (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:200]


class Generator:
    """A seeded random document: canonical whitespace (one space between words, tags
    next to the words they hold), so the identity translation must give it back."""

    def __init__(self, seed: int, sentences: list[str]):
        self.rng = random.Random(seed)
        self.sentences = sentences
        self.k = 0

    def key(self) -> str:
        self.k += 1
        return f' data-k="{self.k}"'

    def document(self) -> str:
        return "".join(self.block(0) for _ in range(self.rng.randint(1, 3)))

    def block(self, depth: int) -> str:
        rng = self.rng
        choice = rng.choice(["p", "h2", "ul", "div", "pre"] if depth < 2 else ["p", "li"])
        if choice == "ul":
            items = "".join(f"<li{self.key()}>{self.inline(0)}</li>"
                            for _ in range(rng.randint(1, 3)))
            return f"<ul{self.key()}>{items}</ul>"
        if choice == "div":
            inner = "\n".join(self.block(depth + 1) for _ in range(rng.randint(1, 2)))
            return f'<div{self.key()} class="c{rng.randint(0, 9)}">\n{inner}\n</div>'
        if choice == "pre":
            return f"<pre{self.key()}>  x &lt; 1\n <b>kept</b>  </pre>"
        return f"<{choice}{self.key()}>{self.inline(0)}</{choice}>"

    def inline(self, depth: int) -> str:
        rng = self.rng
        words = rng.choice(self.sentences).split()[: rng.randint(1, 12)]
        out: list[str] = []
        for word in words:
            roll = rng.random()
            if roll < 0.15 and depth < 4:
                out.append(self.element(depth, word))
            elif roll < 0.2:
                out.append(rng.choice(['<img src="a.png" alt="una luz">', "<!-- nota -->",
                                       "<code>a &amp;&amp; b</code>", "<wbr>",
                                       '<span translate="no">Jehová</span>']))
                out.append(word)
            elif roll < 0.25:
                out.append(rng.choice(["&amp;", "&copy;", "&#8224;", "&lt;&gt;", "y&nbsp;no"]))
                out.append(word)
            else:
                out.append(word)
        return " ".join(out)

    def element(self, depth: int, word: str) -> str:
        rng = self.rng
        name = rng.choice(["b", "i", "em", "strong", "a", "span"])
        attrs = ' href="/v?a=1&amp;b=2" title="Dios"' if name == "a" else ""
        inner = self.inline(depth + 1) if rng.random() < 0.5 else word
        if rng.random() < 0.2 and word[-1] in ",.;:" and inner == word and len(word) > 1:
            return f"<{name}{self.key()}{attrs}>{word[:-1]}</{name}>{word[-1]}"
        return f"<{name}{self.key()}{attrs}>{inner}</{name}>"
