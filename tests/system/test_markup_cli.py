"""`mtkit translate --format html` as a user runs it, on the session's tiny model
(tests/conftest.py tiny_run): one HTML fragment per line, the line contract kept, every
output line well formed with the input's elements in the input's nesting; a whole file
as one document with --whole-file; damaged and binary input repaired, never lost; an
unknown format a one-line error."""

from __future__ import annotations

import random

from conftest import run_mtkit
from htmlcheck import Generator, Strict, verses

HTML = ["--format", "html", "--beam", "1", "--quiet"]


def test_each_line_is_a_fragment_with_its_tags_kept(tiny_run, data_dir, tmp_path):
    lines = [Generator(seed, verses(data_dir)).document().replace("\n", " ")
             for seed in range(30)]
    lines[3:3] = ["", "plain text, no markup", "<p>", "x < y & z"]
    result = run_mtkit(["translate", "-m", tiny_run.model, *HTML], cwd=tmp_path,
                       input="".join(line + "\n" for line in lines))
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split("\n")[:-1]
    assert len(outputs) == len(lines)
    for line, output in zip(lines[:3] + lines[7:], outputs[:3] + outputs[7:]):
        source, target = Strict().read(line), Strict().read(output)
        assert target.elements == source.elements and target.comments == source.comments
    assert outputs[3] == "" and outputs[5] == "<p></p>"
    assert "<" not in outputs[6]  # text: whatever the model writes comes out escaped


def test_a_whole_file_is_one_document(tiny_run, data_dir, tmp_path):
    page = ("<!DOCTYPE html>\n<html>\n<head><title>Génesis</title></head>\n<body>\n"
            + "\n".join(Generator(seed, verses(data_dir)).document() for seed in range(3))
            + "\n<pre>\n  kept\n</pre>\n</body>\n</html>\n")
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    result = run_mtkit(["translate", "-m", tiny_run.model, *HTML, "--whole-file",
                        "--input", "page.html", "--output", "out.html"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    output = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert Strict().read(output).elements == Strict().read(page).elements
    assert output.startswith("<!DOCTYPE html>\n<html>\n<head><title>")
    assert output.endswith("<pre>\n  kept\n</pre>\n</body>\n</html>\n")


def test_damaged_and_binary_lines_are_repaired_never_lost(tiny_run, tmp_path):
    rng = random.Random(0)
    junk = [bytes(rng.randrange(256) for _ in range(60)) for _ in range(5)]
    lines = [b"<p>Dios <b>dijo", b"<b><i>luz</b> y</i>", b"</p></div>", b"<!-- abierto",
             b"a\x00b <i>\xff\xfe</i>", *junk]
    result = run_mtkit(["translate", "-m", tiny_run.model, *HTML], cwd=tmp_path,
                       input=b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split("\n")[:-1]
    assert len(outputs) == len(lines)
    assert outputs[0].startswith("<p>") and outputs[0].endswith("</b></p>")
    for output in outputs:
        Strict().read(output)


def test_an_unknown_format_is_a_one_line_error(tiny_run, tmp_path, expect_error):
    result = run_mtkit(["translate", "-m", tiny_run.model, "--format", "htm"], cwd=tmp_path,
                       input="hola\n")
    expect_error(result, "--format htm", "text or html", "did you mean html?")
    result = run_mtkit(["translate", "-m", tiny_run.model, "--whole-file"], cwd=tmp_path,
                       input="hola\n")
    expect_error(result, "--whole-file", "--format html")
