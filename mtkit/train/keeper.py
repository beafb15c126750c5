"""Which checkpoint files a run keeps: checkpoint_last.pt (resumable), the last
train.keep_last step checkpoints, checkpoint_best.pt, checkpoint_ema.pt, and the best-K
models that `train.average: best-K` averages.

Only the writing rank touches files; the best-K list (in Progress) is kept alike on every
rank. A save writes checkpoint_last.pt last, each file atomically: a process killed at any
moment leaves the previous checkpoint_last.pt whole, and the best-K files it wrote after
that one are dropped when the run resumes (`drop_stale_top`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from mtkit.config import TrainConfig
from mtkit.model.checkpoint import Bundle, Progress, save_checkpoint
from mtkit.train.run import RunPaths


class Snapshots(Protocol):
    """The training state as bundles (the trainer)."""

    def bundle(self, with_train_state: bool) -> Bundle: ...

    def averaged(self) -> AbstractContextManager[Bundle | None]:
        """The train.ema bundle while its weights are in the model; None without EMA."""
        ...


class CheckpointKeeper:
    def __init__(self, paths: RunPaths, cfg: TrainConfig, writes: bool, state: Snapshots):
        self.paths = paths
        self.cfg = cfg
        self.writes = writes
        self.state = state

    def save(self, step: int, step_checkpoint: bool) -> None:
        """checkpoint_last.pt, and (if `step_checkpoint`) checkpoint_STEP.pt, keeping the
        newest train.keep_last of those; the EMA's checkpoint with them."""
        if not self.writes:
            return
        self.paths.checkpoints.mkdir(parents=True, exist_ok=True)
        bundle = self.state.bundle(with_train_state=True)
        if step_checkpoint and self.cfg.keep_last > 0:
            save_checkpoint(self.paths.step(step), bundle.without_train_state())
            for old in self.paths.step_checkpoints()[: -self.cfg.keep_last]:
                old.unlink(missing_ok=True)
        with self.state.averaged() as averaged:  # a candidate for model.pt
            if averaged is not None:
                save_checkpoint(self.paths.ema, averaged)
        save_checkpoint(self.paths.last, bundle)

    def save_final(self, step: int) -> None:
        """The state training stopped in, unless the last step's save wrote it."""
        self.save(step, step_checkpoint=not self.paths.step(step).exists())

    def save_model(self, path: Path) -> None:
        if self.writes:
            self.paths.checkpoints.mkdir(parents=True, exist_ok=True)
            save_checkpoint(path, self.state.bundle(with_train_state=False))

    def keep_if_among_best(self, progress: Progress, score: float) -> None:
        """Keep the K best-scoring validated models on disk for `train.average: best-K`."""
        k, top, step = self.cfg.average.k, progress.top, progress.step
        if len(top) >= k and score <= top[-1][0]:
            return
        self.save_model(self.paths.top(step))
        top.append((score, step))
        top.sort(key=lambda entry: -entry[0])  # stable: among equal scores the older stays
        if self.writes:
            for _, dropped in top[k:]:
                self.paths.top(dropped).unlink(missing_ok=True)
        del top[k:]

    def drop_stale_top(self, progress: Progress) -> None:
        """A run killed between saving best_N.pt and its next checkpoint_last.pt leaves
        files the resumed run does not know about; they would skew the best-K average."""
        if not self.writes:
            return
        kept = {self.paths.top(step) for _, step in progress.top}
        for path in self.paths.top_checkpoints():
            if path not in kept:
                path.unlink(missing_ok=True)
