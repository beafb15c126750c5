"""The trainer: the reverse-task canary, exact resume, stopping rules, bad losses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_mtkit
from toy import bible_recipe, prepare, reverse_recipe, reverse_task

from mtkit.checkpoint import average_checkpoints
from mtkit.config import load_recipe, recipe_from_dict
from mtkit.run import RunPaths
from mtkit.train import Trainer, TrainingDiverged, train
from mtkit.translate import Translator


def test_reverse_task_canary(tmp_path):
    """A correct model and trainer learn to reverse short sequences within seconds."""
    files = reverse_task(tmp_path / "data")
    recipe = recipe_from_dict(reverse_recipe(files), name="reverse")
    run_dir = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run_dir)
    train(recipe, run_dir, tokenizer, run_dir / "data", fingerprints, device="cpu")

    translator = Translator.load(RunPaths(run_dir).last, device="cpu", beam=1)
    sources = files["test"][0].read_text().splitlines()
    targets = files["test"][1].read_text().splitlines()
    outputs = translator.translate(sources)
    accuracy = sum(o == t for o, t in zip(outputs, targets)) / len(targets)
    assert accuracy >= 0.8, f"reverse accuracy {accuracy:.2f}: {outputs[:3]} vs {targets[:3]}"


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def test_resumed_training_is_bit_identical(tmp_path):
    """N steps in one go == N/2 steps, a fresh process state, then N/2 more."""
    path = bible_recipe(
        tmp_path,
        train={"max_steps": 12, "update_freq": 2, "valid_every": 4, "save_every": 4},
        model={"dropout": 0.3, "attn_dropout": 0.1},
    )
    whole = load_recipe(path)
    tokenizer, fingerprints = prepare(whole, tmp_path / "whole")
    train(whole, tmp_path / "whole", tokenizer, tmp_path / "whole" / "data", fingerprints, "cpu")

    half = load_recipe(path, ["train.max_steps=6"])
    run = tmp_path / "split"
    tokenizer, fingerprints = prepare(half, run)
    train(half, run, tokenizer, run / "data", fingerprints, "cpu")
    torch.manual_seed(1234)  # the resumed run must not depend on the process's RNG state
    progress = train(whole, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.step == 12

    a, b = _weights(RunPaths(tmp_path / "whole").last), _weights(RunPaths(run).last)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    steps = [json.loads(line)["step"] for line in RunPaths(run).metrics.read_text().splitlines()]
    assert steps == sorted(steps), "metrics.jsonl must read in step order after a resume"


def test_checkpoints_and_metrics(tmp_path):
    path = bible_recipe(tmp_path, train={"max_steps": 20, "keep_last": 2})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    paths = RunPaths(run)
    assert progress.step == 20 and "max_steps" in progress.finished
    assert [p.name for p in paths.step_checkpoints()] == ["checkpoint_10.pt", "checkpoint_20.pt"]
    assert paths.best.is_file() and paths.last.is_file()
    records = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    train_records = [r for r in records if r["event"] == "train"]
    valid_records = [r for r in records if r["event"] == "valid"]
    assert {
        "step",
        "epoch",
        "loss",
        "nll",
        "lr",
        "grad_norm",
        "tgt_tokens_per_s",
        "elapsed",
    } <= train_records[0].keys()
    assert [r["step"] for r in valid_records] == [10, 20]
    assert all("bleu" in r and "ppl" in r for r in valid_records)
    # A finished run does no more work when asked again.
    again = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert again.step == 20


def test_max_epochs_and_patience(tmp_path):
    path = bible_recipe(tmp_path, train={"max_steps": 0, "max_epochs": 1, "max_tokens": 4096})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert "max_epochs" in progress.finished
    assert progress.epoch == 2  # the first epoch is complete


def test_non_finite_loss_is_skipped_then_stops(tmp_path, monkeypatch):
    path = bible_recipe(tmp_path, train={"max_steps": 10, "max_bad_steps": 3})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    trainer = Trainer(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    original = trainer.model.forward
    calls = {"n": 0}

    def poisoned(src, tgt_in, positions=None):
        calls["n"] += 1
        logits = original(src, tgt_in, positions)
        return logits * float("nan") if calls["n"] > 2 else logits

    monkeypatch.setattr(trainer.model, "forward", poisoned)
    with pytest.raises(TrainingDiverged, match="lower train.lr"):
        trainer.fit()
    assert trainer.progress.step == 2
    records = [json.loads(x) for x in RunPaths(run).metrics.read_text().splitlines()]
    assert sum(r["event"] == "skipped" for r in records) == 3


def test_best_k_keeps_the_k_best_validated_models(tmp_path):
    path = bible_recipe(tmp_path, train={"average": "best-2"})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    trainer = Trainer(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    paths = RunPaths(run)
    for step, score in enumerate([1.0, 5.0, 3.0, 4.0, 2.0, 4.0], start=1):
        trainer.progress.step = step
        trainer._keep_if_among_best(score)
    assert trainer.progress.top == [(5.0, 2), (4.0, 4)]  # a tie does not displace the older
    assert [p.name for p in paths.top_checkpoints()] == ["best_2.pt", "best_4.pt"]

    trainer.progress.step = 9  # as if killed after writing best_9.pt, before checkpoint_last
    trainer._save_model(paths.top(9))
    trainer.drop_stale_top_checkpoints()
    assert [p.name for p in paths.top_checkpoints()] == ["best_2.pt", "best_4.pt"]


def test_pipeline_averages_the_best_k(tmp_path):
    bible_recipe(tmp_path, train={"average": "best-2", "best_metric": "loss",
                                  "valid_every": 5, "save_every": 5})
    done = run_mtkit(["train", "tiny.yaml", "--until", "average"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "tiny"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if r["event"] == "valid"}
    best_two = sorted(sorted(losses, key=losses.get)[:2])
    kept = RunPaths(run).top_checkpoints()
    assert [p.name for p in kept] == [f"best_{s}.pt" for s in best_two]
    stamp = json.loads((run / "model.stamp.json").read_text())
    assert [name for name, _ in stamp["sources"]] == [p.name for p in kept] + [
        "checkpoint_best.pt"]
    assert "average of best 2" in done.stderr

    done = run_mtkit(["average", "--best", str(run), "-o", "avg.pt"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    averaged = _weights(tmp_path / "avg.pt")
    reference = average_checkpoints(kept).weights
    assert all(torch.equal(averaged[k], reference[k]) for k in reference)


def test_compiled_training_matches_eager(tmp_path):
    """train.compile changes how the step runs, not what it computes. (Weights are not
    compared: a key bias has a zero gradient in exact arithmetic, so Adam turns rounding
    noise into full-size, different updates of it.)"""
    path = bible_recipe(tmp_path, train={"max_steps": 4, "log_every": 1, "valid_every": 100,
                                         "save_every": 100}, model={"dropout": 0.0})
    losses = {}
    for name, overrides in (("eager", []), ("compiled", ["train.compile=true"])):
        recipe = load_recipe(path, overrides)
        run = tmp_path / name
        tokenizer, fingerprints = prepare(recipe, run)
        train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
        records = [json.loads(x) for x in RunPaths(run).metrics.read_text().splitlines()]
        losses[name] = [r["loss"] for r in records if r["event"] == "train"]
    assert len(losses["eager"]) == 4
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-4)
