"""Learning-rate schedules (`train.schedule`): all warm up linearly to the peak, then

    inverse-sqrt  peak * sqrt(warmup / step), never reaching a floor ("Attention Is All
                  You Need"; needs no horizon);
    linear        straight down to train.min_lr at the horizon;
    cosine        half a cosine down to train.min_lr at the horizon;
    wsd           warmup-stable-decay: the peak until the last train.decay_fraction of
                  the horizon, then straight down to train.min_lr at the horizon.

The horizon is the update the schedule ends at. For train.max_steps it is max_steps, fixed.
For a train.max_time budget it is first estimated from the mean speed at the first
validation after the warmup (`estimate_horizon`), then checked at every validation after
it (every train.valid_every updates without a validation set) against the recent speed
(`revised_horizon`), so that the rate reaches min_lr within the budget whether the
machine slows or speeds up. The recent speed is the slower of the speed since the last
check and an average weighted toward the recent checks: a slowdown counts at once, a
speed-up (or a lucky stretch) only as it lasts. A horizon that no longer fits, or leaves
more than twice SAFETY_MARGIN of the budget unused, is revised to leave that margin
spare; a steady machine keeps its first estimate. Once the decay is under way a revision
cannot make the rate jump: from the update it is made at, the rate goes straight from
where it is to min_lr at the new horizon (the decay's anchor).

Horizon, anchor and the revisions are stored in the checkpoint's Progress, and the rate
is a pure function of them (`scheduled_lr`), never of the clock: a resumed run follows
the recorded schedule, and resume stays bit-exact. Past the horizon: min_lr.
"""

from __future__ import annotations

import logging
import math

from mtkit.config import TrainConfig
from mtkit.model.checkpoint import Progress

log = logging.getLogger("mtkit")

SCHEDULES = ("inverse-sqrt", "linear", "cosine", "wsd")
# The share of train.max_time a revised horizon leaves unused: room for the machine to
# slow after the last check without the budget ending above the floor.
SAFETY_MARGIN = 0.02


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
                  horizon: int = 0, min_lr: float = 0.0, decay_fraction: float = 0.2,
                  decay_from: tuple[int, float] | None = None) -> float:
    """Learning rate for update `step` (from 1). A horizon of 0 (not estimated yet) keeps
    a decaying schedule at its peak after the warmup. `decay_from` (update, rate), set by
    a revision of the horizon during the decay: from that update on, the rate goes
    straight from that rate to min_lr at the horizon, whatever the schedule."""
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
    if decay_from is not None and step >= decay_from[0]:
        start, rate = decay_from
        done = (step - start) / max(horizon - start, 1)
        return rate + (min_lr - rate) * done
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


def scheduled_lr(cfg: TrainConfig, progress: Progress, step: int) -> float:
    """The rate of update `step` under the run's recorded schedule. The anchor belongs to
    a budget's revised horizon: a max_steps horizon is the schedule's own shape, even in a
    run that trained under a budget before."""
    anchor = None
    if progress.decay_from_step and cfg.max_time and not cfg.max_steps:
        anchor = (progress.decay_from_step, progress.decay_from_lr)
    return learning_rate(cfg.schedule, step, cfg.lr, cfg.warmup_steps, progress.horizon,
                         cfg.min_lr, cfg.decay_fraction, anchor)


def estimate_horizon(step: int, elapsed: float, budget: float) -> int:
    """The update a `budget`-second run will end at, at the mean speed so far (`step`
    updates in `elapsed` seconds); at least the next update."""
    seconds_per_update = elapsed / max(step, 1)
    return max(step + 1, int(budget / max(seconds_per_update, 1e-9)))


def revised_horizon(horizon: int, step: int, elapsed: float, seconds_per_update: float,
                    budget: float, margin: float) -> int:
    """The horizon after a check at update `step`, `elapsed` seconds in, at the speed
    expected from here. It stays while it fits the budget with less than twice `margin`
    seconds to spare; otherwise the budget less the margin sets it: fewer updates after a
    slowdown, more after a speed-up. At least the next update."""
    seconds_per_update = max(seconds_per_update, 1e-9)
    fits = step + (budget - elapsed) / seconds_per_update  # where the budget ends
    spare = margin / seconds_per_update
    # a hundredth of an update of slack: a steady clock's float rounding moves nothing;
    # twice the margin below: a speed-up settling moves the horizon a few times, not at
    # every check
    if fits - 2 * spare < horizon <= fits + 0.01:
        return horizon
    return max(step + 1, int(fits - spare))


def revise_horizon_when_due(cfg: TrainConfig, progress: Progress, validated: bool) -> None:
    """A max_time budget's horizon, once the warmup is over: estimated at its first
    validation (`validated` this step, so that validations weigh in the speed as they will
    to the end; any step without a validation set) from the mean speed so far, then checked
    at each validation at least train.valid_every updates after the last check against
    the recent speed, and revised when it no longer fits (`revised_horizon`). All in the
    progress; the clock is rank 0's, so every rank decides alike."""
    if (cfg.schedule == "inverse-sqrt" or not cfg.max_time or cfg.max_steps or not validated
            or progress.step < max(cfg.warmup_steps, 1)):
        return
    step, elapsed = progress.step, progress.elapsed
    if not progress.horizon:
        progress.horizon = estimate_horizon(step, elapsed, cfg.max_time)
        progress.checked_step, progress.checked_elapsed = step, elapsed
        progress.seconds_per_update = elapsed / step
        progress.revisions.append((step, progress.horizon))
        log.info("%s schedule: %d updates in the %gs budget at %.2fs an update so far; "
                 "the learning rate reaches %g there", cfg.schedule, progress.horizon,
                 cfg.max_time, elapsed / step, cfg.min_lr)
        return
    if step - progress.checked_step < cfg.valid_every or step >= progress.horizon:
        return  # not due, or the schedule has ended: training stops here
    latest = (elapsed - progress.checked_elapsed) / (step - progress.checked_step)
    weighted = 0.5 * (progress.seconds_per_update or latest) + 0.5 * latest
    expected = max(latest, weighted)
    new = revised_horizon(progress.horizon, step, elapsed, expected, cfg.max_time,
                          SAFETY_MARGIN * cfg.max_time)
    progress.checked_step, progress.checked_elapsed = step, elapsed
    progress.seconds_per_update = weighted
    if new != progress.horizon:
        _revise(cfg, progress, new, expected)


def _revise(cfg: TrainConfig, progress: Progress, new: int, seconds_per_update: float) -> None:
    """Move the horizon to `new`, anchoring the decay where the rate is now when the decay
    is under way (under the old horizon or the new one), so that the rate never jumps."""
    step, old = progress.step, progress.horizon
    rate = scheduled_lr(cfg, progress, step)  # of the update just made
    reshaped = learning_rate(cfg.schedule, step, cfg.lr, cfg.warmup_steps, new, cfg.min_lr,
                             cfg.decay_fraction)
    if progress.decay_from_step or rate < cfg.lr or reshaped < cfg.lr:
        progress.decay_from_step, progress.decay_from_lr = step, rate
    progress.horizon = new
    progress.revisions.append((step, new))
    log.info("%s schedule: horizon %d -> %d updates at step %d, at %.2fs an update from "
             "here, %.0fs of the %gs budget left; the learning rate goes from %g to %g "
             "there", cfg.schedule, old, new, step, seconds_per_update,
             cfg.max_time - progress.elapsed, cfg.max_time, rate, cfg.min_lr)
