"""CTranslate2 export: the exported float32 model decodes like mtkit's own, token for token."""

from __future__ import annotations

import pytest
from conftest import CLI_ENV, MTKIT
from toy import prepare, reverse_recipe, reverse_task

from mtkit.config import DecodeConfig, recipe_from_dict
from mtkit.engine import TorchEngine
from mtkit.run import RunPaths
from mtkit.train import train
from mtkit.translate import Translator

ctranslate2 = pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def reverse_model(tmp_path_factory):
    """A tiny model trained on the reverse task: it ends its outputs with EOS."""
    root = tmp_path_factory.mktemp("reverse")
    files = reverse_task(root / "data")
    recipe = recipe_from_dict(reverse_recipe(files, max_steps=250), name="reverse")
    run = root / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    return RunPaths(run).last, files["test"][0]


def test_exported_float32_greedy_equals_mtkit(reverse_model, tmp_path):
    from mtkit import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    assert ct2.is_exported_model(out)
    lines = test_src.read_text().splitlines()
    settings = DecodeConfig(beam=1, max_len_a=1.5, max_len_b=5)

    ours = Translator(TorchEngine.load([model]), settings).search(lines)
    theirs = Translator(ct2.CTranslate2Engine(out, "cpu", threads=1), settings).search(lines)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]


def test_export_and_translate_through_the_cli(reverse_model, tmp_path):
    import subprocess

    model, test_src = reverse_model
    run = [str(MTKIT), "export", "-m", str(model), "-o", "exported", "--quantization", "int8"]
    done = subprocess.run(run, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    again = subprocess.run(run, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True)
    assert again.returncode == 2 and "--force" in again.stderr  # never overwrites silently

    text = test_src.read_text().splitlines()[:20]
    source = "\n".join(text[:10] + ["", "  "] + text[10:]) + "\n"
    for extra in ([], ["--beam", "3", "--nbest", "2"]):
        done = subprocess.run([str(MTKIT), "translate", "-m", "exported", *extra], cwd=tmp_path,
                              env=CLI_ENV, input=source, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        rows = done.stdout.splitlines()
        if not extra:
            assert len(rows) == 22 and rows[10] == "" and rows[11] == ""
        else:
            indices = [int(r.split("\t")[0]) for r in rows]
            assert set(indices) == set(range(22))
    exact = [str(MTKIT), "translate", "-m", "exported", "--stop", "exact"]  # torch only
    done = subprocess.run(exact, cwd=tmp_path, env=CLI_ENV, input="hola\n", capture_output=True,
                          text=True)
    assert done.returncode != 0 and "--engine torch" in done.stderr
    assert "Traceback" not in done.stderr
