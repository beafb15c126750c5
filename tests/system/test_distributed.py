"""Data-parallel training through torchrun (gloo, 2 CPU processes): the world size changes
neither the batches nor the result, resume works across world sizes, and one job owns a
run directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from builders import bible_recipe, metrics_records
from conftest import CLI_ENV, MTKIT, CliResult, run_mtkit, start_mtkit

from mtkit.data.batching import BatchSampler
from mtkit.data.dataset import ParallelData
from mtkit.model.checkpoint import load_checkpoint

# Dropout on: the equivalence must hold for the random parts of training too. With 500
# tokens a batch the sample has 19 batches an epoch: on 2 ranks the 10th update of the
# first epoch has one batch for rank 0 and none for rank 1.
TRAIN = {"max_steps": 12, "save_every": 6, "valid_every": 6, "log_every": 1, "keep_last": 2,
         "max_tokens": 500}


def torchrun(args: list, cwd: Path, nproc: int = 2) -> CliResult:
    """`torchrun --standalone --nproc_per_node N -m mtkit ARGS`, as a user runs it."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", "-m", "mtkit", *map(str, args)]
    done = subprocess.run(command, cwd=cwd, env=CLI_ENV, capture_output=True, text=True,
                          timeout=600)
    return CliResult(done.returncode, done.stdout, done.stderr)


