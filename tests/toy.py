"""Small real inputs for tests: the reverse toy task and tiny recipes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
import yaml

from mtkit.config import Recipe
from mtkit.pipeline import PipelineRun, binarize_stage, tokenizer_stage
from mtkit.run import RunPaths
from mtkit.tokenizer import Tokenizer

DATA = Path(__file__).parent / "data"
LETTERS = "abcdefghij"


def reverse_task(directory: Path, n_train: int = 3000, n_test: int = 100, seed: int = 0) -> dict:
    """Write source/target files where the target is the source reversed."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)

    def write(split: str, n: int) -> tuple[Path, Path]:
        rows = [[rng.choice(LETTERS) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
        src.write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
        tgt.write_text("".join(" ".join(reversed(r)) + "\n" for r in rows), encoding="utf-8")
        return src, tgt

    return {
        "train": write("train", n_train),
        "valid": write("valid", 50),
        "test": write("test", n_test),
    }


def reverse_recipe(files: dict, max_steps: int = 350) -> dict[str, Any]:
    """A raw recipe (for recipe_from_dict) that learns the reverse task in seconds."""
    return {
        "data": {"train": dict(zip(("src", "tgt"), map(str, files["train"]))),
                 "valid": dict(zip(("src", "tgt"), map(str, files["valid"])))},
        "tokenizer": {"vocab_size": 24, "model_type": "bpe"},
        "model": tiny_model(dropout=0.0),
        "train": {"max_tokens": 2048, "lr": 0.004, "warmup_steps": 50, "max_steps": max_steps,
                  "valid_every": 1000, "save_every": 1000, "log_every": 100,
                  "label_smoothing": 0.0, "average": "none", "valid_bleu_lines": 0},
    }


def tiny_model(**changes: Any) -> dict[str, Any]:
    model = {
        "enc_layers": 2,
        "dec_layers": 2,
        "d_model": 64,
        "heads": 4,
        "ffn_dim": 128,
        "dropout": 0.1,
        "max_positions": 64,
    }
    model.update(changes)
    return model


def bible_recipe(
    directory: Path, train: dict | None = None, model: dict | None = None, **sections: Any
) -> Path:
    """A tiny recipe on the Bible sample in tests/data, written to directory/tiny.yaml."""
    raw = {
        "data": {
            "langs": {"src": "es", "tgt": "en"},
            "train": {"src": str(DATA / "train.es"), "tgt": str(DATA / "train.en")},
            "valid": {"src": str(DATA / "dev.es"), "tgt": str(DATA / "dev.en")},
            "test": [{"src": str(DATA / "test.es"), "tgt": str(DATA / "test.en")}],
        },
        "tokenizer": {"vocab_size": 300},
        "model": tiny_model(**(model or {})),
        "train": {
            "max_tokens": 1024,
            "lr": 0.003,
            "warmup_steps": 10,
            "max_steps": 20,
            "valid_every": 10,
            "save_every": 10,
            "log_every": 5,
            "keep_last": 3,
            "valid_bleu_lines": 20,
            "average": "last-2",
            **(train or {}),
        },
        "decode": {"beam": 2, "max_len_a": 1.0, "max_len_b": 5},
    }
    raw.update(sections)
    path = directory / "tiny.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def prepare(recipe: Recipe, run_dir: Path) -> tuple[Tokenizer, dict[str, str]]:
    """Run the tokenizer and binarize stages into run_dir: the tokenizer and the training
    data fingerprints that `train.train` takes."""
    run = PipelineRun(recipe, RunPaths(run_dir), torch.device("cpu"))
    tokenizer_stage(run)
    binarize_stage(run)
    return run.tokenizer, run.manifest.training_fingerprints()
