"""Shared test fixtures: the small real corpus under tests/data and a tokenizer trained on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtkit.tokenizer import Tokenizer, train_sentencepiece

DATA = Path(__file__).parent / "data"
TINY_VOCAB = 300  # small enough to train in a fraction of a second


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """300 train, 60 dev and 60 test lines of the Bible es-en corpus (see data/README.md)."""
    return DATA


@pytest.fixture(scope="session")
def splits(data_dir: Path) -> dict[str, tuple[Path, Path]]:
    return {
        name: (data_dir / f"{name}.es", data_dir / f"{name}.en")
        for name in ("train", "dev", "test")
    }


@pytest.fixture(scope="session")
def spm_model(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A joint SentencePiece model trained once per session on the tiny train split."""
    out = tmp_path_factory.mktemp("spm")
    inputs = [data_dir / "train.es", data_dir / "train.en"]
    return train_sentencepiece(inputs, out / "spm", vocab_size=TINY_VOCAB)


@pytest.fixture(scope="session")
def tokenizer(spm_model: Path) -> Tokenizer:
    return Tokenizer.from_files(spm_model)
