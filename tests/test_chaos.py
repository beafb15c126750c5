"""Chaos: SIGKILL a training run at random moments, resume each time with the same command;
the final weights must equal those of an uninterrupted run, bit for bit, and every file
the run left must load."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import torch
from conftest import CLI_ENV, MTKIT
from toy import bible_recipe

from mtkit.checkpoint import load_checkpoint
from mtkit.data import load_manifest

STEPS = 40
TRAIN = {"max_steps": STEPS, "save_every": 2, "keep_last": 3, "valid_every": 10,
         "log_every": 1, "valid_bleu_lines": 10, "average_last": 2}


def run_to_completion(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MTKIT), "train", "tiny.yaml", "--until", "train"],
                          cwd=directory, env=CLI_ENV, capture_output=True, text=True,
                          timeout=600)


def kill_at_random(directory: Path, rng: random.Random) -> bool:
    """Start the run and SIGKILL it after a random delay; False if it finished first."""
    process = subprocess.Popen([str(MTKIT), "train", "tiny.yaml", "--until", "train"],
                               cwd=directory, env=CLI_ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(2.5, 6.0))  # the first ~2.5 s import torch
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.wait()
    return True


def test_sigkill_chaos_gives_bit_identical_weights(tmp_path):
    calm, chaos = tmp_path / "calm", tmp_path / "chaos"
    for directory in (calm, chaos):
        bible_recipe(directory, train=TRAIN, model={"dropout": 0.2})
    done = run_to_completion(calm)
    assert done.returncode == 0, done.stderr

    rng = random.Random(7)
    kills = 0
    while kills < 5:
        if not kill_at_random(chaos, rng):
            break
        kills += 1
    done = run_to_completion(chaos)
    assert done.returncode == 0, done.stderr
    assert kills >= 5, f"only {kills} kills landed before training finished"

    run = Path("runs") / "tiny" / "checkpoints"
    calm_last = load_checkpoint(calm / run / "checkpoint_last.pt")
    chaos_last = load_checkpoint(chaos / run / "checkpoint_last.pt")
    assert chaos_last["train_state"]["progress"]["step"] == STEPS
    for key, value in calm_last["model"].items():
        assert torch.equal(value, chaos_last["model"][key]), key
    for path in (chaos / run).iterdir():  # no temporary file left; every checkpoint loads
        assert path.suffix == ".pt", path
        load_checkpoint(path)
    assert load_manifest(chaos / "runs" / "tiny" / "data") is not None
