"""mtkit.launch: `mtkit train`'s job, checked before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import raw_recipe

from mtkit.config import recipe_from_dict
from mtkit.errors import ConfigError
from mtkit.launch import TrainJob, run_train_job


def test_an_unknown_stage_ends_the_job_before_anything_runs(tmp_path: Path) -> None:
    recipe = recipe_from_dict(raw_recipe(tmp_path / "a", tmp_path / "b"))
    with pytest.raises(ConfigError, match="--until tokeniser: expected one of tokenizer"):
        run_train_job(TrainJob(recipe, tmp_path / "run", until="tokeniser"))
    assert not (tmp_path / "run").exists()


def test_a_world_size_that_does_not_divide_the_batch_ends_before_any_process(
        tmp_path: Path) -> None:
    raw = raw_recipe(tmp_path / "a", tmp_path / "b",
                     train={"max_tokens": 500, "tokens_per_update": 700})
    recipe = recipe_from_dict(raw)
    with pytest.raises(ConfigError, match="tokens_per_update"):
        run_train_job(TrainJob(recipe, tmp_path / "run", nproc=2, device="cpu"))
