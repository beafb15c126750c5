"""Fine-tuning (`train.init_from`): a run that starts from another run's model takes its
weights and SentencePiece model, trains with a fresh optimiser, names its parent, and
never touches the parent file."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from builders import DATA, bible_recipe, metrics_records

from mtkit.files.textio import file_fingerprint
from mtkit.model.checkpoint import load_checkpoint

PARENT_TRAIN = {"max_steps": 60, "log_every": 1, "valid_every": 60, "save_every": 60}
CHILD_TRAIN = {"max_steps": 2, "log_every": 1, "valid_every": 10, "save_every": 10}


@pytest.fixture(scope="module")
def parent(tmp_path_factory, mtkit_cli) -> Path:
    """A run trained 60 updates from scratch: its model.pt is the parent."""
    root = tmp_path_factory.mktemp("parent")
    bible_recipe(root, train=PARENT_TRAIN)
    done = mtkit_cli(["train", "tiny.yaml", "--until", "average"], cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def first_loss(run_dir: Path) -> float:
    return metrics_records(run_dir, "train")[0]["loss"]


def test_the_child_starts_from_the_parent(parent, tmp_path, mtkit_cli):
    parent_model = parent / "runs" / "tiny" / "model.pt"
    before = parent_model.read_bytes()
    bible_recipe(tmp_path, train=CHILD_TRAIN)
    done = mtkit_cli(["train", "tiny.yaml", "--until", "train",
                      "--set", f"train.init_from={parent_model}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[tokenizer] running: taking the SentencePiece model of" in done.stderr
    assert "starting from the weights of" in done.stderr
    child_dir = tmp_path / "runs" / "tiny"
    scratch = first_loss(parent / "runs" / "tiny")  # the same data and seed, random weights
    trained = metrics_records(parent / "runs" / "tiny", "train")[-1]["loss"]
    child = first_loss(child_dir)
    print(f"first loss: scratch {scratch:.3f}, child {child:.3f}; parent's last {trained:.3f}")
    assert child < scratch - 0.5 and abs(child - trained) < 0.5
    parent_bundle = load_checkpoint(parent_model)
    assert (child_dir / "tokenizer" / "spm.model").read_bytes() == parent_bundle.spm_src
    child_bundle = load_checkpoint(child_dir / "checkpoints" / "checkpoint_last.pt")
    assert child_bundle.spm_src == parent_bundle.spm_src
    assert child_bundle.parent.path == str(parent_model)
    assert child_bundle.parent.fingerprint == file_fingerprint(parent_model)
    assert child_bundle.train_state.progress.step == 2  # a fresh schedule: the child's own
    assert parent_model.read_bytes() == before
    info = mtkit_cli(["info", child_dir / "checkpoints" / "checkpoint_last.pt"], cwd=tmp_path)
    assert re.search(rf"fine-tuned from: +{re.escape(str(parent_model))} \(fingerprint",
                     info.stdout), info.stdout

    again = mtkit_cli(["train", "tiny.yaml", "--until", "train",
                       "--set", f"train.init_from={parent_model}"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "[tokenizer] skipped: the parent model's, unchanged" in again.stderr
    assert "training complete" in again.stderr

    other = tmp_path / "other.pt"  # another parent for the same run: refused
    shutil.copy(parent / "runs" / "tiny" / "checkpoints" / "checkpoint_last.pt", other)
    refused = mtkit_cli(["train", "tiny.yaml", "--until", "train", "--set",
                         f"train.init_from={other}", "--set", "train.max_steps=4"], cwd=tmp_path)
    assert refused.returncode == 2
    assert "train.init_from names another model than this run started from" in refused.stderr


def test_a_differing_tokenizer_section_is_warned_about(parent, tmp_path, mtkit_cli):
    parent_model = parent / "runs" / "tiny" / "model.pt"
    bible_recipe(tmp_path, train={**CHILD_TRAIN, "init_from": str(parent_model)},
                 tokenizer={"vocab_size": 500})
    done = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "the parent's SentencePiece model is used" in done.stderr
    assert "tokenizer.vocab_size 500 (parent 300)" in done.stderr


def test_bad_init_from(parent, tmp_path, mtkit_cli, expect_error):
    bible_recipe(tmp_path, train=CHILD_TRAIN)
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    train = ["train", "tiny.yaml", "--set"]
    cases = [
        ([f"train.init_from={tmp_path / 'missing.pt'}"], "train.init_from:",
         "model file not found"),
        ([f"train.init_from={text}"], "train.init_from:", "not an mtkit checkpoint"),
        ([f"train.init_from={parent / 'runs' / 'tiny' / 'model.pt'}", "--set",
          "model.d_model=32"], "has another architecture: model.d_model 32 (parent 64)",
         "keeps its parent's model section"),
    ]
    for args, *needles in cases:
        expect_error(mtkit_cli([*train, *args], cwd=tmp_path), *needles)
        assert not (tmp_path / "runs").exists()  # nothing written


def child_recipe(directory: Path, parent_model: Path, **sections: dict) -> str:
    """A fine-tuning recipe of two updates with no model section: the parent's."""
    raw = {"data": {"train": {"src": str(DATA / "train.es"), "tgt": str(DATA / "train.en")}},
           "train": {**CHILD_TRAIN, "init_from": str(parent_model), "max_tokens": 1024},
           **sections}
    (directory / "child.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    return "child.yaml"


def test_an_inherited_model_section_is_checked_with_the_rest(parent, tmp_path, mtkit_cli,
                                                             expect_error):
    """The recipe's other sections are checked against the parent's model, not the
    defaults that stand in for it until the parent is read: a layer of the default six
    but not of the parent's two is refused before anything is written (a run that wrote
    checkpoints with it could not open them), by --dry-run too."""
    recipe = child_recipe(tmp_path, parent / "runs" / "tiny" / "model.pt",
                          decode={"alignment_layer": 3})
    for dry_run in ([], ["--dry-run"]):
        expect_error(mtkit_cli(["train", recipe, *dry_run], cwd=tmp_path),
                     "decode.alignment_layer 3: the model's decoder has 2 layers")
    assert not (tmp_path / "runs").exists()
    # --dry-run shows the recipe the run will train with: the parent's model section
    shown = mtkit_cli(["train", recipe, "--dry-run", "--set", "decode.alignment_layer=-1"],
                      cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    resolved = yaml.safe_load(shown.stdout)
    assert resolved["model"] == load_checkpoint(parent / "runs" / "tiny" / "model.pt"
                                                ).recipe.to_dict()["model"]
    assert not (tmp_path / "runs").exists()


def test_a_parent_of_separate_vocabularies_takes_a_tokenizer_section(tmp_path, mtkit_cli):
    """A tokenizer section as the parent's (an imported model's separate vocabularies),
    the model section left out: the parent's (tie_embeddings decoder) goes with joint:
    false, not the default that stands in for it ('all', which needs one vocabulary)."""
    pytest.importorskip("transformers")
    from hf_marian import build_marian

    done = mtkit_cli(["import", build_marian(tmp_path / "opus-mt", shared=False), "-o",
                      "parent.pt"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recipe = child_recipe(tmp_path, tmp_path / "parent.pt",
                          tokenizer={"kind": "vocab", "joint": False, "vocab_size": 100})
    done = mtkit_cli(["train", recipe, "--until", "train"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tokenizer.vocab_size 100 (parent" in done.stderr


def test_a_child_resumed_without_its_parent_is_told_to_name_it(parent, tmp_path, mtkit_cli,
                                                               expect_error):
    """Left out when resuming, train.init_from is named, not the model keys that the
    defaults standing in for the parent's section then differ in."""
    parent_model = parent / "runs" / "tiny" / "model.pt"
    recipe = child_recipe(tmp_path, parent_model)
    done = mtkit_cli(["train", recipe, "--until", "train"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    last = tmp_path / "runs" / "child" / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    expect_error(mtkit_cli(["train", recipe, "--until", "train", "--set",
                            "train.init_from=null", "--set", "train.max_steps=4"],
                           cwd=tmp_path),
                 f"this run started from train.init_from {parent_model}; give it again")
    assert last.read_bytes() == before