def last_weights(root: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(root / "runs" / "tiny" / "checkpoints" / "checkpoint_last.pt").weights


def assert_same_training(a: Path, b: Path) -> None:
    wa, wb = last_weights(a), last_weights(b)
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    steps = [r["step"] for r in metrics_records(b / "runs" / "tiny", "train")]
    assert steps == [r["step"] for r in metrics_records(a / "runs" / "tiny", "train")]
    assert len(set(steps)) == len(steps)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference: 1 process accumulating 2 batches per update."""
    root = tmp_path_factory.mktemp("one")
    bible_recipe(root, train={**TRAIN, "update_freq": 2}, model={"dropout": 0.3})
    done = run_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def test_two_ranks_equal_one_rank_with_twice_the_accumulation(one_process, tmp_path):
    bible_recipe(tmp_path, train={**TRAIN, "update_freq": 1}, model={"dropout": 0.3})
    done = torchrun(["train", "tiny.yaml", "--until", "train"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert_same_training(one_process, tmp_path)  # bit-identical weights
    log = done.stderr
    assert "2 processes" in log and "tokens per update: 500 x 1 x 2 = 1000" in log
    assert not re.search(r"\[rank 1\].*step \d+ \|", log), "only rank 0 logs progress"
    data = ParallelData(tmp_path / "runs" / "tiny" / "data", "train")
    sampler = BatchSampler.fixed(data.src_lens, data.tgt_lens, TRAIN["max_tokens"], seed=1)
    sampler.set_epoch(1)
    assert len(sampler) % 2 == 1 and len(sampler) < 2 * TRAIN["max_steps"]  # odd, crossed


def test_tokens_per_update_gives_one_recipe_for_any_world_size(one_process, tmp_path):
    """train.tokens_per_update = 1000 means update_freq 2 on 1 process, 1 on 2."""
    bible_recipe(tmp_path, train={**TRAIN, "tokens_per_update": 1000}, model={"dropout": 0.3})
    done = torchrun(["train", "tiny.yaml", "--until", "train"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert_same_training(one_process, tmp_path)


def test_resume_on_another_world_size(one_process, tmp_path):
    """Started on 2 ranks, finished on 1: no batch repeated or skipped."""
    bible_recipe(tmp_path, train={**TRAIN, "tokens_per_update": 1000}, model={"dropout": 0.3})
    first = torchrun(["train", "tiny.yaml", "--until", "train", "--set", "train.max_steps=6"],
                     tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resuming" in second.stderr and "at step 6" in second.stderr
    assert_same_training(one_process, tmp_path)


def test_resume_from_one_rank_on_two(one_process, tmp_path):
    bible_recipe(tmp_path, train={**TRAIN, "tokens_per_update": 1000}, model={"dropout": 0.3})
    first = run_mtkit(["train", "tiny.yaml", "--until", "train", "--set", "train.max_steps=6"],
                      cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = torchrun(["train", "tiny.yaml", "--until", "train"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert "at step 6" in second.stderr
    assert_same_training(one_process, tmp_path)


def ranks_of(job: subprocess.Popen) -> dict[int, int]:
    """RANK -> pid of the worker processes torchrun started."""
    found = {}
    for child in Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split():
        environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        for entry in environ:
            if entry.startswith(b"RANK="):
                found[int(entry[5:])] = int(child)
    return found


LONG = {**TRAIN, "max_steps": 40, "update_freq": 1}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The 40-update job on 2 ranks, never interrupted."""
    root = tmp_path_factory.mktemp("calm")
    bible_recipe(root, train=LONG, model={"dropout": 0.3})
    done = torchrun(["train", "tiny.yaml", "--until", "train"], root)
    assert done.returncode == 0, done.stderr
    return root


def start_job(command: list, cwd: Path) -> subprocess.Popen:
    """A 2-rank job, in a session of its own (so a test can signal it as a terminal
    would), reading its log until the 8th update."""
    job = subprocess.Popen(command, cwd=cwd, env=CLI_ENV, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    for line in job.stderr:
        if re.search(r"\| step 8 \|", line):
            break
    return job


def assert_checkpoints_load(root: Path) -> None:
    for path in (root / "runs" / "tiny" / "checkpoints").iterdir():
        assert path.suffix == ".pt", path  # no temporary file left
        load_checkpoint(path)


def test_a_killed_rank_ends_the_job_and_the_rerun_finishes(uninterrupted, tmp_path):
    """SIGKILL of rank 1 mid-run: the job ends non-zero (no hang), every checkpoint loads,
    and the same command finishes the run with the uninterrupted run's weights."""
    bible_recipe(tmp_path, train={**LONG, "dist_timeout": 60}, model={"dropout": 0.3})
    job = start_job([sys.executable, "-m", "torch.distributed.run", "--standalone",
                     "--nproc_per_node=2", "-m", "mtkit", "train", "tiny.yaml", "--until",
                     "train"], tmp_path)
    os.kill(ranks_of(job)[1], signal.SIGKILL)
    killed = time.monotonic()
    job.stderr.read()
    job.wait(timeout=300)
    ended_after = time.monotonic() - killed
    print(f"the job ended {ended_after:.1f} s after rank 1 was killed")
    assert job.returncode != 0
    assert ended_after < 60, f"the job took {ended_after:.0f}s to end"
    assert_checkpoints_load(tmp_path)
    again = torchrun(["train", "tiny.yaml", "--until", "train"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert_same_training(uninterrupted, tmp_path)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signalled_job_saves_stops_and_resumes(uninterrupted, tmp_path, signum, code):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to
    the launcher (as a scheduler sends it): all ranks stop at the same update, rank 0
    saves, the job exits 130/143, and the same command resumes to the uninterrupted
    weights."""
    bible_recipe(tmp_path, train=LONG, model={"dropout": 0.3})
    job = start_job([str(MTKIT), "train", "tiny.yaml", "--until", "train", "--nproc", "2"],
                    tmp_path)
    if signum == signal.SIGINT:
        os.killpg(job.pid, signum)
    else:
        job.send_signal(signum)
    log = job.stderr.read()
    job.wait(timeout=120)
    assert job.returncode == code, log
    assert "training state saved to checkpoint_last.pt" in log
    assert "Traceback" not in log
    assert_checkpoints_load(tmp_path)
    stopped_at = last_step(tmp_path)
    assert 8 <= stopped_at < LONG["max_steps"]
    again = run_mtkit(["train", "tiny.yaml", "--until", "train", "--nproc", "2"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"at step {stopped_at}" in again.stderr
    assert_same_training(uninterrupted, tmp_path)


def last_step(root: Path) -> int:
    path = root / "runs" / "tiny" / "checkpoints" / "checkpoint_last.pt"
    return load_checkpoint(path).train_state.progress.step


def test_nproc_starts_the_same_job(one_process, tmp_path):
    bible_recipe(tmp_path, train={**TRAIN, "update_freq": 1}, model={"dropout": 0.3})
    done = run_mtkit(["train", "tiny.yaml", "--until", "train", "--nproc", "2"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert_same_training(one_process, tmp_path)


def test_a_second_job_on_a_run_directory_is_refused(tmp_path, expect_error):
    bible_recipe(tmp_path, train={**TRAIN, "max_steps": 400, "log_every": 1})
    first = start_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in first.stderr:  # wait until the first job trains
        if "| step " in line:
            break
    second = run_mtkit(["train", "tiny.yaml"], cwd=tmp_path)
    error = expect_error(second, "runs/tiny: in use by another mtkit job", f"pid {first.pid}")
    assert "another --run-dir" in error
    first.terminate()
    first.wait(timeout=120)
    first.stderr.close()
    assert first.returncode == 143  # SIGTERM: saved and stopped, the second job changed nothing
    again = run_mtkit(["train", "tiny.yaml", "--until", "train", "--set", "train.max_steps=3"],
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr  # the lock died with its process


def test_bad_input_for_the_world_size_ends_before_any_process_starts(tmp_path, expect_error):
    bible_recipe(tmp_path, train={**TRAIN, "update_freq": 1})
    train = ["train", "tiny.yaml", "--until", "train", "--nproc", "2"]
    done = run_mtkit([*train, "--set", "train.tokens_per_update=700"], cwd=tmp_path)
    expect_error(done, "train.tokens_per_update (700) must be a multiple", "500 x 2 = 1000")
    assert not (tmp_path / "runs").exists()
    done = run_mtkit([*train, "--device", "cuda"], cwd=tmp_path)
    expect_error(done, "--device cuda: no CUDA device")

    first = run_mtkit([*train[:4], "--set", "train.max_steps=3"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "runs" / "tiny"
    def files() -> dict[Path, bytes]:  # the lock file names its latest holder: not data
        return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}

    before = files()
    done = run_mtkit(train, cwd=tmp_path)  # update_freq 1 on 2 processes: twice the batch
    expect_error(done, "runs/tiny: this run trained on 1 process with 500 tokens per update",
                 "on 2 it would take 1000", "resume on 1 process, or use --restart")
    done = torchrun(train[:4], tmp_path)  # the ranks refuse it too, under torchrun itself
    assert done.returncode != 0 and "this run trained on 1 process" in done.stderr
    assert files() == before
    again = run_mtkit([*train, "--set", "train.tokens_per_update=500",
                       "--set", "train.max_tokens=250", "--set", "train.max_steps=4"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "tokens per update: 250 x 1 x 2 = 500" in again.stderr


@pytest.mark.parametrize("change, named", [
    (["--set", "model.dropout=0.2"], "runs/tiny: the recipe's model section changed"),
    (["--set", "tokenizer.vocab_size=50000", "--restart"], "vocab_size 50000 is too large"),
])
def test_bad_input_rank_0_finds_alone_is_one_line(tmp_path, change, named, expect_error):
    """What rank 0 refuses while the other ranks wait for it (the run directory's checks,
    the tokenizer, binarising) ends every rank: rank 0 says why, the others end quietly
    with its exit code, not with gloo's 'Connection closed by peer' traceback."""
    bible_recipe(tmp_path, train={**TRAIN, "tokens_per_update": 1000, "max_steps": 3},
                 model={"dropout": 0.3})
    first = run_mtkit(["train", "tiny.yaml", "--until", "train"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    done = run_mtkit(["train", "tiny.yaml", "--until", "train", "--nproc", "2", *change],
                     cwd=tmp_path)
    expect_error(done, named)


def test_a_rank_0_failure_while_training_is_one_line(tmp_path):
    """Rank 0 fails inside training (its disk full at a validation's checkpoint_best.pt)
    while rank 1 is in a collective: rank 0's error line stands for the job, and rank 1
    says it stopped with it instead of gloo's 'Connection closed by peer' traceback."""
    bible_recipe(tmp_path, train={**TRAIN, "max_steps": 8, "valid_every": 4, "save_every": 4})
    checkpoints = tmp_path / "runs" / "tiny" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "checkpoint_best.pt").symlink_to("/dev/full")
    done = run_mtkit(["train", "tiny.yaml", "--until", "train", "--nproc", "2"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "checkpoint_best.pt: cannot write (No space left on device)" in done.stderr
    assert "[rank 1] mtkit: error: another rank ended the job" in done.stderr, done.stderr
