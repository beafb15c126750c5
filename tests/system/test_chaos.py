"""Chaos: SIGKILL a training run at random moments, resume each time with the same command;
the final weights must equal those of an uninterrupted run, bit for bit, and every file
the run left must load."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import time
from pathlib import Path

import torch
from builders import bible_recipe, metrics_records, tensorboard_steps
from conftest import CliResult, run_mtkit, start_mtkit

from mtkit.data.manifest import load_manifest
from mtkit.model.checkpoint import load_checkpoint

STEPS = 40
TRAIN = {"max_steps": STEPS, "save_every": 2, "keep_last": 3, "valid_every": 10,
         "log_every": 1, "valid_bleu_lines": 10, "average": "best-2", "best_metric": "loss"}


def run_to_completion(directory: Path) -> CliResult:
    return run_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=directory, timeout=600)


def kill_after_step(directory: Path, step: int, rng: random.Random) -> int:
    """Run until the trainer logs `step`, then SIGKILL it a random moment later (with a
    checkpoint every 2 steps, some kills land while one is being written)."""
    process = start_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=directory,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        logged = re.search(r"\| step (\d+) \|", line)
        if logged and int(logged.group(1)) >= step:
            break
    time.sleep(rng.uniform(0.0, 0.2))
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    return process.returncode


def test_sigkill_chaos_gives_bit_identical_weights(tmp_path):
    calm, chaos = tmp_path / "calm", tmp_path / "chaos"
    for directory in (calm, chaos):
        bible_recipe(directory, train=TRAIN, model={"dropout": 0.2})
    done = run_to_completion(calm)
    assert done.returncode == 0, done.stderr

    rng = random.Random(7)
    kill_steps = sorted(rng.sample(range(3, STEPS - 2), 6))  # 6 kills, in order
    for step in kill_steps:
        assert kill_after_step(chaos, step, rng) == -signal.SIGKILL, f"kill at step {step}"
    done = run_to_completion(chaos)
    assert done.returncode == 0, done.stderr

    run = Path("runs") / "tiny" / "checkpoints"
    calm_last = load_checkpoint(calm / run / "checkpoint_last.pt")
    chaos_last = load_checkpoint(chaos / run / "checkpoint_last.pt")
    assert chaos_last.train_state.progress.step == STEPS
    for key, value in calm_last.weights.items():
        assert torch.equal(value, chaos_last.weights[key]), key
    calm_top = sorted(p.name for p in (calm / run).glob("best_*.pt"))
    assert calm_top == sorted(p.name for p in (chaos / run).glob("best_*.pt"))
    assert len(calm_top) == 2
    for path in (chaos / run).iterdir():  # no temporary file left; every checkpoint loads
        assert path.suffix == ".pt", path
        load_checkpoint(path)
    assert load_manifest(chaos / "runs" / "tiny" / "data") is not None
    # metrics.jsonl and TensorBoard show each step once, the same steps as the calm run
    for event, tag in (("train", "train/loss"), ("valid", "valid/loss")):
        steps = [r["step"] for r in metrics_records(chaos / "runs" / "tiny", event)]
        assert steps == [r["step"] for r in metrics_records(calm / "runs" / "tiny", event)]
        assert tensorboard_steps(chaos / "runs" / "tiny", tag) == steps, tag
