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
from collections.abc import Callable
from pathlib import Path

import pytest
from htmlcheck import Generator, Strict, verses

from mtkit.document.markup import Fragment, parse_fragment, render

SEEDS = range(100)
Links = list[tuple[int, int]]


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


JUNK = ["<", "&", "</b>", "<i>", "<!--", "\x00", "\x1b", "<<", "&#xD800;", "&#0;", "</p>",
        "<p>", "<b", '"', ">", "</", "<!", "<?", "&am", "\udcff", "<script>", "<pre>",
        "<code>", '<a href="x', "<br/>", "<td>", "<li>", "<![CDATA[", "\r\n"]


def damaged(html: str, rng: random.Random) -> str:
    chars = list(html)
    for _ in range(rng.randint(1, 4)):
        roll, at = rng.random(), rng.randrange(len(chars) + 1)
        if roll < 0.4:
            chars.insert(at, rng.choice(JUNK))
        elif roll < 0.7:
            del chars[at:at + rng.randint(1, 10)]
        else:
            chars = chars[:at]
    return "".join(chars)


def test_damaged_documents_are_repaired_never_lost(documents: list[str]) -> None:
    """Junk inserted, pieces cut out, documents cut short: the output is well formed and
    holds exactly the translation's words."""
    for seed, html in enumerate(documents[:40]):
        rng = random.Random(seed)
        for _ in range(4):
            fragment = parse_fragment(damaged(html, rng))
            for fake in (identity, permutation):
                output, translations = translate(fragment, fake, seed)
                Strict().read(output)
                assert parse_fragment(output).texts == tuple(t for t in translations
                                                             if t.strip())


def round_trip(html: str) -> str:
    fragment = parse_fragment(html)
    return render(fragment, list(fragment.texts),
                  [[(i, i) for i in range(len(t.split()))] for t in fragment.texts])


@pytest.mark.parametrize("html, repaired", [
    ("<p>Dios <b>dijo", "<p>Dios <b>dijo</b></p>"),  # closed at the end
    ("<b><i>luz</b> y</i> agua", "<b><i>luz</i></b> y agua"),  # </b> closes <i>; </i> stray
    ("<ul><li>uno<li>dos</ul>", "<ul><li>uno</li><li>dos</li></ul>"),
    ("<p>uno<p>dos", "<p>uno</p><p>dos</p>"),
    ("a < b & c", "a &lt; b &amp; c"),
    ("luz <b", "luz &lt;b"),
    ("x\x00y\x1bz", "x y z"),  # control characters are spaces
    ("<code>a < b</code> c", "<code>a &lt; b</code> c"),  # kept, but a stray "<" escaped
])
def test_malformed_html_is_repaired_as_a_parser_repairs_it(html: str, repaired: str) -> None:
    assert round_trip(html) == repaired


def test_deep_nesting_and_long_texts_do_not_fail() -> None:
    deep = "<b>" * 5000 + "luz" + "</b>" * 5000
    assert parse_fragment(round_trip(deep)).texts == ("luz",)
    long = "<p>" + " ".join(f"<i>w{k}</i> x{k}" for k in range(500)) + "</p>"
    assert round_trip(long) == long


def test_a_span_too_large_for_the_programme_is_swept_with_the_same_guarantees() -> None:
    """A paragraph of 1200 words and 400 sibling elements (past spans.DP_BUDGET), its
    words shuffled: every element still holds words, once, in its place."""
    html = "<p>" + " ".join(f'<b data-k="{k}">w{k}</b> x{k} <img src="{k}.png"> y{k}'
                            for k in range(400)) + "</p>"
    fragment = parse_fragment(html)
    words = fragment.texts[0].split()
    order = list(range(len(words)))
    random.Random(0).shuffle(order)
    output = render(fragment, [" ".join(words[i] for i in order)],
                    [[(i, j) for j, i in enumerate(order)]])
    source, target = Strict().read(html), Strict().read(output)
    assert target.elements == source.elements and all(target.text[k] for k in target.elements)
    assert parse_fragment(output).texts == (" ".join(words[i] for i in order),)
    assert output.count("<img") == 400


