"""`mtkit train`'s job: the recipe pipeline in this process, in each rank of a torchrun
job, or as a torchrun job of N processes started from here (`--nproc N`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtkit.config import Recipe
from mtkit.errors import ConfigError, RankGone
from mtkit.pipeline import STAGES, run_pipeline
from mtkit.runtime import distributed as dist
from mtkit.runtime.devices import resolve_device, set_threads
from mtkit.train.trainer import check_resumable_on, updates_per_step


@dataclass(frozen=True)
class TrainJob:
    recipe: Recipe
    run_dir: Path
    until: str | None = None  # the last stage to run; None: all
    restart: bool = False  # discard the run's training state
    device: str = "auto"
    threads: int = 0  # 0: the recipe's train.threads
    nproc: int = 0  # > 1: start a torchrun job of that many processes
    argv: tuple[str, ...] = ()  # mtkit's arguments, for the torchrun job's processes


def run_train_job(job: TrainJob) -> None:
    """Run the job; with `nproc` > 1 outside torchrun, check what can be checked before any
    process starts, then run the same command under torchrun and return once it succeeded
    (a failed job ends this process with its exit code)."""
    if job.until is not None and job.until not in STAGES:
        raise ConfigError(f"--until {job.until}: expected one of {', '.join(STAGES)}")
    train = job.recipe.train
    if job.nproc > 1 and not dist.launched():
        resolve_device(job.device)
        updates_per_step(train, job.nproc)
        if not job.restart:
            check_resumable_on(job.run_dir, train, job.nproc)
        dist.run_torchrun(job.nproc, list(job.argv))
        return
    threads = job.threads or train.threads
    set_threads(threads)
    device = dist.setup(job.device, train.dist_timeout, threads)
    try:
        run_pipeline(job.recipe, job.run_dir, until=job.until, restart=job.restart,
                     device=device)
        dist.wait_for_main()  # leave together: gloo aborts a rank that quits while in use
    except RuntimeError as exc:
        if not dist.peer_gone(exc):
            raise
        raise RankGone() from None  # (not a second traceback beside the rank's own error)
    finally:
        dist.shutdown()
