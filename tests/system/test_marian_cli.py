"""The whole path for a pretrained Marian model, as a user runs it on a tiny one: `mtkit
import`, `info`, fine-tuning with a recipe that leaves model and tokenizer to the parent,
resume bit-exact, `average`, `translate`, `export` and translating the export."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from builders import DATA
from hf_marian import build_marian

from mtkit.model.checkpoint import load_checkpoint

pytest.importorskip("transformers")

DEV = (DATA / "dev.es").read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def imported(tmp_path_factory, mtkit_cli):
    root = tmp_path_factory.mktemp("marian")
    directory = build_marian(root / "opus-mt-tiny")
    done = mtkit_cli(["import", directory, "-o", "imported.pt"], cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def fine_tune_recipe(root, name: str, steps: int) -> str:
    recipe = {
        "data": {"train": {"src": str(DATA / "train.es"), "tgt": str(DATA / "train.en")},
                 "valid": {"src": str(DATA / "dev.es"), "tgt": str(DATA / "dev.en")}},
        "train": {"init_from": str(root / "imported.pt"), "max_tokens": 1024, "lr": 0.001,
                  "warmup_steps": 2, "max_steps": steps, "log_every": 1, "valid_every": 100,
                  "save_every": 2, "keep_last": 5, "valid_bleu_lines": 0,
                  "label_smoothing": 0.0, "average": "none", "seed": 3},
    }  # no model and no tokenizer section: the parent's
    (root / f"{name}.yaml").write_text(yaml.safe_dump(recipe))
    return f"{name}.yaml"


def test_bad_directory_is_one_line_and_writes_nothing(tmp_path, mtkit_cli):
    (tmp_path / "empty").mkdir()
    done = mtkit_cli(["import", "empty", "-o", "out.pt"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.error_lines() == ["mtkit: error: empty: no config.json; not "
                                  "a Hugging Face model directory"], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.pt").exists()


def test_an_output_under_a_file_is_one_error_line(imported, mtkit_cli, expect_error):
    (imported / "notes.txt").write_text("keep me\n")
    done = mtkit_cli(["import", "opus-mt-tiny", "-o", "notes.txt/m.pt"], cwd=imported)
    expect_error(done, "-o notes.txt/m.pt", "notes.txt is a file, not a directory")
    assert (imported / "notes.txt").read_text() == "keep me\n"


def test_info_on_the_directory_says_to_import_it(imported, mtkit_cli, expect_error):
    expect_error(mtkit_cli(["info", "opus-mt-tiny"], cwd=imported),
                 "opus-mt-tiny: a Hugging Face model directory", "mtkit import")
    for command in (["export", "-m", "opus-mt-tiny", "-o", "out"],
                    ["translate", "-m", "opus-mt-tiny", "--engine", "torch"]):
        expect_error(mtkit_cli(command, cwd=imported, input="hola\n"),
                     "opus-mt-tiny: is a Hugging Face model directory",
                     "mtkit import opus-mt-tiny -o MODEL.pt")


def test_info_says_where_it_came_from(imported, mtkit_cli):
    shown = mtkit_cli(["info", "imported.pt", "--json"], cwd=imported)
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["lineage"]["imported"]["format"] == "marian"
    assert info["decode"]["beam"] == 4
    assert info["architecture"]["activation"] == "swish"
    assert info["vocabulary"]["tags"] == ["fra", "deu"]
    text = mtkit_cli(["info", "imported.pt"], cwd=imported).stdout
    assert "imported from:" in text and "explicit vocabulary" in text
    assert "trained elsewhere (imported)" in text


def test_fine_tune_resume_average_translate_export(imported, mtkit_cli):
    root = imported
    whole = mtkit_cli(["train", fine_tune_recipe(root, "whole", 4), "--until", "train"],
                      cwd=root)
    assert whole.returncode == 0, whole.stderr
    assert "the tokenizer and model sections of" in whole.stderr
    # the same run in two parts: resumed bit-exact
    part = mtkit_cli(["train", fine_tune_recipe(root, "parts", 2), "--until", "train"],
                     cwd=root)
    assert part.returncode == 0, part.stderr
    rest = mtkit_cli(["train", "parts.yaml", "--until", "train", "--set", "train.max_steps=4"],
                     cwd=root)
    assert rest.returncode == 0, rest.stderr
    a = load_checkpoint(root / "runs" / "whole" / "checkpoints" / "checkpoint_last.pt")
    b = load_checkpoint(root / "runs" / "parts" / "checkpoints" / "checkpoint_last.pt")
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)

    parent = load_checkpoint(root / "imported.pt")
    pad = parent.tokenizer().specials.pad
    assert a.vocab == parent.vocab and a.recipe.model == parent.recipe.model
    assert not a.weights["tgt_embed.weight"][pad].any()  # the start embedding stays zero
    assert not torch.equal(a.weights["out_proj.bias"], parent.weights["out_proj.bias"])

    ckpts = root / "runs" / "whole" / "checkpoints"
    averaged = mtkit_cli(["average", ckpts / "checkpoint_2.pt", ckpts / "checkpoint_4.pt",
                          "-o", "avg.pt"], cwd=root)
    assert averaged.returncode == 0, averaged.stderr
    (root / "dev.es").write_text("\n".join(DEV) + "\n")
    ours = mtkit_cli(["translate", "-m", "avg.pt", "-i", "dev.es", "--beam", "1"], cwd=root)
    assert ours.returncode == 0, ours.stderr
    assert len(ours.stdout.splitlines()) == len(DEV)

    pytest.importorskip("ctranslate2")
    exported = mtkit_cli(["export", "-m", "avg.pt", "-o", "ct2", "--quantize", "float32"],
                         cwd=root)
    assert exported.returncode == 0, exported.stderr
    theirs = mtkit_cli(["translate", "-m", "ct2", "-i", "dev.es", "--beam", "1"], cwd=root)
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout
