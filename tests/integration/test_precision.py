"""train.precision: what auto picks (the matmul probe forced either way), where the
choice is recorded (the progress, the bundle, `mtkit info`), bit-exact resume in bf16,
and a run that changes precision when it resumes."""

from __future__ import annotations

import pytest
import torch
from builders import bible_recipe, prepare, weights

from mtkit.config import load_recipe
from mtkit.model.checkpoint import load_checkpoint
from mtkit.report.info import model_info
from mtkit.runtime import devices
from mtkit.train.run import RunPaths
from mtkit.train.trainer import train


def run(tmp_path, name, steps, precision="auto"):
    path = bible_recipe(tmp_path, train={"max_steps": steps, "valid_every": 4,
                                         "save_every": 4, "precision": precision},
                        model={"dropout": 0.3, "attn_dropout": 0.1})
    recipe = load_recipe(path)
    run_dir = tmp_path / name
    tokenizer, fingerprints = prepare(recipe, run_dir)
    progress = train(recipe, run_dir, tokenizer, run_dir / "data", fingerprints, "cpu")
    return progress, run_dir


@pytest.mark.parametrize("speedup, chosen", [(5.0, "bf16"), (0.3, "fp32")])
def test_auto_trains_in_what_the_probe_chose_and_records_it(tmp_path, monkeypatch, caplog,
                                                            speedup, chosen):
    monkeypatch.setattr(devices, "bf16_matmul_speedup", lambda device: speedup)
    caplog.set_level("INFO", logger="mtkit")
    progress, run_dir = run(tmp_path, "run", 4)
    assert progress.precision == chosen
    assert f"training in {chosen} (auto: a bf16 matmul ran {speedup:.2f}x" in caplog.text
    bundle = load_checkpoint(RunPaths(run_dir).last)
    assert bundle.trained.precision == chosen
    info = model_info(RunPaths(run_dir).last)
    assert ("precision", chosen) in dict(info.sections())["training"]
    assert info.to_dict()["training"]["precision"] == chosen


def test_bf16_training_resumes_bit_identically(tmp_path):
    """N bf16 updates in one go == N/2, a fresh process state, then N/2 more."""
    run(tmp_path, "whole", 8, "bf16")
    _, split = run(tmp_path, "split", 4, "bf16")
    torch.manual_seed(99)
    progress, _ = run(tmp_path, "split", 8, "bf16")
    assert progress.step == 8 and progress.precision == "bf16"
    a, b = weights(RunPaths(tmp_path / "whole").last), weights(RunPaths(split).last)
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("first, then", [("fp32", "bf16"), ("bf16", "fp32")])
def test_a_run_resumes_in_the_other_precision(tmp_path, first, then):
    """The weights and the optimiser stay fp32 whatever the step's arithmetic: a checkpoint
    of one precision resumes in the other, and records the precision it went on in."""
    run(tmp_path, "run", 4, first)
    progress, run_dir = run(tmp_path, "run", 12, then)
    assert progress.step == 12 and progress.precision == then
    assert load_checkpoint(RunPaths(run_dir).last).trained.precision == then
    assert all(w.dtype == torch.float32 for w in weights(RunPaths(run_dir).last).values())


def test_auto_resumes_in_the_precision_the_run_trained_in(tmp_path, monkeypatch):
    """Under auto the probe chooses for a new run only: a resumed run goes on as it
    trained (bit-exact resume whatever the probe says on the day)."""
    monkeypatch.setattr(devices, "bf16_matmul_speedup", lambda device: 5.0)
    run(tmp_path, "whole", 8)
    run(tmp_path, "split", 4)
    monkeypatch.setattr(devices, "bf16_matmul_speedup", lambda device: 0.5)
    progress, split = run(tmp_path, "split", 8)
    assert progress.precision == "bf16"
    a, b = weights(RunPaths(tmp_path / "whole").last), weights(RunPaths(split).last)
    for key in a:
        assert torch.equal(a[key], b[key]), key
