"""The trainer in process: the reverse-task canary, exact resume, checkpoints and
metrics, stopping rules (max_steps, max_epochs, patience), bad losses, best-K, compile.
(The rules alone: tests/unit/test_run.py; through `mtkit train`: tests/system.)"""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
import torch
from builders import bible_recipe, metrics_records, prepare, reverse_recipe, reverse_task, weights

from mtkit.config import load_recipe, recipe_from_dict
from mtkit.decode.translate import Translator
from mtkit.errors import Interrupted, TrainingDiverged
from mtkit.model.checkpoint import load_checkpoint
from mtkit.train import trainer as trainer_module
from mtkit.train.run import RunPaths
from mtkit.train.trainer import Trainer, train


def test_reverse_task_canary(tmp_path):
    """A correct model and trainer learn to reverse short sequences within seconds."""
    files = reverse_task(tmp_path / "data")
    recipe = recipe_from_dict(reverse_recipe(files), name="reverse")
    run_dir = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run_dir)
    train(recipe, run_dir, tokenizer, run_dir / "data", fingerprints, device="cpu")

    translator = Translator.load(RunPaths(run_dir).last, device="cpu", beam=1)
    sources = files["test"][0].read_text().splitlines()
    targets = files["test"][1].read_text().splitlines()
    outputs = translator.translate(sources)
    accuracy = sum(o == t for o, t in zip(outputs, targets)) / len(targets)
    assert accuracy >= 0.8, f"reverse accuracy {accuracy:.2f}: {outputs[:3]} vs {targets[:3]}"


