"""`mtkit export` and `mtkit translate -m EXPORT` as a user runs them: the line contract
holds, an export is never overwritten silently, and `--stop exact` (torch only) is a clear
error. (Token-for-token equality with mtkit's decoding: tests/integration/test_ct2_export.py.)"""

from __future__ import annotations

import pytest

ctranslate2 = pytest.importorskip("ctranslate2")


def test_export_and_translate_through_the_cli(reverse_model, tmp_path, mtkit_cli):
    model, test_src = reverse_model
    export = ["export", "-m", model, "-o", "exported", "--quantization", "int8"]
    done = mtkit_cli(export, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    again = mtkit_cli(export, cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr  # never overwrites silently

    text = test_src.read_text().splitlines()[:20]
    source = "\n".join(text[:10] + ["", "  "] + text[10:]) + "\n"
    for extra in ([], ["--beam", "3", "--nbest", "2"]):
        done = mtkit_cli(["translate", "-m", "exported", *extra], cwd=tmp_path, input=source)
        assert done.returncode == 0, done.stderr
        rows = done.stdout.splitlines()
        if not extra:
            assert len(rows) == 22 and rows[10] == "" and rows[11] == ""
        else:
            indices = [int(r.split("\t")[0]) for r in rows]
            assert set(indices) == set(range(22))
    exact = ["translate", "-m", "exported", "--stop", "exact"]  # torch only
    done = mtkit_cli(exact, cwd=tmp_path, input="hola\n")
    assert done.returncode != 0 and "translate with the mtkit model file" in done.stderr
    assert "Traceback" not in done.stderr
    top = ["translate", "-m", "exported", "--stop", "top"]  # CTranslate2's own rule, in effect
    done = mtkit_cli(top, cwd=tmp_path, input="hola\n")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr


def test_export_never_replaces_a_file_or_the_input_model(reverse_model, tmp_path, mtkit_cli,
                                                        expect_error):
    """--force replaces an earlier export only: -o the model itself, a directory holding
    it, another file or another directory is a one-line error and nothing changes."""
    model, _ = reverse_model
    (tmp_path / "m.pt").write_bytes(model.read_bytes())
    (tmp_path / "notes.txt").write_text("keep me\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "file").write_text("keep me too\n")
    for out, needle in (("m.pt", "input model"), (".", "input model"),
                        ("notes.txt", "not a directory"), ("mine", "not a CTranslate2 export"),
                        ("notes.txt/sub", "notes.txt is not a directory")):
        done = mtkit_cli(["export", "-m", "m.pt", "-o", out, "--force"], cwd=tmp_path)
        expect_error(done, f"-o {out}", needle)
    assert (tmp_path / "m.pt").read_bytes() == model.read_bytes()
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
    assert (tmp_path / "mine" / "file").read_text() == "keep me too\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "mine", "notes.txt"]


def test_info_on_an_export_names_the_model_it_came_from(reverse_model, tmp_path, mtkit_cli,
                                                        expect_error):
    """An export is no mtkit model file: `mtkit info` says what it is and which file to ask."""
    model, _ = reverse_model
    (tmp_path / "m.pt").write_bytes(model.read_bytes())
    done = mtkit_cli(["export", "-m", "m.pt", "-o", "exported"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expect_error(mtkit_cli(["info", "exported"], cwd=tmp_path), "exported: a CTranslate2 export",
                 "mtkit info m.pt")
    expect_error(mtkit_cli(["import", "exported", "-o", "again.pt"], cwd=tmp_path),
                 "exported: a CTranslate2 export", "not a Hugging Face model")
    assert not (tmp_path / "again.pt").exists()


def test_quantize_int8_on_a_float32_export_decodes_in_int8(reverse_model, tmp_path, mtkit_cli):
    """`--quantize int8` with an export is CTranslate2's int8: a float32 export then scores
    as the int8 export of the same model does (CTranslate2 rounds its weights at load), not
    as float32 (the option was silently ignored)."""
    model, test_src = reverse_model
    for quantization in ("float32", "int8"):
        done = mtkit_cli(["export", "-m", model, "-o", quantization, "--quantize", quantization],
                         cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    source = "".join(test_src.read_text().splitlines(keepends=True)[:10])

    def scores(export: str, *extra: str) -> str:
        done = mtkit_cli(["translate", "-m", export, "--scores", "--threads", "1", *extra],
                         cwd=tmp_path, input=source)
        assert done.returncode == 0, done.stderr
        return done.stdout

    int8 = scores("int8")
    assert scores("float32") != int8  # the rounding shows in the scores
    assert scores("float32", "--quantize", "int8") == int8
