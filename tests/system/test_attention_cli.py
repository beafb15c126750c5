"""`mtkit attention` as a user runs it, with the tiny model the session trains: a sentence
on stdin, a PNG out; --layer out of range and a missing -o are one-line errors."""

from __future__ import annotations

import pytest

from mtkit.report.plot import plot_available

SENTENCE = "En el principio creó Dios los cielos y la tierra.\n"


@pytest.mark.skipif(not plot_available(), reason="matplotlib is not installed")
def test_attention_writes_the_png(tiny_run, tmp_path, mtkit_cli):
    out = tmp_path / "pictures" / "attention.png"
    done = mtkit_cli(["attention", "-m", tiny_run.run_dir, "-o", out, "--all"], cwd=tmp_path,
                     input=SENTENCE)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    assert str(out) in done.stderr


def test_a_layer_the_model_lacks_is_one_error_line(tiny_run, tmp_path, mtkit_inprocess,
                                                   expect_error):
    """(In process: the layer is checked before stdin is read.)"""
    done = mtkit_inprocess(["attention", "-m", tiny_run.model, "-o", tmp_path / "a.png",
                            "--layer", "9"], tmp_path)
    expect_error(done, "--layer 9:", "the model has")
    assert not (tmp_path / "a.png").exists()


def test_the_help_offers_no_ctranslate2_export(tmp_path, mtkit_inprocess):
    """translate's -m takes an export directory; attention's refuses one, and says so."""
    done = mtkit_inprocess(["attention", "--help"], tmp_path)
    assert done.returncode == 0
    model_help = " ".join(done.stdout.split("-m, --model MODEL")[1].split("-o,")[0].split())
    assert "Not a CTranslate2 export" in model_help
    assert "mtkit export` wrote" not in model_help


def test_an_output_under_a_file_is_one_error_line(tiny_run, tmp_path, mtkit_inprocess,
                                                   expect_error):
    """(In process: -o is checked before stdin is read, so nothing is translated for it.)"""
    (tmp_path / "notes.txt").write_text("keep me\n")
    done = mtkit_inprocess(["attention", "-m", tiny_run.model, "-o",
                            tmp_path / "notes.txt" / "sub" / "a.png"], tmp_path)
    expect_error(done, "notes.txt/sub/a.png", "notes.txt is a file, not a directory")
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
