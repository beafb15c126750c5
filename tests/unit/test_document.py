"""mtkit.document: splitting joins back to the line, placeholders are found by their
rules, masked without changing the source's words and restored exactly as often as the
source has them, and the order of work keeps the line contract (a scripted translator
stands in for the model)."""

from __future__ import annotations

import random
import re

import pytest

from mtkit.document.pipeline import DocumentOptions, Translated, prepare, translate_documents
from mtkit.document.placeholders import Protection, find, mask, protection, restore
from mtkit.document.split import Piece, join_pieces, join_translations, split_sentences
from mtkit.errors import ConfigError

WORDS = "el rey dijo que la casa de Dios estaba en paz y todos vieron".split()
PLACEHOLDERS = ["%s", "%d", "%1$s", "%.2f", "{0}", "{name}", "$(ARG1)", "%PRODUCTNAME",
                "%NAME%", "https://example.org/a/b.html", "ana@example.com"]


def count(text: str, placeholder: str) -> int:
    return len(re.findall(rf"(?<!\S){re.escape(placeholder)}|{re.escape(placeholder)}", text))


def generated_lines(n: int, seed: int = 0) -> list[str]:
    """Lines of words with placeholders put in as words, glued to words, before
    punctuation, and repeated."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 9))]
        for _ in range(rng.randint(1, 4)):
            placeholder = rng.choice(PLACEHOLDERS)
            form = rng.choice(["{}", "{}", "({})", "{}.", "{},"])
            words.insert(rng.randint(0, len(words)), form.format(placeholder))
        lines.append(" ".join(words) + rng.choice(["", ".", " ?"]))
    return lines


# --------------------------------------------------------------------------- splitting


def test_splitting_joins_back_to_the_exact_line(data_dir):
    pytest.importorskip("sentencex")
    rng = random.Random(1)
    verses = (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:200]
    for k in range(60):
        gaps = [rng.choice([" ", "  ", "\t", " \u00a0"]) for _ in range(6)]
        line = rng.choice(["", " ", "  "]) + "".join(
            verse + gap for verse, gap in zip(verses[k * 3 : k * 3 + 6], gaps))
        pieces = split_sentences(line, "es")
        assert join_pieces(pieces) == line
        assert all(piece.text.strip() == piece.text or k == 0 for piece in pieces[1:])
    assert len(split_sentences("Una frase. Otra frase. ¿Y una tercera?", "es")) == 3
    assert split_sentences("", "es") == []


def test_joining_keeps_the_gaps_between_sentences_and_none_for_zh_ja_th():
    pieces = [Piece("A.", "  "), Piece("B.", "\t"), Piece("C.", " ")]
    assert join_translations(["X.", "Y.", "Z."], pieces, "en") == "X.  Y. Z."
    assert join_translations(["X.", "", "Z."], pieces, "en") == "X.  Z."
    for lang in ("zh", "ja", "th", "zh-Hans", "jpn_Jpan"):
        assert join_translations(["你好。", "谢谢。", "好"], pieces, lang) == "你好。谢谢。好"


@pytest.mark.parametrize("gap", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"])
def test_a_gap_that_breaks_lines_is_joined_as_a_space(gap):
    """A line's sentences separated by a CR or another character that some readers take
    for a line break: the joined translation is still one line to any of them."""
    pieces = [Piece("A.", gap + " "), Piece("B.", "")]
    joined = join_translations(["X.", "Y."], pieces, "en")
    assert joined == "X.  Y."
    assert len(joined.splitlines()) == 1


# --------------------------------------------------------------------------- finding


@pytest.mark.parametrize("text,found", [
    ("Abrir %s de %d y %1$s, %.2f o %(name)s", ["%s", "%d", "%1$s", "%.2f", "%(name)s"]),
    ("Hola {0}, {name} y {} o {0:.2f} {{user}}", ["{0}", "{name}", "{}", "{0:.2f}", "{{user}}"]),
    ("Con $(ARG1) y ${HOME}", ["$(ARG1)", "${HOME}"]),
    ("Bienvenido a %PRODUCTNAME y %NAME%.", ["%PRODUCTNAME", "%NAME%"]),
    ("Vea https://ex.org/a?b=1. O www.ex.org, o ana.b@ex.co.uk!",
     ["https://ex.org/a?b=1", "www.ex.org", "ana.b@ex.co.uk"]),
    # a URL keeps the parentheses it opens and closes, not one around it
    ("Lee https://es.wikipedia.org/wiki/Luz_(física). (Ver www.ex.org/a_(b)_c)",
     ["https://es.wikipedia.org/wiki/Luz_(física)", "www.ex.org/a_(b)_c"]),
    ("(https://ex.org/a) y https://ex.org/q?(1)", ["https://ex.org/a", "https://ex.org/q?(1)"]),
    ("https://ex.org/a(b " + "(c)" * 3000, ["https://ex.org/a(b"]),
    # and the brace or bracket that closes one, as in a URL template
    ("Visita https://ex.org/users/{id}. [https://ex.org/?q={0}&r=[1]]",
     ["https://ex.org/users/{id}", "https://ex.org/?q={0}&r=[1]"]),
    ("Un 50% de descuento, 3 veces", []),  # no printf in "50% de"; numbers: off
    ("A first.last+tag@mail.example.co.uk (--jo@x.org)",
     ["first.last+tag@mail.example.co.uk", "jo@x.org"]),
    # as long as addresses may be (a local part of 64 characters), and no longer
    ("a" * 64 + "@x.org " + "b" * 65 + "@x.org", ["a" * 64 + "@x.org"]),
    ("a+" * 3000 + " 1." * 3000, []),  # long runs without an @
])
def test_the_default_rules_find_what_they_document(text, found):
    assert [text[s:e] for s, e, _ in find(text, protection())] == found


def test_numbers_and_accelerators_are_switched_on_by_name():
    on = protection(add=["number", "accelerator"])
    text = "~Continuar, Fo~rmato, &Archivo, A&&B, &amp; y 3,5 veces"
    assert [text[s:e] for s, e, _ in find(text, on)] == ["~", "~", "&", "3,5"]
    assert find(text, protection()) == []
    assert find("Abrir %s", protection(enabled=False)) == []
    assert find("id-42 y X-7", protection(patterns=["[A-Z]+-\\d+"])) == [(8, 11, False)]
    assert find("a b", protection(patterns=[r"a\sb"])) == []  # whitespace: never masked


def test_the_recipe_knows_every_rule_by_name():
    from mtkit.config.decode import PLACEHOLDER_RULES
    from mtkit.document.placeholders import RULE_NAMES

    assert RULE_NAMES == PLACEHOLDER_RULES  # decode.protect_rules is checked against these


def test_bad_rules_are_config_errors_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--protect bogus: not a placeholder rule"):
        protection(add=["bogus"])
    with pytest.raises(ConfigError, match=r"--protect-regex '\(': not a valid regular"):
        protection(patterns=["("])
    with pytest.raises(ConfigError, match=r"matches empty text"):
        protection(patterns=["x*"])


# --------------------------------------------------------------------------- masking


@pytest.mark.parametrize("form", ["drop", "token"])
def test_masking_keeps_the_source_words(form):
    rules = protection(mask=form)
    for line in generated_lines(200):
        masked = mask(line, rules)
        source, words = line.split(), masked.text.split()
        assert len(words) == len(masked.words)
        for word, origin in zip(words, masked.words):
            expected = source[origin]
            for placeholder in masked.placeholders:
                if placeholder.word == origin:
                    expected = expected.replace(placeholder.text, placeholder.mask, 1)
            assert word == expected
        if form == "token":
            assert len(words) == len(source)
    assert mask("sin nada que proteger", protection()) is None


@pytest.mark.parametrize("form", ["drop", "token"])
def test_restoring_puts_each_placeholder_back_exactly_as_often(form):
    """Whatever the model does with the masks (keeps, loses, repeats, changes their case)
    and however rough its links, the output has each placeholder as often as the source."""
    rng = random.Random(7)
    rules = protection(mask=form)
    for line in generated_lines(300, seed=3):
        masked = mask(line, rules)
        words = masked.text.split()
        out = [w.upper() if rng.random() < 0.3 else w for w in words if rng.random() > 0.2]
        out += [rng.choice(out)] if out and rng.random() < 0.3 else []  # a repeated word
        rng.shuffle(out)
        links = tuple(sorted({(rng.randrange(len(words)), j) for j in range(len(out))}))
        if not words:
            links = ()
        text, new_links = restore(masked, " ".join(out), links)
        for placeholder in {p.text for p in masked.placeholders}:
            expected = line.count(placeholder)
            assert text.count(placeholder) == expected, (line, masked.text, out, text)
        assert all(0 <= j < len(text.split()) for _, j in new_links)
        assert all(0 <= i < len(line.split()) for i, _ in new_links)


@pytest.mark.parametrize("line", ["Pulsa X0 y %s", "El modelo x1 y X0b abre %s y {0}"])
def test_a_token_mask_never_is_a_word_the_line_already_has(line):
    """A line that writes X0 itself (a product, a model name) keeps it: the masks are
    numbered past what the line has, so restoring does not take its X0 for a mask."""
    masked = mask(line, protection(mask="token"))
    assert all(p.mask.lower() not in line.lower() for p in masked.placeholders)
    words = line.split()
    text, _ = restore(masked, masked.text, tuple((i, i) for i in range(len(words))))
    assert text == line


def test_a_lost_placeholder_goes_next_to_its_aligned_neighbour():
    masked = mask("abre %s archivos", protection())
    # the model saw "abre  archivos" (words 0 and 2 of the source)
    text, links = restore(masked, "open files", ((0, 0), (1, 1)))
    assert text == "open %s files" and (1, 1) in links and (2, 2) in links
    masked = mask("vea www.ex.org.", protection())
    assert restore(masked, "see.", ((0, 0),))[0] == "see www.ex.org."
    masked = mask("~Continuar", protection(add=["accelerator"]))
    assert restore(masked, "Continue", ((0, 0),))[0] == "~Continue"


# --------------------------------------------------------------------------- the order of work


class Scripted:
    """A stand-in model: upper-cases each sentence, word for word, with links i-i;
    records what it was asked."""

    def __init__(self):
        self.calls: list[tuple[list[str], list[bool]]] = []

    def __call__(self, sentences: list[str], want: list[bool]) -> list[Translated]:
        self.calls.append((sentences, want))
        return [Translated(" ".join(s.split()).upper(),
                           tuple((i, i) for i in range(len(s.split()))) if w else ())
                for s, w in zip(sentences, want)]


def test_a_line_with_nothing_to_do_goes_as_it_is_and_asks_no_links():
    pytest.importorskip("sentencex")
    model = Scripted()
    lines = ["Una frase sola.", "", "   ", "otra sin punto"]
    for split in (False, True):
        found = translate_documents(lines, model, DocumentOptions(split=split, src_lang="es"))
        assert model.calls[-1] == (lines, [False] * 4)
        assert [r.text for r in found] == ["UNA FRASE SOLA.", "", "", "OTRA SIN PUNTO"]


def test_split_lines_keep_the_contract_and_their_links():
    pytest.importorskip("sentencex")
    model = Scripted()
    lines = ["Hola, amigo.  ¿Cómo estás? Bien %s gracias.", "", "Sola.", "Vea www.ex.org. Fin."]
    found = translate_documents(lines, model, DocumentOptions(split=True, src_lang="es",
                                                              links=True))
    assert len(found) == len(lines)
    assert found[0].text == "HOLA, AMIGO.  ¿CÓMO ESTÁS? BIEN %s GRACIAS."
    assert found[0].links == tuple((i, i) for i in range(7))
    assert found[3].text == "VEA www.ex.org. FIN."  # the URL masked before splitting
    assert model.calls[-1][0] == ["Hola, amigo.", "¿Cómo estás?", "Bien  gracias.", "",
                                  "Sola.", "Vea .", "Fin."]
    prepared = prepare(lines, DocumentOptions(split=True, src_lang="es"))
    assert prepared.want_links == (True, True, True, False, False, True, True)


def test_protection_off_leaves_placeholders_to_the_model():
    model = Scripted()
    found = translate_documents(["abre %s"], model, DocumentOptions(
        protection=Protection(enabled=False)))
    assert model.calls[-1] == (["abre %s"], [False]) and found[0].text == "ABRE %S"
