"""A train.max_time budget's horizon, revised as training goes (train/schedule.py): runs
simulated with a fake clock (the trainer's order: the rate of the next update, the update,
the clock, a validation, the horizon check, the stop rules) whose machine slows down or
speeds up mid-run. Invariants: the last update runs at train.min_lr within the budget,
the rate never rises after the peak nor jumps at a revision, a steady machine keeps the
first estimate, and a resumed run follows the recorded schedule. (The schedules' shapes
at a given horizon: tests/unit/test_loss_schedule.py; a real trainer:
tests/integration/test_trainer.py.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from mtkit.config import TrainConfig
from mtkit.model.checkpoint import Progress
from mtkit.train.run import stop_reason
from mtkit.train.schedule import (
    SAFETY_MARGIN,
    estimate_horizon,
    revise_horizon_when_due,
    revised_horizon,
    scheduled_lr,
)

BUDGET = 1000.0
PEAK, FLOOR, WARMUP, EVERY = 1e-3, 1e-5, 50, 50


def budget_cfg(schedule: str = "wsd", **changes) -> TrainConfig:
    return TrainConfig(**{"schedule": schedule, "lr": PEAK, "min_lr": FLOOR,
                          "warmup_steps": WARMUP, "max_time": BUDGET, "max_steps": 0,
                          "valid_every": EVERY, "decay_fraction": 0.2, **changes})


def speed(before: float, after: float, change_at: float) -> Callable[[float], float]:
    """Seconds an update takes, by the training clock when it starts."""
    return lambda clock: before if clock < change_at else after


@dataclasses.dataclass
class Simulated:
    progress: Progress
    rates: list[float]  # the rate of each update, in order


def simulate(cfg: TrainConfig, seconds: Callable[[float], float], validation: float = 0.0,
             validated_set: bool = True, progress: Progress | None = None,
             until: int = 0) -> Simulated:
    """Train until a stop rule (or update `until`) on a fake clock: an update takes
    seconds(clock), a validation (every cfg.valid_every updates) `validation` seconds."""
    progress = progress or Progress()
    rates = []
    while True:
        rates.append(scheduled_lr(cfg, progress, progress.step + 1))
        progress.elapsed += seconds(progress.elapsed)
        progress.step += 1
        validated = not validated_set or progress.step % cfg.valid_every == 0
        if validated_set and validated:
            progress.elapsed += validation
        revise_horizon_when_due(cfg, progress, validated)
        progress.finished = stop_reason(cfg, progress)
        if progress.finished or progress.step == until:
            return Simulated(progress, rates)


def assert_ends_at_the_floor(run: Simulated) -> None:
    progress = run.progress
    # stopped at the horizon, within the budget (which may end at the same update)
    assert progress.step == progress.horizon and progress.elapsed <= BUDGET, progress.finished
    assert run.rates[-1] == pytest.approx(FLOOR)
    assert run.rates[-2] > FLOOR


def assert_never_rises_nor_jumps(run: Simulated) -> None:
    after_peak = run.rates[WARMUP - 1:]
    assert after_peak[0] == PEAK
    assert all(a >= b for a, b in zip(after_peak, after_peak[1:]))
    for step, horizon in run.progress.revisions[1:]:
        # a revision at update `step` moves on from the rate update `step` ran at, at no
        # more than its new segment's slope per update
        before, after = run.rates[step - 1], run.rates[step]
        assert before - after <= (before - FLOOR) / max(horizon - step, 1) + 1e-15


@pytest.mark.parametrize("validation", [0.0, 2.0])
@pytest.mark.parametrize("validated_set", [True, False])
def test_a_steady_machine_keeps_the_first_estimate(validation, validated_set):
    run = simulate(budget_cfg(), lambda clock: 1.0, validation, validated_set)
    first = WARMUP  # the first validation after the warmup (or the warmup's end)
    horizon = estimate_horizon(first, first * 1.0 + (validation if validated_set else 0.0),
                               BUDGET)
    assert run.progress.revisions == [(first, horizon)]  # estimated once, never revised
    assert run.progress.horizon == horizon == (961 if validation and validated_set else 1000)
    assert run.progress.decay_from_step == 0  # the schedule's own shape
    assert_ends_at_the_floor(run)


@pytest.mark.parametrize("schedule", ["wsd", "linear", "cosine"])
@pytest.mark.parametrize("slows_at", [200.0, 520.0, 810.0, 880.0])
def test_a_machine_that_slows_2x_still_ends_at_the_floor(schedule, slows_at):
    """The first estimate is 1,000 updates; the machine halves its speed at `slows_at`
    seconds (880: within wsd's decay, which starts at update 800)."""
    run = simulate(budget_cfg(schedule), speed(1.0, 2.0, slows_at), validation=1.0)
    assert run.progress.revisions[0] == (WARMUP, 980)
    assert len(run.progress.revisions) >= 2 and run.progress.horizon < 980
    assert_ends_at_the_floor(run)
    assert_never_rises_nor_jumps(run)
    # the margin: the budget less 2% at the speed measured
    assert run.progress.elapsed >= BUDGET * (1 - SAFETY_MARGIN) - 2 * 2.0 - 1.0


@pytest.mark.parametrize("schedule", ["wsd", "linear", "cosine"])
@pytest.mark.parametrize("speeds_up_at", [300.0, 700.0])
def test_a_machine_that_speeds_up_uses_the_time_it_gains(schedule, speeds_up_at):
    run = simulate(budget_cfg(schedule), speed(2.0, 1.0, speeds_up_at))
    first = run.progress.revisions[0]
    assert first == (WARMUP, 500)
    assert run.progress.horizon > 500  # more updates than the first estimate
    assert_ends_at_the_floor(run)
    assert_never_rises_nor_jumps(run)
    # it moves out until less than twice the margin is left over
    assert run.progress.elapsed >= BUDGET * (1 - 2 * SAFETY_MARGIN) - 2.0


def test_a_revision_during_the_decay_continues_from_the_rate_it_reached():
    """wsd decays from update 800 of 1,000; the machine slows at update 860: the horizon
    comes in and the decay goes on, steeper, from where it was (the anchor)."""
    run = simulate(budget_cfg(), speed(1.0, 2.0, 860.0))
    progress = run.progress
    step, horizon = progress.revisions[-1]
    assert step == 900 and horizon < 1000
    assert (progress.decay_from_step, progress.decay_from_lr) == (900, run.rates[899])
    assert PEAK > run.rates[899] > FLOOR  # the decay was under way
    assert_ends_at_the_floor(run)
    assert_never_rises_nor_jumps(run)


def test_a_slowdown_before_the_decay_moves_it_without_an_anchor():
    run = simulate(budget_cfg(), speed(1.0, 2.0, 300.0))
    assert run.progress.decay_from_step == 0  # still at the peak when revised
    assert run.rates[: run.progress.horizon].count(PEAK) > 0.6 * run.progress.horizon


def test_a_resumed_run_follows_the_recorded_schedule():
    """Interrupted after a revision during the decay and resumed from the checkpoint's
    progress: the same rates as in one go (the clock only moves the horizon at checks)."""
    cfg, seconds = budget_cfg(), speed(1.0, 2.0, 860.0)
    whole = simulate(cfg, seconds)
    first = simulate(cfg, seconds, until=910)
    assert first.progress.decay_from_step == 900
    saved = Progress.from_dict(dataclasses.asdict(first.progress))  # as the checkpoint has it
    assert saved == first.progress
    rest = simulate(cfg, seconds, progress=saved)
    assert first.rates + rest.rates == whole.rates
    assert rest.progress.revisions == whole.progress.revisions


def test_a_progress_of_before_the_revisions_loads_and_is_checked():
    """A checkpoint written before horizons were revised: its Progress lacks the fields;
    its first check measures the speed from the start."""
    old = {"step": 400, "elapsed": 400.0, "horizon": 1000, "top": [[20.5, 200]]}
    progress = Progress.from_dict(old)
    assert (progress.checked_step, progress.decay_from_step, progress.revisions) == (0, 0, [])
    run = simulate(budget_cfg(), speed(1.0, 2.0, 500.0), progress=progress)
    assert_ends_at_the_floor(run)


def test_a_horizon_reached_at_a_check_is_not_moved():
    """The check at update 1,000 (a validation) comes before the stop rules: a machine
    that sped up at the end must not move a horizon the rate has already reached."""
    run = simulate(budget_cfg(), speed(1.0, 0.1, 955.0))
    assert run.progress.revisions == [(WARMUP, 1000)] and run.progress.step == 1000


def test_max_steps_and_inverse_sqrt_have_no_revisions():
    fixed = simulate(budget_cfg(max_steps=600), speed(1.0, 4.0, 100.0),
                     progress=Progress(horizon=600))
    assert fixed.progress.revisions == [] and fixed.progress.horizon == 600
    assert "max_time" in fixed.progress.finished  # the budget ends first: not revised
    sqrt = simulate(budget_cfg("inverse-sqrt"), speed(1.0, 2.0, 300.0))
    assert sqrt.progress.horizon == 0 and sqrt.progress.revisions == []


def test_revised_horizon():
    # at update 200, 200 s in, 1 s an update: 1,000 updates fit; the margin (20 s) is 20
    # of them: the horizon is kept anywhere above 1000 - 2 x 20, up to 1000
    assert revised_horizon(1000, 200, 200.0, 1.0, 1000.0, 20.0) == 1000
    assert revised_horizon(961, 200, 200.0, 1.0, 1000.0, 20.0) == 961
    assert revised_horizon(960, 200, 200.0, 1.0, 1000.0, 20.0) == 980
    assert revised_horizon(1010, 200, 200.0, 1.0, 1000.0, 20.0) == 980  # does not fit
    assert revised_horizon(900, 200, 200.0, 1.0, 1000.0, 20.0) == 980  # leaves too much
    # 2 s an update from here: 400 updates left less 10 for the margin
    assert revised_horizon(1000, 200, 200.0, 2.0, 1000.0, 20.0) == 590
    assert revised_horizon(1000, 200, 1100.0, 1.0, 1000.0, 20.0) == 201  # over budget


def test_a_slowdown_counts_at_once_a_speed_up_as_it_lasts():
    """The speed a check expects: the slower of the last stretch's and a weighted one."""
    slow = simulate(budget_cfg(), speed(1.0, 2.0, 100.0), until=150)
    # update 150 at 200 s, 2 s an update from there: 150 + (1000 - 200 - 20) / 2
    assert slow.progress.revisions[1] == (150, 540)
    fast = simulate(budget_cfg(), speed(2.0, 1.0, 200.0), until=150)
    # update 150 at 250 s, 1.5 s an update (2 then 1 weighted): 150 + (1000 - 250 - 20) / 1.5
    assert fast.progress.revisions[1] == (150, 636)
    assert fast.progress.seconds_per_update == 1.5