def test_resumed_training_is_bit_identical(tmp_path):
    """N steps in one go == N/2 steps, a fresh process state, then N/2 more: the weights,
    and the train log lines, one of which spans the stop (steps 5-8)."""
    path = bible_recipe(
        tmp_path,
        train={"max_steps": 12, "update_freq": 2, "valid_every": 4, "save_every": 4,
               "log_every": 4},
        model={"dropout": 0.3, "attn_dropout": 0.1},
    )
    whole = load_recipe(path)
    tokenizer, fingerprints = prepare(whole, tmp_path / "whole")
    train(whole, tmp_path / "whole", tokenizer, tmp_path / "whole" / "data", fingerprints, "cpu")

    half = load_recipe(path, ["train.max_steps=6"])
    run = tmp_path / "split"
    tokenizer, fingerprints = prepare(half, run)
    train(half, run, tokenizer, run / "data", fingerprints, "cpu")
    torch.manual_seed(1234)  # the resumed run must not depend on the process's RNG state
    progress = train(whole, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.step == 12

    a, b = weights(RunPaths(tmp_path / "whole").last), weights(RunPaths(run).last)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    steps = [r["step"] for r in metrics_records(run)]
    assert steps == sorted(steps), "metrics.jsonl must read in step order after a resume"
    sums = ("step", "loss", "nll", "ppl", "lr", "grad_norm")
    lines = [[{k: r[k] for k in sums} for r in metrics_records(directory, "train")]
             for directory in (tmp_path / "whole", run)]
    assert [r["step"] for r in lines[0]] == [4, 8, 12]
    assert lines[1] == lines[0]


def test_checkpoints_and_metrics(tmp_path):
    path = bible_recipe(tmp_path, train={"max_steps": 20, "keep_last": 2})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    paths = RunPaths(run)
    assert progress.step == 20 and "max_steps" in progress.finished
    assert [p.name for p in paths.step_checkpoints()] == ["checkpoint_10.pt", "checkpoint_20.pt"]
    assert paths.best.is_file() and paths.last.is_file()
    train_records = metrics_records(run, "train")
    valid_records = metrics_records(run, "valid")
    assert {
        "step",
        "epoch",
        "loss",
        "nll",
        "lr",
        "grad_norm",
        "tgt_tokens_per_s",
        "elapsed",
    } <= train_records[0].keys()
    assert [r["step"] for r in valid_records] == [10, 20]
    assert all("bleu" in r and "ppl" in r for r in valid_records)
    # A finished run does no more work when asked again.
    again = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert again.step == 20


def test_max_epochs_stops_after_the_last_epoch(tmp_path):
    path = bible_recipe(tmp_path, train={"max_steps": 0, "max_epochs": 1, "max_tokens": 4096})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert "max_epochs" in progress.finished
    assert progress.epoch == 2  # the first epoch is complete


def test_patience_stops_training(tmp_path):
    """train.patience: P validations in a row without a better dev score end the run. With
    lr 0 the weights never move, so no validation after the first improves on it (an equal
    score is no improvement): the run stops after 1 + P validations, long before max_steps,
    and stays stopped."""
    patience, every, max_steps = 2, 2, 40
    path = bible_recipe(tmp_path, train={
        "patience": patience, "best_metric": "loss", "lr": 0.0, "max_steps": max_steps,
        "valid_every": every, "save_every": every, "log_every": every, "valid_bleu_lines": 0,
    })
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")

    assert "patience" in progress.finished, progress.finished
    stopped = every * (1 + patience)
    assert progress.step == stopped and stopped < max_steps
    valid = metrics_records(run, "valid")
    assert [r["step"] for r in valid] == [every * (i + 1) for i in range(1 + patience)]
    assert len({r["loss"] for r in valid}) == 1, "lr 0 must leave the dev loss unchanged"
    assert progress.best_step == every
    assert progress.validations_without_improvement == patience
    assert max(r["step"] for r in metrics_records(run)) == stopped

    again = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert again.step == stopped and "patience" in again.finished
    assert len(metrics_records(run, "valid")) == 1 + patience


def test_non_finite_loss_is_skipped_then_stops(tmp_path, monkeypatch):
    path = bible_recipe(tmp_path, train={"max_steps": 10, "max_bad_steps": 3})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    trainer = Trainer(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    original = trainer.model.forward
    calls = {"n": 0}

    def poisoned(src, tgt_in, positions=None):
        calls["n"] += 1
        logits = original(src, tgt_in, positions)
        return logits * float("nan") if calls["n"] > 2 else logits

    monkeypatch.setattr(trainer.model, "forward", poisoned)
    with pytest.raises(TrainingDiverged, match="lower train.lr"):
        trainer.fit()
    assert trainer.progress.step == 2
    assert len(metrics_records(run, "skipped")) == 3


def test_best_k_keeps_the_k_best_validated_models(tmp_path):
    path = bible_recipe(tmp_path, train={"average": "best-2"})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    trainer = Trainer(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    paths = RunPaths(run)
    for step, score in enumerate([1.0, 5.0, 3.0, 4.0, 2.0, 4.0], start=1):
        trainer.progress.step = step
        trainer.keeper.keep_if_among_best(trainer.progress, score)
    assert trainer.progress.top == [(5.0, 2), (4.0, 4)]  # a tie does not displace the older
    assert [p.name for p in paths.top_checkpoints()] == ["best_2.pt", "best_4.pt"]

    trainer.progress.step = 9  # as if killed after writing best_9.pt, before checkpoint_last
    trainer.keeper.save_model(paths.top(9))
    trainer.keeper.drop_stale_top(trainer.progress)
    assert [p.name for p in paths.top_checkpoints()] == ["best_2.pt", "best_4.pt"]


def test_compiled_training_matches_eager(tmp_path):
    """train.compile changes how the step runs, not what it computes. (Weights are not
    compared: a key bias has a zero gradient in exact arithmetic, so Adam turns rounding
    noise into full-size, different updates of it.)"""
    path = bible_recipe(tmp_path, train={"max_steps": 4, "log_every": 1, "valid_every": 100,
                                         "save_every": 100}, model={"dropout": 0.0})
    losses = {}
    for name, overrides in (("eager", []), ("compiled", ["train.compile=true"])):
        recipe = load_recipe(path, overrides)
        run = tmp_path / name
        tokenizer, fingerprints = prepare(recipe, run)
        train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
        losses[name] = [r["loss"] for r in metrics_records(run, "train")]
    assert len(losses["eager"]) == 4
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-4)


def test_a_decaying_schedule_resumes_bit_identically(tmp_path):
    """wsd to the max_steps horizon, interrupted at the end of epoch 1 (max_epochs) and
    resumed: the same weights as in one go, and the last update ran at train.min_lr."""
    schedule = {"max_steps": 12, "schedule": "wsd", "decay_fraction": 0.5, "min_lr": 1e-4,
                "warmup_steps": 2, "valid_every": 100, "save_every": 100, "log_every": 1}
    path = bible_recipe(tmp_path, train=schedule, model={"dropout": 0.3})
    whole = load_recipe(path)
    tokenizer, fingerprints = prepare(whole, tmp_path / "whole")
    train(whole, tmp_path / "whole", tokenizer, tmp_path / "whole" / "data", fingerprints, "cpu")
    rates = [r["lr"] for r in metrics_records(tmp_path / "whole", "train")]
    assert rates[1:6] == [0.003] * 5 and rates[-1] == pytest.approx(1e-4)  # stable, decayed

    run = tmp_path / "split"
    tokenizer, fingerprints = prepare(whole, run)
    first = train(load_recipe(path, ["train.max_epochs=1"]), run, tokenizer, run / "data",
                  fingerprints, "cpu")
    assert 2 < first.step < 12 and first.horizon == 12
    progress = train(whole, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.step == 12
    a, b = weights(RunPaths(tmp_path / "whole").last), weights(RunPaths(run).last)
    for key in a:
        assert torch.equal(a[key], b[key]), key


class FakeClock:
    """The trainer's clock (time.monotonic in trainer.py), moved only by updates: each
    takes seconds(training clock before it), the same in a resumed run."""

    def __init__(self, monkeypatch, seconds, interrupt_at: int = 0):
        self.now = 0.0
        monkeypatch.setattr(trainer_module, "time", SimpleNamespace(monotonic=self.monotonic))
        update = Trainer._update

        def timed_update(trainer, *args):
            self.now += seconds(trainer.progress.elapsed)
            update(trainer, *args)
            if trainer.progress.step == interrupt_at:  # as a scheduler would, mid-update
                os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(Trainer, "_update", timed_update)

    def monotonic(self) -> float:
        return self.now


def budget_recipe(tmp_path, **train):
    return bible_recipe(tmp_path, train={
        "max_steps": 0, "schedule": "wsd", "decay_fraction": 0.5, "min_lr": 1e-4,
        "warmup_steps": 3, "valid_every": 4, "valid_bleu_lines": 0, "save_every": 4,
        "log_every": 1, **train}, model={"dropout": 0.3})


def test_a_time_budget_on_a_steady_clock_keeps_its_first_estimate(tmp_path, monkeypatch,
                                                                  caplog):
    """max_time: the horizon is estimated at the first validation after the warmup and
    stored; at a steady speed the checks at later validations leave it (an hour's budget
    at 1 s an update, ended here by max_epochs)."""
    FakeClock(monkeypatch, lambda clock: 1.0)
    path = budget_recipe(tmp_path, max_time="1h", max_epochs=1, schedule="linear")
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    with caplog.at_level("INFO", logger="mtkit"):
        progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.step > 8 and progress.horizon == 3600  # checked at 8 at least
    assert progress.revisions == [(4, 3600)] and progress.checked_step >= 8
    assert caplog.text.count("linear schedule:") == 1
    assert "valid step 4 |" in caplog.text.split("linear schedule:")[0]  # after validation 1
    saved = load_checkpoint(RunPaths(run).last).train_state.progress
    assert saved.horizon == progress.horizon and saved.revisions == progress.revisions
    rates = [r["lr"] for r in metrics_records(run, "train")]
    assert rates[2:4] == [0.003] * 2 and rates[4] < 0.003  # the peak until the estimate


def slowing(clock: float) -> float:
    """1 s an update for 12 s, then 2 s: a 30 s budget first fits 30 updates, then 20."""
    return 1.0 if clock < 12 else 2.0


def test_a_time_budget_revises_its_horizon_when_the_machine_slows(tmp_path, monkeypatch,
                                                                  caplog):
    """wsd over half the horizon: estimated 30 at update 4 (decay from 15); the machine
    slows after update 12, the check at 16 sees it and brings the horizon to 20, going on
    from the rate update 16 ran at; the last update runs at min_lr within the budget."""
    FakeClock(monkeypatch, slowing)
    recipe = load_recipe(budget_recipe(tmp_path, max_time=30))
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    with caplog.at_level("INFO", logger="mtkit"):
        progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.revisions == [(4, 30), (16, 20)]
    assert progress.step == progress.horizon == 20 and progress.elapsed == 28.0
    assert "end of the wsd schedule (20 updates)" in progress.finished
    assert "wsd schedule: horizon 30 -> 20 updates at step 16, at 2.00s an update" in caplog.text
    rates = [r["lr"] for r in metrics_records(run, "train")]
    assert len(rates) == 20 and rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:]))  # never rises after the peak
    assert progress.decay_from_step == 16 and progress.decay_from_lr == rates[15]
    step = (rates[15] - 1e-4) / 4  # from update 16's rate to min_lr at update 20
    assert rates[16:] == pytest.approx([rates[15] - step * k for k in (1, 2, 3, 4)])
    saved = load_checkpoint(RunPaths(run).last).train_state.progress
    assert (saved.revisions, saved.decay_from_lr) == (progress.revisions, rates[15])