def test_blocks_and_br_separate_texts_inline_elements_do_not() -> None:
    fragment = parse_fragment("<h1>Génesis</h1><p>En el <b>principio</b><br>creó Dios</p>"
                              "<ul><li>los cielos</li><li>y la <a href='#'>tierra</a>.</li></ul>")
    assert fragment.texts == ("Génesis", "En el principio", "creó Dios", "los cielos",
                              "y la tierra.")


def test_kept_content_is_neither_translated_nor_changed() -> None:
    html = ('<p>Mira <code>x &lt; y</code> y <span translate="no">Jehová</span> '
            '<span class="a notranslate">Sión</span></p><pre>  luz\n  <b>agua</b></pre>'
            '<script>if (a<b) {}</script><style>p{}</style><!-- nota -->'
            '<img src="a.png" alt="una luz" title="luz">')
    fragment = parse_fragment(html)
    assert fragment.texts == ("Mira y",)
    assert round_trip(html) == html
    output = render(fragment, ["See and"], [[(0, 0), (1, 1)]])
    for kept in ("<code>x &lt; y</code>", '<span translate="no">Jehová</span>',
                 "<pre>  luz\n  <b>agua</b></pre>", "<script>if (a<b) {}</script>",
                 '<img src="a.png" alt="una luz" title="luz">', "<!-- nota -->"):
        assert kept in output


def test_an_element_with_no_aligned_word_takes_that_of_its_nearest_source_word() -> None:
    fragment = parse_fragment("Y dijo <b>Dios</b> luz")  # "Dios" (2) aligns to nothing
    output = render(fragment, ["And said light God"], [[(0, 0), (1, 1), (3, 2)]])
    assert output == "And <b>said</b> light God"  # "dijo" and "luz" as near: the left one
    output = render(fragment, ["And said light God"], [[(0, 0), (3, 2)]])
    assert output == "And said <b>light</b> God"  # "dijo" has no link: "luz" is nearest


def test_punctuation_goes_inside_a_tag_only_where_the_source_had_it_inside() -> None:
    fragment = parse_fragment('Sea la <a href="#">luz</a>. («<i>Amén</i>»)')
    output = render(fragment, ["Let there be light. («Amen»)"],
                    [[(0, 0), (1, 2), (2, 3), (3, 4)]])
    assert output == 'Let there be <a href="#">light</a>. («<i>Amen</i>»)'
    output = render(fragment, ["Light, be it"], [[(2, 0)]])  # punctuation the model added
    assert output == '<a href="#">Light</a>, be <i>it</i>'
    fragment = parse_fragment("<b>¿Quién?</b> dijo")
    assert render(fragment, ["Who? said"], [[(0, 0), (1, 1)]]) == "<b>Who?</b> said"


def test_reordered_elements_keep_their_words_and_nesting() -> None:
    fragment = parse_fragment("<p>el <b>libro <i>rojo</i></b> de <em>Dios</em></p>")
    output = render(fragment, ["God 's red book"], [[(4, 0), (3, 1), (2, 2), (1, 3)]])
    assert output == "<p><em>God</em> 's <b><i>red</i> book</b></p>"


def test_entities_and_nbsp_come_back_as_written() -> None:
    html = "<p>Caín&nbsp;y Abel &copy; &#8224; &amp; &lt;hijos&gt;</p>"
    assert parse_fragment(html).texts == ("Caín\u00a0y Abel © † & <hijos>",)
    assert round_trip(html) == html
    output = render(parse_fragment(html), ["a<b © & c"], [[(0, 0)]])
    assert output == "<p>a&lt;b &copy; &amp; c</p>"


@pytest.mark.parametrize(("html", "expected"), [
    ("<p>\r\n  Hola\r\n</p>", "<p>\r\n  Hello there\r\n</p>"),
    ("<li>\n\t<b>Hola</b> mundo\n</li>", "<li>\n\t<b>Hello</b> there\n</li>"),
    ("<p>\tHola\t</p>", "<p>\tHello there\t</p>"),
    ("<p>&#9;Hola</p>", "<p>&#9;Hello there</p>"),
])
def test_whitespace_around_a_text_comes_back_as_it_was(html: str, expected: str) -> None:
    """A page's line breaks and tabs around a text are kept (a whole-file page keeps its
    layout); inside it, one space separates words."""
    assert round_trip(html) == html
    assert render(parse_fragment(html), ["Hello there"], [[(0, 0), (1, 1)]]) == expected


