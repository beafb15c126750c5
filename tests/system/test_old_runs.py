"""A run directory written by an earlier mtkit (tests/data/run-v1, see its README.md) still
translates, resumes to the same weights as an uninterrupted run of that version, and reads
in `mtkit info`: run as a user runs the commands."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from builders import DATA, metrics_records, saved_step, weights
from conftest import CLI_ENV, CliResult, start_mtkit

RUN_V1 = DATA / "run-v1"
# the model of a 12-step run with the code of commit 5fdf652 (README.md), on an Intel CPU
# whose torch kernels were the AVX-512 ones
V1_WEIGHTS_AT_12 = "d5e042f1427c832cfeee255a6cd592cb8bbaa9d4f3c3b6b7afc3a9ee8cb266ca"
V1_LAST_LOSS_AT_12 = 3.5630208855001335
V1_CPU = ("GenuineIntel", "AVX512")


def this_cpu() -> tuple[str, str]:
    """The CPU's vendor and torch's kernel level: other kernels sum in another order."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    return (vendor.group(1) if vendor else "", torch.backends.cpu.get_cpu_capability())


# The fixture's step-12 weights were made with torch's multi-threaded kernels, which sum in
# another order than one thread does: the resume runs with two threads, as they were made.
TWO_THREADS = {**CLI_ENV, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def mtkit_with_two_threads(args: list, cwd: Path) -> CliResult:
    process = start_mtkit(args, cwd, env=TWO_THREADS, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=300)
    return CliResult(process.returncode, stdout.decode(), stderr.decode(), stdout)


def weights_hash(path: Path) -> str:
    """sha256 over the sorted state-dict names and their tensors' bytes."""
    digest = hashlib.sha256()
    state = weights(path)
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    root = tmp_path / "run-v1"
    shutil.copytree(RUN_V1, root)
    return root


def test_old_model_translates_as_it_did(old_run, mtkit_cli):
    test_src = (old_run / "data" / "test.src").read_text(encoding="utf-8")
    done = mtkit_cli(["translate", "-m", "runs/old/model.pt", "--quiet"], cwd=old_run,
                     input=test_src)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (old_run / "expected.model.hyp").read_text(encoding="utf-8")


def test_old_run_resumes_to_the_weights_of_an_uninterrupted_run(old_run):
    last = old_run / "runs" / "old" / "checkpoints" / "checkpoint_last.pt"
    assert saved_step(last) == 6
    done = mtkit_with_two_threads(["train", "old.yaml"], cwd=old_run)
    assert done.returncode == 0, done.stderr
    assert "resuming from" in done.stderr and saved_step(last) == 12
    loss = metrics_records(old_run / "runs" / "old", "train")[-1]["loss"]
    if this_cpu() == V1_CPU:  # the same kernels: the same bits
        assert weights_hash(last) == V1_WEIGHTS_AT_12
        assert loss == V1_LAST_LOSS_AT_12
    else:  # float rounding differs from the first step; Adam may move a weight by ~lr
        expected = torch.load(old_run / "expected.step12.weights.pt", weights_only=True)
        resumed = weights(last)
        assert resumed.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.allclose(resumed[name], tensor, atol=5e-3), name
        assert loss == pytest.approx(V1_LAST_LOSS_AT_12, rel=1e-3)


def test_info_reads_the_old_run(old_run, mtkit_cli):
    done = mtkit_cli(["info", "runs/old"], cwd=old_run)
    assert done.returncode == 0, done.stderr
    shown = dict(re.findall(r"^  (\S.*?):\s+(.*)$", done.stdout, re.M))
    assert shown["path"] == "runs/old/model.pt"
    assert shown["written by"] == "mtkit 0.1.0, checkpoint format 1"
    assert (shown["layers"], shown["updates"], shown["model.pt is"]) == (
        "1 encoder, 1 decoder", "6", "checkpoint_best.pt")
    assert shown["best dev BLEU"] == "0.91 at step 6"