def test_a_run_resumed_after_a_revision_follows_the_recorded_schedule(tmp_path,
                                                                      monkeypatch):
    """Stopped by SIGTERM at update 17, after the revision at 16, and resumed: the same
    rates and weights as in one go."""
    recipe = load_recipe(budget_recipe(tmp_path, max_time=30))
    whole, run = tmp_path / "whole", tmp_path / "split"
    with monkeypatch.context() as patched:
        FakeClock(patched, slowing)
        tokenizer, fingerprints = prepare(recipe, whole)
        train(recipe, whole, tokenizer, whole / "data", fingerprints, "cpu")
    with monkeypatch.context() as patched:
        FakeClock(patched, slowing, interrupt_at=17)
        tokenizer, fingerprints = prepare(recipe, run)
        with pytest.raises(Interrupted):
            train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    saved = load_checkpoint(RunPaths(run).last).train_state.progress
    assert saved.step == 17 and saved.revisions == [(4, 30), (16, 20)]
    torch.manual_seed(1234)  # the resumed run must not depend on the process's RNG state
    with monkeypatch.context() as patched:
        FakeClock(patched, slowing)
        progress = train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    assert progress.step == 20 and progress.revisions == [(4, 30), (16, 20)]
    rates = {name: [r["lr"] for r in metrics_records(directory, "train")]
             for name, directory in (("whole", whole), ("split", run))}
    assert rates["split"] == rates["whole"]
    a, b = weights(RunPaths(whole).last), weights(RunPaths(run).last)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_the_weight_average_resumes_bit_identically_and_is_validated(tmp_path):
    """train.ema: the average is part of the training state (a resumed run's equals an
    uninterrupted one's), validated beside the weights, saved as checkpoint_ema.pt."""
    path = bible_recipe(tmp_path, train={"max_steps": 12, "ema": 0.9, "valid_every": 6,
                                         "save_every": 6}, model={"dropout": 0.3})
    whole = load_recipe(path)
    tokenizer, fingerprints = prepare(whole, tmp_path / "whole")
    train(whole, tmp_path / "whole", tokenizer, tmp_path / "whole" / "data", fingerprints, "cpu")
    run = tmp_path / "split"
    tokenizer, fingerprints = prepare(whole, run)
    train(load_recipe(path, ["train.max_steps=6"]), run, tokenizer, run / "data", fingerprints,
          "cpu")
    train(whole, run, tokenizer, run / "data", fingerprints, "cpu")
    for name in ("checkpoint_ema.pt", "checkpoint_last.pt"):
        a = weights(tmp_path / "whole" / "checkpoints" / name)
        b = weights(run / "checkpoints" / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    averaged, last = (weights(run / "checkpoints" / n) for n in ("checkpoint_ema.pt",
                                                                 "checkpoint_last.pt"))
    assert not all(torch.equal(averaged[k], last[k]) for k in last)
    records = metrics_records(run, "valid")
    assert [r["step"] for r in records] == [6, 12]
    assert all(r["ema_loss"] > 0 and "ema_bleu" in r for r in records)


def test_the_decoder_follows_the_optimizer_between_validations(tmp_path):
    """Fused AdamW writes the weights without bumping their version counters; decode_step,
    whose weights validation gathered at step 4, must still see step 8's."""
    path = bible_recipe(tmp_path, train={"max_steps": 8, "valid_every": 4, "save_every": 4})
    recipe = load_recipe(path)
    run = tmp_path / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    trainer = Trainer(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    trainer.fit()
    model = trainer.model.eval()
    src = torch.tensor([[5, 6, 7, 3]])  # three tokens and EOS
    with torch.inference_mode():
        memory, mask = model.encode(src)
        step = model.decode_step(torch.tensor([2]), model.init_cache(memory, mask, 1))
        whole = model.decode(torch.tensor([[2]]), memory, mask)[:, -1]  # BOS only
    torch.testing.assert_close(step, whole.float())
