"""A strict reader of HTML for the markup tests: the document must be well formed (every
element closed, in order), and it keeps what the tests compare."""

from __future__ import annotations

from collections import Counter
from html.parser import HTMLParser

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
