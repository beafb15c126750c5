"""run.stop_reason, the one place the stopping rules live: each rule on its own, at its
boundary, 0 as "no limit", and which reason is named when several apply. (The trainer
obeying them: tests/integration/test_trainer.py.)"""

from __future__ import annotations

import pytest

from mtkit.config import TrainConfig
from mtkit.errors import ConfigError
from mtkit.model.checkpoint import Progress
from mtkit.train.run import stop_reason
from mtkit.train.trainer import updates_per_step


@pytest.mark.parametrize(
    "limits, going_on, stopped, needle",
    [
        ({"max_steps": 10}, {"step": 9}, {"step": 10}, "max_steps 10"),
        # the epoch counter is the epoch under way: it passes max_epochs once the last ends
        ({"max_epochs": 2}, {"epoch": 2}, {"epoch": 3}, "max_epochs 2"),
        ({"max_time": 60.0}, {"elapsed": 59.9}, {"elapsed": 60.0}, "max_time 60s"),
        ({"patience": 3}, {"validations_without_improvement": 2},
         {"validations_without_improvement": 3}, "patience"),
    ],
    ids=["max_steps", "max_epochs", "max_time", "patience"],
)
def test_each_rule_stops_at_its_limit(limits, going_on, stopped, needle):
    cfg = TrainConfig(**limits)
    assert stop_reason(cfg, Progress(**going_on)) == ""
    reason = stop_reason(cfg, Progress(**stopped))
    assert needle in reason, reason
    beyond = {key: value * 2 for key, value in stopped.items()}
    assert needle in stop_reason(cfg, Progress(**beyond))


def test_no_rule_set_never_stops():
    cfg = TrainConfig(max_steps=0, max_epochs=0, max_time=0.0, patience=0)
    far = Progress(step=10**9, epoch=10**6, elapsed=1e9, validations_without_improvement=10**6)
    assert stop_reason(cfg, far) == ""
    assert stop_reason(cfg, Progress()) == ""


def test_each_rule_names_itself_alone():
    """A progress past every limit but one is stopped by that one only when it is set."""
    far = Progress(step=100, epoch=100, elapsed=1e6, validations_without_improvement=100)
    for key, value, needle in (("max_steps", 50, "max_steps"), ("max_epochs", 5, "max_epochs"),
                               ("max_time", 10.0, "max_time"), ("patience", 4, "patience")):
        reason = stop_reason(TrainConfig(**{key: value}), far)
        assert needle in reason, (key, reason)
        others = {"max_steps", "max_epochs", "max_time", "patience"} - {key}
        assert not any(other in reason for other in others), (key, reason)


def test_max_steps_is_named_first_when_several_apply():
    cfg = TrainConfig(max_steps=10, max_epochs=1, max_time=1.0, patience=1)
    both = Progress(step=10, epoch=2, elapsed=5.0, validations_without_improvement=1)
    reason = stop_reason(cfg, both)
    assert "max_steps 10" in reason, reason
    assert not any(other in reason for other in ("max_epochs", "max_time", "patience")), reason


def test_tokens_per_update_sets_update_freq_for_the_world_size():
    assert updates_per_step(TrainConfig(max_tokens=500, update_freq=3), 4) == 3  # unset
    recipe = TrainConfig(max_tokens=500, tokens_per_update=4000)
    assert [updates_per_step(recipe, n) for n in (1, 2, 4, 8)] == [8, 4, 2, 1]
    with pytest.raises(ConfigError, match=r"multiple of train.max_tokens x world size "
                                          r"\(500 x 16 = 8000\)"):
        updates_per_step(recipe, 16)  # fewer tokens than one batch per rank
    with pytest.raises(ConfigError, match="tokens_per_update"):
        updates_per_step(TrainConfig(max_tokens=500, tokens_per_update=1200), 2)


def test_training_ends_at_the_schedule_horizon():
    from mtkit.config import TrainConfig
    from mtkit.model.checkpoint import Progress
    from mtkit.train.run import stop_reason

    cfg = TrainConfig(schedule="wsd", max_time=600.0, max_steps=0)
    assert stop_reason(cfg, Progress(step=99, horizon=100, elapsed=10.0)) == ""
    assert stop_reason(cfg, Progress(step=100, horizon=100, elapsed=10.0)) == (
        "reached the end of the wsd schedule (100 updates)")
    assert "max_time" in stop_reason(cfg, Progress(step=50, horizon=100, elapsed=600.0))
