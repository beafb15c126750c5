"""Learning-rate schedules (`train.schedule`): all warm up linearly to the peak, then

    inverse-sqrt  peak * sqrt(warmup / step), never reaching a floor ("Attention Is All
                  You Need"; needs no horizon);
    linear        straight down to train.min_lr at the horizon;
    cosine        half a cosine down to train.min_lr at the horizon;
    wsd           warmup-stable-decay: the peak until the last train.decay_fraction of
                  the horizon, then straight down to train.min_lr at the horizon.

The horizon is the update the schedule ends at: train.max_steps, or for a train.max_time
budget an estimate made once from the measured speed (`estimate_horizon`; the trainer
makes it at the first validation after the warmup), stored in the
checkpoint so that a resumed run follows the same curve. Past the horizon: min_lr.
"""

from __future__ import annotations

import logging
import math

from mtkit.config import TrainConfig
from mtkit.model.checkpoint import Progress

log = logging.getLogger("mtkit")

SCHEDULES = ("inverse-sqrt", "linear", "cosine", "wsd")


def inverse_sqrt_lr(step: int, peak_lr: float, warmup_steps: int) -> float:
    """Learning rate for update `step` (counted from 1).

        lr = peak_lr * step / warmup                 for step < warmup   (linear warmup)
        lr = peak_lr * sqrt(warmup / step)           for step >= warmup  (inverse sqrt decay)

    The two pieces meet at step == warmup, where lr == peak_lr. warmup_steps 0 means no
    warmup: it is treated as 1, so step 1 gets peak_lr and step s gets peak_lr / sqrt(s).
    """
    warmup = max(warmup_steps, 1)
    step = max(step, 1)
    if step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(warmup / step)


def learning_rate(schedule: str, step: int, peak_lr: float, warmup_steps: int,
                  horizon: int = 0, min_lr: float = 0.0, decay_fraction: float = 0.2
                  ) -> float:
    """Learning rate for update `step` (from 1). A horizon of 0 (not estimated yet) keeps
    a decaying schedule at its peak after the warmup."""
    if schedule == "inverse-sqrt":
        return inverse_sqrt_lr(step, peak_lr, warmup_steps)
    warmup = max(warmup_steps, 1)
    step = max(step, 1)
    if step < warmup:
        return peak_lr * step / warmup
    if horizon <= 0:
        return peak_lr
    if step >= horizon:
        return min_lr
    if schedule == "wsd":
        decay_start = max(warmup, horizon - round(decay_fraction * horizon))
        if step < decay_start:
            return peak_lr
        done = (step - decay_start) / max(horizon - decay_start, 1)
        return peak_lr + (min_lr - peak_lr) * done
    done = (step - warmup) / max(horizon - warmup, 1)  # 0 at the peak, 1 at the horizon
    if schedule == "linear":
        return peak_lr + (min_lr - peak_lr) * done
    if schedule == "cosine":
        return min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * done))
    raise ValueError(f"unknown schedule {schedule!r}")  # config.py admits only SCHEDULES


def estimate_horizon(step: int, elapsed: float, budget: float) -> int:
    """The update a `budget`-second run will end at, at the mean speed so far (`step`
    updates in `elapsed` seconds); at least the next update."""
    seconds_per_update = elapsed / max(step, 1)
    return max(step + 1, int(budget / max(seconds_per_update, 1e-9)))


def estimate_horizon_when_due(cfg: TrainConfig, progress: Progress, validated: bool) -> None:
    """A max_time budget's horizon, once the warmup is over: at its first validation
    (`validated` this step, so that validations weigh in the mean speed as they will to
    the end; any step without a validation set), from the speed so far, stored in the
    progress. The clock is rank 0's, so every rank estimates alike."""
    if (cfg.schedule == "inverse-sqrt" or progress.horizon or not cfg.max_time
            or progress.step < max(cfg.warmup_steps, 1) or not validated):
        return
    progress.horizon = estimate_horizon(progress.step, progress.elapsed, cfg.max_time)
    log.info("%s schedule: %d updates in the %gs budget at %.2fs an update so far; "
             "the learning rate reaches %g there", cfg.schedule, progress.horizon,
             cfg.max_time, progress.elapsed / progress.step, cfg.min_lr)
