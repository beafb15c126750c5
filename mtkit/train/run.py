"""A training run's state outside the update loop: where its files are, when it stops,
whether it may continue, its metrics file and its random-number generators.

The run directory (RUN_DIR, `runs/RECIPE_STEM` by default):

    recipe.name, recipe.yaml   which recipe owns the directory; the resolved recipe
    tokenizer/                 spm*.model + stamp.json
    data/                      binarised splits + manifest.json (manifest.py)
    checkpoints/               checkpoint_last.pt (resumable), checkpoint_best.pt,
                               checkpoint_N.pt (last K), best_N.pt (for best-K averaging)
    metrics.jsonl, train.log   one JSON record per log / validation line; the log
    tensorboard/               the same scalars as TensorBoard event files (if installed)
    model.pt, model.stamp.json the model `translate` uses, and how it was chosen
    eval/                      test-set hypotheses and scores.json
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit.config import Recipe, TrainConfig, changed_fields
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError, OutputError, TrainingDiverged
from mtkit.files.atomic import atomic_write_bytes
from mtkit.files.textio import read_json_lines
from mtkit.model.checkpoint import Bundle, Progress, load_checkpoint
from mtkit.train.tblog import TensorBoardLog, tensorboard_available

log = logging.getLogger("mtkit")


@dataclass(frozen=True)
class RunPaths:
    run_dir: Path

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "checkpoint_last.pt"

    @property
    def best(self) -> Path:
        return self.checkpoints / "checkpoint_best.pt"

    @property
    def ema(self) -> Path:
        return self.checkpoints / "checkpoint_ema.pt"

    def step(self, step: int) -> Path:
        return self.checkpoints / f"checkpoint_{step}.pt"

    def top(self, step: int) -> Path:
        return self.checkpoints / f"best_{step}.pt"

    def step_checkpoints(self) -> list[Path]:
        """Step checkpoints, oldest first."""
        return self._numbered("checkpoint_")

    def top_checkpoints(self) -> list[Path]:
        """The best-K checkpoints kept for `train.average: best-K`, oldest first."""
        return self._numbered("best_")

    def _numbered(self, prefix: str) -> list[Path]:
        found = []
        for path in self.checkpoints.glob(f"{prefix}*.pt"):
            suffix = path.stem[len(prefix):]
            if suffix.isdigit():
                found.append((int(suffix), path))
        return [path for _, path in sorted(found)]

    @property
    def metrics(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.run_dir / "tensorboard"

    @property
    def train_log(self) -> Path:
        return self.run_dir / "train.log"

    @property
    def tokenizer(self) -> Path:
        return self.run_dir / "tokenizer"

    @property
    def data(self) -> Path:
        return self.run_dir / "data"

    @property
    def model(self) -> Path:
        return self.run_dir / "model.pt"

    @property
    def model_stamp(self) -> Path:
        return self.run_dir / "model.stamp.json"

    @property
    def eval(self) -> Path:
        return self.run_dir / "eval"

    @property
    def recipe_name(self) -> Path:
        return self.run_dir / "recipe.name"

    @property
    def recipe_yaml(self) -> Path:
        return self.run_dir / "recipe.yaml"

    def clear_training(self) -> None:
        """--restart: forget the training state (the tokenizer and data stay)."""
        for path in [self.last, self.best, self.ema, *self.step_checkpoints(),
                     *self.top_checkpoints(), self.metrics]:
            path.unlink(missing_ok=True)
        shutil.rmtree(self.tensorboard, ignore_errors=True)

    def remove_temporary_files(self) -> None:
        """Checkpoint temp files a killed run left (atomic.atomic_write's `.NAME.*.tmp`)."""
        for stale in self.checkpoints.glob(".*.tmp"):
            stale.unlink(missing_ok=True)


# --------------------------------------------------------------------------- one job per run


class RunLock:
    """RUN_DIR/.lock, held exclusively for a job's lifetime (under torchrun by rank 0).

    An OS file lock (flock): it dies with its process, so a SIGKILL leaves nothing stale.
    A second job on the same run directory gets a one-line error naming the holder. On a
    shared filesystem without working locks (some NFS set-ups) it cannot protect: give
    each job its own --run-dir there.
    """

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self.file: Any = None

    def __enter__(self) -> RunLock:
        self.file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise ConfigError(
                f"{self.path.parent}: in use by another mtkit job ({holder}); wait for it to "
                "end, or use another --run-dir"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        self.file.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()  # releases the lock


# --------------------------------------------------------------------------- stopping


def stop_reason(cfg: TrainConfig, progress: Progress) -> str:
    """Why training must stop now ('' while it may go on)."""
    if cfg.max_steps and progress.step >= cfg.max_steps:
        return f"reached max_steps {cfg.max_steps}"
    if cfg.max_epochs and (progress.epoch > cfg.max_epochs):
        return f"reached max_epochs {cfg.max_epochs}"
    if cfg.max_time and progress.elapsed >= cfg.max_time:
        return f"reached max_time {cfg.max_time:g}s"
    if progress.horizon and progress.step >= progress.horizon:
        return f"reached the end of the {cfg.schedule} schedule ({progress.horizon} updates)"
    if cfg.patience and progress.validations_without_improvement >= cfg.patience:
        return f"no improvement in {cfg.patience} validations (patience)"
    return ""


def record_job(progress: Progress, cfg: TrainConfig, update_freq: int, processes: int,
               device: torch.device) -> None:
    """The job's shape in the progress (a resumed run is checked against it) and the log."""
    progress.world_size = processes
    if cfg.schedule == "inverse-sqrt":
        progress.horizon = 0
    elif cfg.max_steps:
        progress.horizon = cfg.max_steps
    progress.tokens_per_update = cfg.max_tokens * update_freq * processes
    log.info("training on %s, %d process%s; tokens per update: %d x %d x %d = %d "
             "(max_tokens x update_freq x processes)", device, processes,
             "es" if processes > 1 else "", cfg.max_tokens, update_freq, processes,
             progress.tokens_per_update)


class BadUpdates:
    """Updates skipped in a row for a non-finite loss or gradient; too many end training."""

    def __init__(self, cfg: TrainConfig, metrics: MetricsLog):
        self.cfg = cfg
        self.metrics = metrics
        self.in_a_row = 0

    def passed(self) -> None:
        self.in_a_row = 0

    def skipped(self, step: int, loss: float, grad_norm: float) -> None:
        """Update `step` + 1 was skipped: warn, record, and stop after train.max_bad_steps."""
        self.in_a_row += 1
        log.warning("step %d: non-finite loss %s or gradient norm %s; update skipped (%d in a "
                    "row)", step + 1, loss, grad_norm, self.in_a_row)
        self.metrics.write({"event": "skipped", "step": step, "loss": str(loss)})
        if self.in_a_row >= self.cfg.max_bad_steps:
            raise TrainingDiverged(
                f"training stopped: {self.in_a_row} updates in a row had a non-finite loss; "
                f"lower train.lr (now {self.cfg.lr:g}) or set train.clip_norm; "
                "checkpoint_last.pt holds the last good state"
            )


# --------------------------------------------------------------------------- continuing


RESTART_ADVICE = "use --restart to train from scratch, or another --run-dir"


def check_same_run(bundle: Bundle, recipe: Recipe, tokenizer: Tokenizer,
                   data_fingerprints: dict[str, str], run_dir: Path) -> None:
    """Refuse to continue a run whose model, tokenizer or training data changed."""
    check_same_model(bundle, recipe, run_dir)
    if (bundle.spm_src, bundle.spm_tgt, bundle.vocab) != (
            tokenizer.src_bytes, tokenizer.tgt_bytes, tokenizer.vocab_bytes):
        raise ConfigError(f"{run_dir}: the tokenizer changed since this run started; "
                          f"{RESTART_ADVICE}")
    check_same_data(bundle, data_fingerprints, run_dir)


def check_same_model(bundle: Bundle, recipe: Recipe, run_dir: Path) -> None:
    old, new = bundle.recipe.model, recipe.model
    if old != new:
        changed = ", ".join(f"model.{name}" for name in changed_fields(old, new))
        raise ConfigError(
            f"{run_dir}: the recipe's model section changed since this run started "
            f"({changed}); {RESTART_ADVICE}"
        )


def check_same_data(bundle: Bundle, data_fingerprints: dict[str, str], run_dir: Path,
                    ignore: tuple[str, ...] = ()) -> None:
    """Refuse a run whose training data fingerprints (corpora.training_fingerprints) are
    not the checkpoint's, naming the recipe keys that changed; keys in `ignore` are
    checked elsewhere."""
    old = {k: v for k, v in bundle.data_fingerprints.items() if k not in ignore}
    new = {k: v for k, v in data_fingerprints.items() if k not in ignore}
    if old.get("init_from") != new.get("init_from"):
        raise ConfigError(f"{run_dir}: train.init_from names another model than this run "
                          f"started from; {RESTART_ADVICE}")
    if old != new:
        keys = [k for k in dict.fromkeys([*new, *old]) if old.get(k) != new.get(k)]
        changed = ", ".join(dict.fromkeys(map(_recipe_key, keys)))
        raise ConfigError(f"{run_dir}: the training data changed since this run started "
                          f"({changed}); {RESTART_ADVICE}")


def _recipe_key(fingerprint_key: str) -> str:
    """The recipe key behind a training data fingerprint: "train.tgt" -> "data.train.tgt",
    "train-2.links" -> "data.train[1].alignments"."""
    split, _, part = fingerprint_key.partition(".")
    if not part:
        return {"tokenizer": "the tokenizer",
                "sample_alpha": "tokenizer.sample_alpha"}.get(split, split)
    number = split.removeprefix("train-")
    corpus = f"data.train[{int(number) - 1}]" if number.isdigit() else "data.train"
    return f"{corpus}.{'alignments' if part == 'links' else part}"


def training_complete(recipe: Recipe, run_dir: Path, tokenizer: Tokenizer,
                      data_fingerprints: dict[str, str]) -> str:
    """Why the run in run_dir needs no more training under this recipe ('' if it does).

    Raises ConfigError when the run cannot continue under this recipe at all."""
    paths = RunPaths(run_dir)
    if not paths.last.is_file():
        return ""
    bundle = load_checkpoint(paths.last)
    check_same_run(bundle, recipe, tokenizer, data_fingerprints, run_dir)
    if bundle.train_state is None:
        return ""
    return stop_reason(recipe.train, bundle.train_state.progress)


# --------------------------------------------------------------------------- metrics.jsonl


class MetricsLog:
    """RUN_DIR/metrics.jsonl: one JSON record per line, appended as training goes, and
    mirrored to TensorBoard (tblog.py) while `tensorboard` is open."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path = path
        self.enabled = enabled  # only one process of a distributed run writes
        self.tensorboard: TensorBoardLog | None = None

    def open_tensorboard(self, log_dir: Path, resume_step: int) -> None:
        """Mirror to TensorBoard from here on, when the package is installed."""
        if self.enabled and tensorboard_available():
            self.tensorboard = TensorBoardLog(log_dir, resume_step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(json.dumps(record) + "\n")
        except OSError as exc:  # a full disk: the write's error names no file
            raise OutputError(f"{self.path}: cannot write ({exc.strerror or exc}); the "
                              "run resumes from its last checkpoint") from None
        if self.tensorboard is not None:
            self.tensorboard.write(record)

    def truncate(self, step: int) -> None:
        """Drop records written after the checkpoint we resume from: they will be redone."""
        if not self.enabled or not self.path.is_file():
            return
        kept = [r for r in read_json_lines(self.path) if r.get("step", 0) <= step]
        atomic_write_bytes(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode())


# --------------------------------------------------------------------------- signals


class StopSignals:
    """While active, SIGINT/SIGTERM only set `received`: the loop saves and stops at the
    end of the current update. A second signal stops at once (the default handler)."""

    def __init__(self) -> None:
        self.received = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signals need it
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        signal.signal(signum, signal.SIG_DFL)

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


# --------------------------------------------------------------------------- random state


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
