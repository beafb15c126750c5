"""Ctrl-C and SIGTERM during training: checkpoint, clear message, 130/143, then resume."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from builders import bible_recipe, saved_step
from conftest import run_mtkit, start_mtkit

from mtkit.model.checkpoint import load_checkpoint


def start_training(directory):
    bible_recipe(directory, train={"max_steps": 100000, "save_every": 100000, "log_every": 1,
                                   "valid_every": 100000})
    return start_mtkit(["train", "tiny.yaml"], cwd=directory, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)


def wait_for_updates(process, updates: int, timeout: float = 120) -> list[str]:
    """Read stderr until the trainer has logged `updates` steps."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        if f"step {updates} |" in line:
            return lines
    process.kill()
    raise AssertionError("training did not log its updates:\n" + "".join(lines))


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_checkpoints_and_resumes(tmp_path, signum, code):
    process = start_training(tmp_path)
    wait_for_updates(process, 3)
    process.send_signal(signum)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == code, rest
    message = [line for line in rest.splitlines() if line.startswith("mtkit: error:")]
    assert len(message) == 1 and "resume" in message[0], rest
    assert "Traceback" not in rest
    last = tmp_path / "runs" / "tiny" / "checkpoints" / "checkpoint_last.pt"
    step = load_checkpoint(last).train_state.progress.step
    assert step >= 3

    resumed = run_mtkit(
        ["train", "tiny.yaml", "--until", "train", "--set", f"train.max_steps={step + 2}"],
        cwd=tmp_path, timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from runs/tiny/checkpoints/checkpoint_last.pt at step {step}" in (
        resumed.stderr
    )
    assert saved_step(last) == step + 2
