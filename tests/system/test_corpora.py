"""Several weighted corpora, tags and subword sampling through `mtkit train` and
`mtkit translate --tag`, as a user drives them; and the back-translation example script
on the tiny Bible sample."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from builders import DATA, RECIPES, bible_recipe, weights

# 4096-token batches: an epoch of the two corpora is a few updates, so 12 cross epochs
TRAIN = {"max_steps": 12, "max_tokens": 4096, "log_every": 1, "valid_every": 6,
         "save_every": 6}


def split_corpus(root: Path) -> None:
    """The Bible sample as two corpora: a (200 pairs) and b (100)."""
    for lang in ("es", "en"):
        lines = (DATA / f"train.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
        (root / f"a.{lang}").write_text("".join(lines[:200]), encoding="utf-8")
        (root / f"b.{lang}").write_text("".join(lines[200:]), encoding="utf-8")


def corpora_recipe(root: Path, corpora: list[dict], train: dict | None = None,
                   alpha: float = 0.0, tokenizer: dict | None = None) -> Path:
    split_corpus(root)
    path = bible_recipe(root, train={**TRAIN, **(train or {})},
                        tokenizer={"vocab_size": 300, "sample_alpha": alpha, **(tokenizer or {})},
                        model={"max_positions": 256})  # every pair of the sample fits
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["data"]["train"] = corpora
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


MIXED = [{"src": "a.es", "tgt": "a.en"},
         {"src": "b.es", "tgt": "b.en", "weight": 2, "tag": "BT"}]


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory, mtkit_cli) -> tuple[Path, str]:
    """Two corpora, one tagged and upsampled, with subword sampling: 12 updates at once."""
    root = tmp_path_factory.mktemp("mixed")
    corpora_recipe(root, MIXED, alpha=0.3)
    done = mtkit_cli(["train", "tiny.yaml", "--until", "average"], cwd=root)
    assert done.returncode == 0, done.stderr
    return root, done.stderr


def test_the_log_and_manifest_give_each_corpus(mixed_run):
    root, log = mixed_run
    assert "binarize train-1 (a.es): 200 lines, 200 pairs kept; dropped 0 empty" in log
    assert "binarize train-2 (b.es): 100 lines, 100 pairs kept, tagged <BT>; dropped" in log
    assert "epoch 1: 400 pairs: train-1 200 of 200, train-2 200 of 100 (x2); segmented " \
           "afresh in" in log
    manifest = json.loads((root / "runs/tiny/data/manifest.json").read_text())
    assert manifest["splits"]["train-2"]["tag"] == "BT"
    assert {"train-1", "train-2", "valid"} == set(manifest["splits"])


def test_a_resumed_mixed_sampled_run_equals_the_uninterrupted_one(mixed_run, tmp_path,
                                                                   mtkit_cli):
    root, _ = mixed_run
    corpora_recipe(tmp_path, MIXED, alpha=0.3, train={"max_steps": 5})
    first = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    corpora_recipe(tmp_path, MIXED, alpha=0.3)  # on to 12 updates, crossing an epoch
    rest = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert "resuming from" in rest.stderr and "epoch 2: 400 pairs" in rest.stderr
    last = "runs/tiny/checkpoints/checkpoint_last.pt"
    resumed, whole = weights(tmp_path / last), weights(root / last)
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)

    # another weight is other data: the run refuses to continue
    changed = [MIXED[0], {**MIXED[1], "weight": 3}]
    corpora_recipe(tmp_path, changed, alpha=0.3, train={"max_steps": 14})
    refused = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert refused.returncode == 2
    assert "the training data changed since this run started" in refused.stderr


def test_translate_applies_a_tag_the_model_knows(mixed_run, mtkit_cli):
    root, _ = mixed_run
    model = root / "runs/tiny/model.pt"
    text = "En el principio\nY la tierra\n"
    tagged = mtkit_cli(["translate", "-m", model, "--tag", "BT", "--quiet"], cwd=root,
                       input=text)
    assert tagged.returncode == 0, tagged.stderr
    assert len(tagged.stdout.splitlines()) == 2
    info = mtkit_cli(["info", model], cwd=root)
    assert re.search(r"tags: +BT \(translate --tag\)", info.stdout), info.stdout
    wrong = mtkit_cli(["translate", "-m", model, "--tag", "NT"], cwd=root, input=text)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.strip().splitlines() == [
        "mtkit: error: tag NT: not a tag of this SentencePiece model (its tags: BT); tags are "
        "the data.train corpora's `tag` values"]


@pytest.mark.parametrize("entry, message", [
    ({"src": "b.es"}, "data.train[1].tgt: required key is missing"),
    ({"src": "b.es", "tgt": "b.en", "weight": 0}, "data.train[1].weight: 0 is not above 0"),
    ({"src": "b.es", "tgt": "b.en", "tag": "<BT>"}, "data.train[1].tag: '<BT>' is not a valid"),
])
def test_a_bad_corpus_entry_is_one_line_and_writes_nothing(tmp_path, mtkit_cli, entry, message):
    corpora_recipe(tmp_path, [MIXED[0], entry])
    done = mtkit_cli(["train", "tiny.yaml"], cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "runs").exists()


def test_adding_a_corpus_to_a_fine_tuning_run_encodes_only_that_one(tmp_path, mtkit_cli):
    """With the tokenizer fixed (the parent's), a new corpus leaves the others' binarised
    files as they are."""
    parent = tmp_path / "parent"
    parent.mkdir()
    bible_recipe(parent, train={**TRAIN, "max_steps": 2}, model={"max_positions": 256})
    assert mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=parent).returncode == 0
    parent_model = parent / "runs/tiny/checkpoints/checkpoint_last.pt"
    child = tmp_path / "child"
    child.mkdir()
    init = {"max_steps": 2, "init_from": str(parent_model)}
    corpora_recipe(child, [MIXED[0]], train=init)
    done = mtkit_cli(["train", "tiny.yaml", "--until", "binarize"], cwd=child)
    assert done.returncode == 0, done.stderr
    data = child / "runs/tiny/data"
    inode = os.stat(data / "train.src.bin").st_ino
    corpora_recipe(child, [MIXED[0], {"src": "b.es", "tgt": "b.en", "weight": 3}], train=init)
    done = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=child)
    assert done.returncode == 0, done.stderr
    assert "binarize train-1 (a.es): unchanged, kept: 200 lines" in done.stderr
    assert "binarize train-2 (b.es): 100 lines, 100 pairs kept;" in done.stderr
    assert os.stat(data / "train-1.src.bin").st_ino == inode
    assert "train-2 300 of 100 (x3)" in done.stderr

    tagged = [MIXED[0], MIXED[1]]  # the parent's tokenizer has no <BT>
    corpora_recipe(child, tagged, train=init)
    refused = mtkit_cli(["train", "tiny.yaml", "--until", "train"], cwd=child)
    assert refused.returncode == 2
    assert f"train.init_from: {parent_model} has no tag BT (its tags: none)" in refused.stderr


def test_the_back_translation_example_runs(tmp_path, mtkit_script):
    """recipes/backtranslate.sh on the tiny sample: three runs, synthetic Spanish, scores."""
    mtkit, env = mtkit_script
    # fp32 on every machine: the synthetic pairs of a 6-update model must pass the length
    # filters, and how many do depends on its arithmetic (auto is bf16 on AMX CPUs)
    base = bible_recipe(tmp_path, train={"max_steps": 6, "valid_every": 6, "save_every": 6,
                                         "precision": "fp32"})
    env = {**env, "DATA": str(DATA), "BASE": str(base), "WORK": str(tmp_path / "bt"),
           "REAL": "200", "MTKIT": str(mtkit)}
    done = subprocess.run(["bash", str(RECIPES / "backtranslate.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    work = tmp_path / "bt"
    synthetic = (work / "synthetic.es").read_text(encoding="utf-8").splitlines()
    assert len(synthetic) == 100 == len((work / "mono.en").read_text().splitlines())
    manifest = json.loads((work / "es-en-bt/data/manifest.json").read_text())
    assert manifest["splits"]["train-2"]["tag"] == "BT"
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["es-en", "es-en-bt"]
    assert all("test.es: BLEU" in line for line in lines), done.stdout

    # sampled synthetic Spanish in the same WORK, for a comparison: the options go to
    # translate, not to train; the reverse model and the baseline are reused as they are
    kept = {run: (work / run / "model.pt").stat().st_mtime_ns for run in ("en-es", "es-en")}
    sampled = subprocess.run(["bash", str(RECIPES / "backtranslate.sh"), "--sampling",
                              "topk:5", "--seed=2"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert sampled.returncode == 0, sampled.stderr[-3000:]
    assert {run: (work / run / "model.pt").stat().st_mtime_ns for run in kept} == kept
    drawn = (work / "synthetic-topk5-seed2.es").read_text(encoding="utf-8").splitlines()
    assert len(drawn) == 100 and drawn != synthetic
    assert (work / "synthetic.es").read_text(encoding="utf-8").splitlines() == synthetic
    lines = sampled.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["es-en", "es-en-bt-topk5-seed2"]
    manifest = json.loads((work / "es-en-bt-topk5-seed2/data/manifest.json").read_text())
    assert manifest["splits"]["train-2"]["src"]["path"].endswith("synthetic-topk5-seed2.es")


def test_the_filtering_example_runs(tmp_path, mtkit_script):
    """recipes/dual-filter.sh on the tiny sample: two scorers, the noisy part scored both
    ways and cut to its best share, two runs, their scores."""
    mtkit, env = mtkit_script
    # positions for the longest verse: score-pairs refuses a pair the model cannot hold
    base = bible_recipe(tmp_path, train={"max_steps": 6, "valid_every": 6, "save_every": 6,
                                         "precision": "fp32"}, model={"max_positions": 256})
    env = {**env, "DATA": str(DATA), "BASE": str(base), "WORK": str(tmp_path / "filter"),
           "CLEAN": "200", "KEEP": "0.5", "MTKIT": str(mtkit)}
    done = subprocess.run(["bash", str(RECIPES / "dual-filter.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    work = tmp_path / "filter"
    noisy = (work / "noisy.src").read_text(encoding="utf-8").splitlines()
    assert len(noisy) == 100 == len((work / "forward.scores").read_text().splitlines())
    assert len((work / "backward.scores").read_text().splitlines()) == 100
    assert len((work / "filtered.src").read_text(encoding="utf-8").splitlines()) == 50
    noise = (work / "noisy.noise").read_text().splitlines()
    assert sum(kind != "clean" for kind in noise) == 30
    lines = done.stdout.splitlines()
    assert "kept 50 of 100 pairs" in lines and any(line.startswith("noise in") for line in lines)
    assert [line.split(":")[0] for line in lines[-2:]] == ["es-en-all", "es-en-filtered"]


def test_a_given_tokenizer_keeps_the_other_corpora_when_one_is_added(tmp_path, mtkit_cli):
    """tokenizer.model: the run takes that SentencePiece model as it is, so adding a
    corpus encodes only the new one."""
    other = tmp_path / "other"
    other.mkdir()
    bible_recipe(other)
    assert mtkit_cli(["train", "tiny.yaml", "--until", "tokenizer"], cwd=other).returncode == 0
    given = other / "runs/tiny/tokenizer"
    run = tmp_path / "run"
    run.mkdir()
    corpora_recipe(run, [MIXED[0]], tokenizer={"model": str(given)})
    done = mtkit_cli(["train", "tiny.yaml", "--until", "binarize"], cwd=run)
    assert done.returncode == 0, done.stderr
    assert f"[tokenizer] running: taking the SentencePiece model of {given}" in done.stderr
    kept = (run / "runs/tiny/tokenizer/spm.model").read_bytes()
    assert kept == (given / "spm.model").read_bytes()
    corpora_recipe(run, [MIXED[0], {"src": "b.es", "tgt": "b.en"}],
                   tokenizer={"model": str(given)})
    done = mtkit_cli(["train", "tiny.yaml", "--until", "binarize"], cwd=run)
    assert done.returncode == 0, done.stderr
    assert "[tokenizer] skipped: tokenizer.model's, unchanged" in done.stderr
    assert "binarize train-1 (a.es): unchanged, kept: 200 lines" in done.stderr

    fresh = tmp_path / "fresh"  # bad input: one line, exit 2, nothing written
    fresh.mkdir()
    corpora_recipe(fresh, MIXED, tokenizer={"model": str(given)})
    refused = mtkit_cli(["train", "tiny.yaml"], cwd=fresh)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"mtkit: error: tokenizer.model: {given / 'spm.model'} has no tag BT (its tags: none); "
        "a run can use only the tags of a SentencePiece model it did not train"]
    corpora_recipe(fresh, [MIXED[0]], tokenizer={"model": str(tmp_path / "nope.model")})
    missing = mtkit_cli(["train", "tiny.yaml"], cwd=fresh)
    assert missing.returncode == 2 and "tokenizer.model: not found" in missing.stderr
    assert not (fresh / "runs").exists()
