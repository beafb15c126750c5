"""recipes/bleu_by_minute.py: which kept checkpoint stands for each minute of a run."""

from __future__ import annotations

import importlib.util
import json

from builders import RECIPES

spec = importlib.util.spec_from_file_location("bleu_by_minute", RECIPES / "bleu_by_minute.py")
bleu_by_minute = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bleu_by_minute)

CLOCK = {50: 40.0, 100: 80.0, 150: 130.0, 200: 190.0, 250: 250.0, 300: 320.0}


def test_each_minute_gets_the_last_checkpoint_saved_by_then():
    rows = bleu_by_minute.checkpoints_by_minute([100, 200, 250, 300], CLOCK, every=2)
    assert rows == [(2, 100), (4, 200), (6, 300)]  # 250 came at 250 s


def test_a_minute_with_no_new_checkpoint_is_not_repeated():
    rows = bleu_by_minute.checkpoints_by_minute([100, 300], CLOCK, every=1)
    assert rows == [(2, 100), (6, 300)]


def test_an_unlogged_step_takes_the_clock_of_the_last_logged_update_before_it():
    rows = bleu_by_minute.checkpoints_by_minute([20, 120, 321], CLOCK, every=2)
    assert rows == [(2, 120), (6, 321)]  # 20: nothing logged before it


def test_the_clock_comes_from_train_and_valid_events(tmp_path):
    events = [{"event": "train", "step": 50, "elapsed": 30.0},
              {"event": "valid", "step": 50, "elapsed": 41.5},
              {"event": "average", "step": 50},
              {"event": "train", "step": 100, "elapsed": 70.0}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    assert bleu_by_minute.clock_of_steps(metrics) == {50: 41.5, 100: 70.0}
