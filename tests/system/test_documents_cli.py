"""`mtkit translate --split` and placeholder protection as a user runs them: the line
contract holds, a line of one sentence comes out as without --split, a line of several
as its sentences translated one by one and joined, every placeholder comes out exactly
as often as it went in, and bad options are one-line errors. (The pieces alone, with a
scripted model: tests/unit/test_document.py.)"""

from __future__ import annotations

import random
import sys

import pytest
from builders import DATA, LETTERS

from mtkit.document.split import join_translations, split_sentences

sentencex = pytest.importorskip("sentencex")

PLACEHOLDERS = ["%s", "%d", "%1$s", "{0}", "{name}", "$(ARG1)", "%PRODUCTNAME", "%NAME%",
                "https://example.org/a.html", "ana@example.com"]


def out_lines(result) -> list[str]:
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" or result.stdout.endswith("\n")
    return result.stdout.split("\n")[:-1]


def paragraphs() -> list[str]:
    verses = (DATA / "test.es").read_text(encoding="utf-8").splitlines()[:60]
    rng = random.Random(0)
    lines, at = [], 0
    while at < len(verses):
        size = rng.randint(1, 4)
        gap = rng.choice([" ", "  ", " \u00a0"])
        lines.append(gap.join(verses[at : at + size]))
        at += size
        lines += [""] if rng.random() < 0.2 else []
    return lines + ["   ", "Una frase."]


def test_split_keeps_the_line_contract_and_joins_sentences_translated_alone(tiny_run,
                                                                             tmp_path, mtkit_cli):
    lines = paragraphs()
    source = "".join(line + "\n" for line in lines)
    base = ["translate", "-m", tiny_run.model, "--beam", "1", "--quiet"]
    plain = out_lines(mtkit_cli(base, cwd=tmp_path, input=source))
    split = out_lines(mtkit_cli([*base, "--split"], cwd=tmp_path, input=source))
    assert len(split) == len(plain) == len(lines)
    pieces = [split_sentences(line, "es") for line in lines]
    sentences = [piece.text for each in pieces if len(each) > 1 for piece in each]
    alone = iter(out_lines(mtkit_cli(base, cwd=tmp_path,
                                     input="".join(s + "\n" for s in sentences))))
    several = 0
    for line, each, whole, joined in zip(lines, pieces, plain, split, strict=True):
        if len(each) <= 1:
            assert joined == whole, line  # one sentence: exactly as without --split
        else:
            several += 1
            assert joined == join_translations([next(alone) for _ in each], each, "en")
    assert several >= 5


def letters_with_placeholders(n: int) -> list[str]:
    rng = random.Random(5)
    lines = []
    for _ in range(n):
        words = [rng.choice(LETTERS) for _ in range(rng.randint(0, 7))]
        for _ in range(rng.randint(0, 3)):
            words.insert(rng.randint(0, len(words)),
                         rng.choice(["{}", "({})", "{}."]).format(rng.choice(PLACEHOLDERS)))
        lines.append(" ".join(words))
    return lines


def test_every_placeholder_comes_out_as_often_as_it_went_in(reverse_model, tmp_path,
                                                             mtkit_cli):
    model, _ = reverse_model
    lines = letters_with_placeholders(200)
    source = "".join(line + "\n" for line in lines)
    for extra in ([], ["--alignments"], ["--scores"], ["--split"]):
        found = out_lines(mtkit_cli(["translate", "-m", model, "--quiet", *extra],
                                    cwd=tmp_path, input=source))
        assert len(found) == len(lines)
        for line, row in zip(lines, found):
            text = row.split("\t")[0]
            for placeholder in PLACEHOLDERS:
                assert text.count(placeholder) == line.count(placeholder), (line, row)
    off = out_lines(mtkit_cli(["translate", "-m", model, "--quiet", "--no-protect"],
                              cwd=tmp_path, input=source))
    assert len(off) == len(lines)
    assert sum("{0}" in line for line in off) < sum("{0}" in line for line in lines)


def test_lines_without_placeholders_translate_as_before(reverse_model, tmp_path, mtkit_cli):
    model, source = reverse_model
    base = ["translate", "-m", model, "-i", source, "--quiet"]
    assert out_lines(mtkit_cli(base, cwd=tmp_path)) == out_lines(
        mtkit_cli([*base, "--no-protect"], cwd=tmp_path))


def test_a_users_rule_protects_what_it_matches(reverse_model, tmp_path, mtkit_cli):
    model, _ = reverse_model
    found = out_lines(mtkit_cli(["translate", "-m", model, "--quiet", "--protect-regex",
                                 "ID-[0-9]+", "--protect", "number"], cwd=tmp_path,
                                input="a b ID-42 c\nd 17 e\n"))
    assert "ID-42" in found[0] and "17" in found[1]


def test_bad_document_options_are_one_line_errors(reverse_model, tmp_path, mtkit_inprocess,
                                                  expect_error, monkeypatch):
    model, _ = reverse_model
    (tmp_path / "in.txt").write_text("a b\n")
    base = ["translate", "-m", model, "-i", tmp_path / "in.txt"]
    expect_error(mtkit_inprocess([*base, "--protect-regex", "(x"], tmp_path),
                 "--protect-regex '(x': not a valid regular expression")
    expect_error(mtkit_inprocess([*base, "--protect", "dates"], tmp_path),
                 "--protect dates: not a placeholder rule")
    expect_error(mtkit_inprocess([*base, "--split", "--scores"], tmp_path),
                 "--split: not with --scores")
    for added in (["--protect", "number"], ["--protect-regex", "ID-[0-9]+"]):
        expect_error(mtkit_inprocess([*base, "--no-protect", *added], tmp_path),
                     f"--no-protect: not with {added[0]}")
    expect_error(mtkit_inprocess([*base, "--split", "--beam", "2", "--nbest", "2"], tmp_path),
                 "--split", "--nbest")
    from mtkit.document import split

    monkeypatch.setitem(sys.modules, "sentencex", None)  # as if not installed
    split._sentencex.cache_clear()
    try:
        expect_error(mtkit_inprocess([*base, "--split"], tmp_path), "pip install 'mtkit[split]'")
        # before the server loads the model or takes the port
        expect_error(mtkit_inprocess(["serve", "-m", model, "--split", "--port", "0"], tmp_path),
                     "pip install 'mtkit[split]'")
    finally:
        split._sentencex.cache_clear()
