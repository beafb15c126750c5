"""Checkpoint bundles: atomic writes, safe loading, averaging."""

from __future__ import annotations

import io
import os
import pickle

import pytest
import torch
from builders import raw_recipe

from mtkit.config import recipe_from_dict
from mtkit.errors import CheckpointError, OutputError
from mtkit.files.atomic import atomic_write
from mtkit.model.checkpoint import (
    FORMAT_VERSION,
    Bundle,
    Progress,
    TrainState,
    average_checkpoints,
    load_checkpoint,
    save_checkpoint,
)


def bundle(weight: float, model=None, spm=b"spm") -> Bundle:
    raw = raw_recipe("/data/train.es", "/data/train.en", model=model or {"d_model": 4, "heads": 2})
    state = {"w": torch.full((2, 2), weight), "steps": torch.tensor(7)}
    return Bundle(state, recipe_from_dict(raw), spm, None, {"train": "abc"})


def test_save_and_load_roundtrip(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, bundle(1.0))
    loaded = load_checkpoint(path)
    assert torch.equal(loaded.weights["w"], torch.ones(2, 2))
    assert loaded.spm_src == b"spm" and loaded.recipe == bundle(1.0).recipe
    assert torch.load(path, weights_only=True)["format_version"] == FORMAT_VERSION
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"], "no temporary file left behind"


def test_crash_during_write_leaves_old_file_intact(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, bundle(1.0))
    before = path.read_bytes()

    def crash(file):
        file.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="No space left on device.*previous file"):
        atomic_write(path, crash)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_read_only_directory(tmp_path, monkeypatch):
    """As a read-only directory refuses the temporary file (simulated: tests may run as root)."""
    path = tmp_path / "c.pt"
    save_checkpoint(path, bundle(1.0))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    with pytest.raises(OutputError, match="cannot write \\(Permission denied\\)"):
        save_checkpoint(path, bundle(2.0))
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path).weights["w"], torch.ones(2, 2))


def test_load_errors(tmp_path):
    with pytest.raises(CheckpointError, match="model file not found"):
        load_checkpoint(tmp_path / "missing.pt")

    good = tmp_path / "good.pt"
    save_checkpoint(good, bundle(1.0))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(truncated)

    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.ones(1)}}, foreign)
    with pytest.raises(CheckpointError, match="not an mtkit checkpoint"):
        load_checkpoint(foreign)

    text = tmp_path / "text.pt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="not"):
        load_checkpoint(text)

    future = tmp_path / "future.pt"
    data = bundle(1.0).to_dict()
    data["format_version"] = FORMAT_VERSION + 1
    torch.save(data, future)
    with pytest.raises(CheckpointError, match="newer mtkit.*upgrade"):
        load_checkpoint(future)


class Payload:
    """A pickled callable: loading it must never run code."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_pickled_callable_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    data = bundle(1.0).to_dict()
    data["payload"] = Payload()
    buffer = io.BytesIO()
    torch.save(data, buffer, pickle_module=pickle)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(path)


def test_average_is_elementwise_mean(tmp_path):
    paths = []
    for i, weight in enumerate([1.0, 2.0, 6.0]):
        paths.append(tmp_path / f"c{i}.pt")
        data = bundle(weight)
        data.train_state = TrainState({}, Progress(step=i), {})
        save_checkpoint(paths[-1], data)
    averaged = average_checkpoints(paths)
    assert torch.allclose(averaged.weights["w"], torch.full((2, 2), 3.0))
    assert averaged.weights["w"].dtype == torch.float32
    assert torch.equal(averaged.weights["steps"], torch.tensor(7))
    assert averaged.train_state is None and averaged.spm_src == b"spm"
    assert averaged.averaged_from == [str(p) for p in paths]


def test_average_refuses_incompatible(tmp_path):
    a, b, c = tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "c.pt"
    save_checkpoint(a, bundle(1.0))
    save_checkpoint(b, bundle(1.0, model={"d_model": 8, "heads": 2}))
    save_checkpoint(c, bundle(1.0, spm=b"other"))
    with pytest.raises(CheckpointError, match="different model architecture"):
        average_checkpoints([a, b])
    with pytest.raises(CheckpointError, match="different vocabulary"):
        average_checkpoints([a, c])


def test_train_state_round_trips(tmp_path):
    """What resume reads back is what was saved: progress fields, RNG and optimizer."""
    path = tmp_path / "c.pt"
    data = bundle(1.0)
    progress = Progress(step=12, epoch=2, elapsed=3.5, best_score=7.25, best_step=10,
                        validations_without_improvement=1, top=[(7.25, 10), (6.0, 5)],
                        sampler={"epoch": 2, "position": 3})
    data.train_state = TrainState({"state": {}, "param_groups": []}, progress,
                                  {"torch": torch.get_rng_state()})
    save_checkpoint(path, data)
    loaded = load_checkpoint(path)
    assert loaded.train_state.progress == progress
    assert torch.equal(loaded.train_state.rng["torch"], torch.get_rng_state())
    assert loaded.without_train_state().train_state is None


def test_older_checkpoints_still_load(tmp_path):
    """A bundle written before train.average existed (train.average_last) and before
    Progress had its newer fields."""
    raw = bundle(1.0).to_dict()
    raw["recipe"]["train"] = {"average_last": 3}
    raw["train_state"] = {"optimizer": {}, "progress": {"step": 5, "epoch": 1}, "rng": {}}
    path = tmp_path / "old.pt"
    torch.save(raw, path)
    loaded = load_checkpoint(path)
    assert str(loaded.recipe.train.average) == "last-3"
    assert loaded.train_state.progress == Progress(step=5)


def test_incomplete_bundle_is_one_error(tmp_path):
    raw = bundle(1.0).to_dict()
    del raw["spm_src"]
    torch.save(raw, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="incomplete mtkit checkpoint"):
        load_checkpoint(tmp_path / "c.pt")


def test_average_keeps_tied_weights_tied(tmp_path):
    """A tensor stored under several keys (tied embeddings) is averaged once and saved once."""
    paths = []
    for i, value in enumerate([1.0, 3.0]):
        data = bundle(value)
        table = torch.full((1000, 100), value)  # 400 kB: a copy per key would show
        data.weights.update({"embed": table, "out": table})  # one tensor, two keys
        paths.append(tmp_path / f"c{i}.pt")
        save_checkpoint(paths[-1], data)
    averaged = average_checkpoints(paths)
    assert averaged.weights["embed"] is averaged.weights["out"]
    assert torch.equal(averaged.weights["embed"], torch.full((1000, 100), 2.0))
    save_checkpoint(tmp_path / "avg.pt", averaged)
    size, single = (tmp_path / "avg.pt").stat().st_size, paths[0].stat().st_size
    assert abs(size - single) < 2000, (size, single)  # not one copy per key