def test_render_needs_one_translation_per_text() -> None:
    with pytest.raises(ValueError, match="2 texts"):
        render(parse_fragment("<p>a</p><p>b</p>"), ["x"], [[]])


def test_formats_unpack_lines_into_texts_and_repack_one_line_each() -> None:
    from mtkit.decode.align import Aligned
    from mtkit.document.formats import repack, unpack

    lines = ["<p>Hola <b>mundo</b></p><p>Adiós</p>", "", "solo <i>texto</i>"]
    unpacked = unpack(lines, "html")
    assert unpacked.texts == ("Hola mundo", "Adiós", "solo texto") and unpacked.needs_links
    done = [Aligned("Hello world", ((0, 0), (1, 1))), Aligned("Bye", ((0, 0),)),
            Aligned("text only", ((0, 1), (1, 0)))]
    assert repack(unpacked, done) == ["<p>Hello <b>world</b></p><p>Bye</p>", "",
                                      "<i>text</i> only"]
    plain = unpack(lines, "text")
    assert plain.texts == tuple(lines) and not plain.needs_links
    assert repack(plain, [Aligned(line, ()) for line in lines]) == lines


def test_an_unknown_format_is_a_one_line_error() -> None:
    from mtkit.document.formats import check_format
    from mtkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--format htm: expected text or html \(did you "
                                          r"mean html\?\)$"):
        check_format("htm")


def test_the_order_of_work_takes_html_apart_first_and_puts_it_back_last() -> None:
    """pipeline.prepare: one plan per text (numbered by its line), links wanted for every
    sentence; finish: one HTML line per input line, placeholders restored inside it."""
    from mtkit.document.pipeline import DocumentOptions, Translated, finish, prepare

    options = DocumentOptions(format="html")
    lines = ["<p>Abre <b>%s archivos</b></p><p>Adiós</p>", "<br>", "<i>hola</i>"]
    prepared = prepare(lines, options)
    assert [plan.line for plan in prepared.plans] == [0, 0, 2]
    assert prepared.sentences == ("Abre  archivos", "Adiós", "hola")  # %s masked
    assert all(prepared.want_links)
    done = finish(prepared, [Translated("Open files", ((0, 0), (1, 1))),
                             Translated("Bye", ((0, 0),)), Translated("hello", ((0, 0),))],
                  options)
    assert [d.text for d in done] == ["<p>Open <b>%s files</b></p><p>Bye</p>", "<br>",
                                      "<i>hello</i>"]


@pytest.mark.parametrize(("line", "translation", "expected"), [
    ("<p>{0}<b>dijo</b></p>", "", "<p><b>{0}</b></p>"),  # the model dropped the word
    ("<p>%s<b>dijo</b></p>", "", "<p><b>%s</b></p>"),
])
def test_a_tag_never_cuts_a_placeholder(line: str, translation: str, expected: str) -> None:
    """Punctuation at a word's edge goes outside a tag, but not the punctuation of a
    placeholder: '{<b>0</b>}' would be no {0} to a program filling it in."""
    from mtkit.document.pipeline import DocumentOptions, Translated, finish, prepare

    options = DocumentOptions(format="html")
    prepared = prepare([line], options)
    links = tuple((0, j) for j in range(len(translation.split())))
    done = finish(prepared, [Translated(translation, links)], options)
    assert done[0].text == expected


def test_only_the_punctuation_outside_a_kept_string_leaves_the_tag() -> None:
    fragment = parse_fragment("<p>(<b>dijo</b>)</p>")
    assert render(fragment, ["(%s)"], [[(0, 0)]]) == "<p>(%<b>s</b>)</p>"
    assert render(fragment, ["(%s)"], [[(0, 0)]], [("%s",)]) == "<p>(<b>%s</b>)</p>"
