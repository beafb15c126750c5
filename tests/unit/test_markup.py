"""HTML through translation (mtkit/document/markup.py), by invariants over generated
documents: random trees of block and inline elements, void tags, comments, entities,
attributes and kept code around real Bible verses, each "translated" by a fake whose
words and links the test controls. Whatever the translation, the output is well formed,
holds the same elements (by their data-k attribute) with the same attributes in the same
nesting, keeps comments and code verbatim, holds exactly the translation's words, and
gives every element that held words at least one; the identity translation gives the
input back."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mtkit.document.htmltree import VOID
from mtkit.document.markup import Fragment, parse_fragment, render

SEEDS = range(150)
Links = list[tuple[int, int]]


class Strict(HTMLParser):
    """Reads a document that must be well formed: every element closed, in order. Keeps
    each data-k element's start tag, parent, text, and the comments."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str | None] = [None]  # data-k of the open elements (None: other)
        self.names: list[str] = []
        self.elements: dict[str, tuple[str, str | None]] = {}  # k -> (start tag, parent k)
        self.text: Counter[str] = Counter()  # k -> characters of text inside it
        self.comments: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        k = dict(attrs).get("data-k")
        if k is not None:
            assert k not in self.elements, f"element {k} written twice"
            parent = next((p for p in reversed(self.stack) if p is not None), None)
            self.elements[k] = (self.get_starttag_text(), parent)
        if tag not in VOID:
            self.stack.append(k)
            self.names.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.names and self.names[-1] == tag, f"</{tag}> closes {self.names[-1:]}"
        self.names.pop()
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for k in self.stack:
            self.text[k] += len(data.strip())

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


def identity(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    return words, [(i, i) for i in range(len(words))]


def reversal(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    n = len(words)
    return words[::-1], [(n - 1 - j, j) for j in range(n)]


def permutation(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    order = list(range(len(words)))
    rng.shuffle(order)
    return [words[i] for i in order], [(i, j) for j, i in enumerate(order)]


def dropped(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    kept = [i for i in range(len(words)) if rng.random() < 0.6]
    return [words[i] for i in kept], [(i, j) for j, i in enumerate(kept)]


def inserted(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    out, links = [], []
    for i, word in enumerate(words):
        if rng.random() < 0.3:
            out.append(rng.choice(["<&>", "x<b>", "&amp;", "nuevo"]))  # unlinked
        links.append((i, len(out)))
        out.append(word)
    return out, links


def merged(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    out = ["_".join(words[i:i + 2]) for i in range(0, len(words), 2)]
    return out, [(i, i // 2) for i in range(len(words))]


def unlinked(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    return words, []


def noisy(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    n = len(words)
    out = words[: max(1, n - 1)]
    return out, [(rng.randint(-1, n + 1), rng.randint(-1, n + 1)) for _ in range(n)]


def empty(words: list[str], rng: random.Random) -> tuple[list[str], Links]:
    return [], []


Fake = Callable[[list[str], random.Random], tuple[list[str], Links]]
FAKES: list[Fake] = [identity, reversal, permutation, dropped, inserted, merged, unlinked,
                     noisy, empty]


def translate(fragment: Fragment, fake: Fake, seed: int) -> tuple[str, list[str]]:
    rng = random.Random(seed)
    outs, links = [], []
    for text in fragment.texts:
        words, pairs = fake(text.split(), rng)
        outs.append(text if fake is identity else " ".join(words))  # its own whitespace
        links.append(pairs)
    return render(fragment, outs, links), outs


@pytest.fixture(scope="module")
def documents(data_dir: Path) -> list[str]:
    sentences = verses(data_dir)
    return [Generator(seed, sentences).document() for seed in SEEDS]


def test_the_identity_translation_gives_the_document_back(documents: list[str]) -> None:
    for html in documents:
        fragment = parse_fragment(html)
        assert translate(fragment, identity, 0)[0] == html


@pytest.mark.parametrize("fake", FAKES, ids=lambda fake: fake.__name__)
def test_tags_nesting_and_words_survive_any_translation(documents: list[str], fake: Fake
                                                        ) -> None:
    for seed, html in enumerate(documents):
        fragment = parse_fragment(html)
        output, translations = translate(fragment, fake, seed)
        source, target = Strict().read(html), Strict().read(output)
        assert target.elements == source.elements, (html, output)
        assert target.comments == source.comments
        for kept in ("<code>a &amp;&amp; b</code>", '<span translate="no">Jehová</span>',
                     "<pre", '<img src="a.png" alt="una luz">'):
            assert output.count(kept) == html.count(kept)
        said = tuple(t for t in translations if t.strip())  # an empty one is no text
        assert parse_fragment(output).texts == said, (html, output)
        if fake is not empty:
            assert every_element_keeps_a_word(fragment, translations, source, target), \
                (html, output)


def every_element_keeps_a_word(fragment: Fragment, translations: list[str], source: Strict,
                               target: Strict) -> bool:
    """Where the translation has a word per inline element of its text (enough for any
    placement), every element that held text still holds some."""
    short = any(len(translations[part.text].split()) < max(1, len(part.starts))
                for part in fragment.parts if not isinstance(part, str))
    return short or all(target.text[k] > 0 for k in source.elements if source.text[k] > 0)
