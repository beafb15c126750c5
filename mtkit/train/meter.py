"""The training sums behind each train log line (metrics.jsonl's "train" records).

The sums since the last line travel in every checkpoint (`Progress.log_window`), so a run
resumed between two log lines writes the next line with the same loss, nll, grad norm and
learning rate as the uninterrupted run (tokens/s is the training clock's, which goes on
from the checkpoint's).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from mtkit.model.checkpoint import Progress


@dataclass
class TrainMeter:
    since: float = 0.0  # the training clock (Progress.elapsed) where these sums start
    loss: float = 0.0
    nll: float = 0.0
    ntokens: int = 0
    updates: int = 0
    grad_norm: float = 0.0
    lr: float = 0.0  # the last update's
    align: float | None = None  # the guided-alignment loss, when training with one

    @classmethod
    def resumed(cls, progress: Progress) -> TrainMeter:
        """The sums the checkpoint carried, or new ones from its clock (older checkpoints
        carry none)."""
        if progress.log_window:
            return cls(**progress.log_window)
        return cls(since=progress.elapsed)

    def add(self, loss: float, nll: float, ntokens: int, grad_norm: float, lr: float,
            align: float | None = None) -> None:
        if align is not None:
            self.align = (self.align or 0.0) + align
        self.loss += loss
        self.nll += nll
        self.ntokens += ntokens
        self.updates += 1
        self.grad_norm += grad_norm
        self.lr = lr

    def window(self) -> dict[str, Any]:
        """The sums as the checkpoint stores them."""
        return dataclasses.asdict(self)

    def means(self, elapsed: float) -> dict[str, float]:
        """Means per target token (loss, nll) and per update (grad norm) of these sums,
        and the speed up to the training clock `elapsed`."""
        seconds = max(elapsed - self.since, 1e-9)
        n, updates = max(self.ntokens, 1), max(self.updates, 1)
        return {
            "loss": self.loss / n,
            "nll": self.nll / n,
            "ppl": math.exp(min(self.nll / n, 50.0)),
            "lr": self.lr,
            "grad_norm": self.grad_norm / updates,
            "tgt_tokens_per_s": self.ntokens / seconds,
            **({} if self.align is None else {"align_loss": self.align / n}),
        }

    def record(self, progress: Progress) -> dict[str, Any]:
        """The metrics record of a train log line at `progress`."""
        return {**self.means(progress.elapsed), "event": "train", "step": progress.step,
                "epoch": progress.epoch, "elapsed": round(progress.elapsed, 1)}
