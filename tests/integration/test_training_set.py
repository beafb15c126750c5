"""Several weighted corpora, tags and subword sampling, on real binarised files: what an
epoch holds is a pure function of (seed, epoch), weights set the counts, tags start the
source lines, and sampled segmentations spell the same text."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from builders import DATA, raw_recipe

from mtkit.config import recipe_from_dict
from mtkit.data.batching import BatchSampler
from mtkit.data.binarize import binarize
from mtkit.data.corpora import TrainingSet, training_splits
from mtkit.data.run_tokenizer import train_recipe_tokenizer
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import DataError
from mtkit.pipeline import binarize_recipe
from mtkit.train.run import RunPaths


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Path:
    """The Bible sample cut in two corpora: 200 pairs, and 100 tagged BT."""
    root = tmp_path_factory.mktemp("corpora")
    for lang in ("es", "en"):
        lines = (DATA / f"train.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
        (root / f"a.{lang}").write_text("".join(lines[:200]), encoding="utf-8")
        (root / f"b.{lang}").write_text("".join(lines[200:]), encoding="utf-8")
    return root


def recipe(root: Path, weights=(1.0, 2.5), tag: str | None = "BT", alpha: float = 0.0):
    raw = raw_recipe(tokenizer={"vocab_size": 300, "sample_alpha": alpha},
                     model={"d_model": 16, "heads": 2, "ffn_dim": 16})
    raw["data"]["train"] = [
        {"src": "a.es", "tgt": "a.en", "weight": weights[0]},
        {"src": "b.es", "tgt": "b.en", "weight": weights[1], "tag": tag},
    ]
    return recipe_from_dict(raw, base_dir=root)


@pytest.fixture(scope="module")
def prepared(corpora) -> tuple[Path, Tokenizer]:
    r = recipe(corpora)
    tokenizer = train_recipe_tokenizer(r, corpora / "tok")
    binarize_recipe(r, RunPaths(corpora / "run"), tokenizer, workers=1)
    return corpora / "run" / "data", tokenizer


def test_weights_set_each_corpus_count_a_fresh_sample_each_epoch(corpora, prepared):
    data_dir, tokenizer = prepared
    training = TrainingSet(data_dir, recipe(corpora), tokenizer)
    assert len(training) == 300
    first = training.epoch(1)
    assert first.sampled == [200, 250]  # 200 x 1, 100 x 2.5
    counts = np.bincount(first.items, minlength=300)
    assert (counts[:200] == 1).all()
    assert set(counts[200:].tolist()) == {2, 3} and (counts[200:] == 3).sum() == 50
    second = training.epoch(2).items
    assert not np.array_equal(np.sort(second), np.sort(first.items))  # another half
    again = TrainingSet(data_dir, recipe(corpora), tokenizer).epoch(1).items
    assert np.array_equal(again, first.items)  # (seed, epoch) decides it
    src_lens, tgt_lens = first.lengths([0, 250])
    parts = training.parts
    assert src_lens.tolist() == [parts[0].src_lens[0], parts[1].src_lens[50]]
    assert tgt_lens.tolist() == [parts[0].tgt_lens[0], parts[1].tgt_lens[50]]


def test_one_corpus_batches_as_before(corpora, tmp_path):
    """One corpus of weight 1: every pair once, and the batches of the fixed sampler."""
    raw = raw_recipe(DATA / "train.es", DATA / "train.en", tokenizer={"vocab_size": 300},
                     model={"d_model": 16, "heads": 2, "ffn_dim": 16})
    r = recipe_from_dict(raw)
    tokenizer = train_recipe_tokenizer(r, tmp_path / "tok")
    binarize_recipe(r, RunPaths(tmp_path), tokenizer, workers=1)
    training = TrainingSet(tmp_path / "data", r, tokenizer)
    part = training.parts[0]
    mixed = BatchSampler(training.epoch_items, 500, seed=4)
    fixed = BatchSampler.fixed(part.src_lens, part.tgt_lens, 500, seed=4)
    for sampler in (mixed, fixed):
        sampler.set_epoch(3)
    assert list(mixed) == list(fixed)


def test_a_tag_starts_every_source_line_of_its_corpus(corpora, prepared):
    data_dir, tokenizer = prepared
    assert tokenizer.tags == ("BT",)
    tag_id = tokenizer.tagged("BT").source_tag
    epoch = TrainingSet(data_dir, recipe(corpora), tokenizer).epoch(1)
    assert all(epoch.src(i)[0] == tag_id for i in range(200, 300))
    assert all(tag_id not in epoch.src(i) for i in range(200))
    # a control symbol: the text "<BT>" is spelled out, never the tag
    assert tag_id not in tokenizer.encode_src(["<BT> hola"])[0]
    with pytest.raises(DataError, match=r"tag NT: not a tag of this SentencePiece model "
                                         r"\(its tags: BT\)"):
        tokenizer.tagged("NT")


def test_subword_sampling_spells_the_same_text_differently_each_epoch(corpora, prepared):
    data_dir, tokenizer = prepared
    r = recipe(corpora, alpha=0.3)
    training = TrainingSet(data_dir, r, tokenizer)
    one, two = training.epoch(1), training.epoch(2)
    plain = training.parts[0]
    text = [tokenizer.decode_tgt([plain.tgt(i).tolist()])[0] for i in range(200)]
    assert [tokenizer.decode_tgt([one.tgt(i).tolist()])[0] for i in range(200)] == text
    assert sum(not np.array_equal(one.tgt(i), plain.tgt(i)) for i in range(200)) > 100
    assert sum(not np.array_equal(one.src(i), two.src(i)) for i in range(300)) > 150
    tag_id = tokenizer.tagged("BT").source_tag
    assert all(one.src(i)[0] == tag_id for i in range(200, 300))
    again = TrainingSet(data_dir, r, tokenizer).epoch(2)  # a resumed run: the same ids
    assert all(np.array_equal(again.src(i), two.src(i)) and np.array_equal(again.tgt(i), two.tgt(i))
               for i in range(300))
    assert np.array_equal(again.widths, two.widths)


def test_sampling_refuses_text_changed_since_binarising(corpora, prepared, tmp_path):
    data_dir, tokenizer = prepared
    for name in ("a", "b"):
        for lang in ("es", "en"):
            (tmp_path / f"{name}.{lang}").write_bytes((corpora / f"{name}.{lang}").read_bytes())
    (tmp_path / "b.en").write_text("changed\n" * 100, encoding="utf-8")
    with pytest.raises(DataError, match=r"b\.en: changed since it was binarised"):
        TrainingSet(data_dir, recipe(tmp_path, alpha=0.3), tokenizer)


def test_binarize_encodes_only_a_new_or_changed_corpus(corpora, prepared, tmp_path, capsys):
    _, tokenizer = prepared
    out = tmp_path / "data"
    a, b = (corpora / "a.es", corpora / "a.en"), (corpora / "b.es", corpora / "b.en")
    binarize(tokenizer, {"train-1": a}, out, workers=1, filter_splits=("train-1",))
    first = os.stat(out / "train-1.src.bin").st_ino
    capsys.readouterr()
    binarize(tokenizer, {"train-1": a, "train-2": b}, out, workers=1,
             filter_splits=("train-1", "train-2"), tags={"train-2": "BT"})
    err = capsys.readouterr().err
    assert "binarize train-1 (a.es): unchanged, kept: 200 lines" in err
    assert "binarize train-2 (b.es): 100 lines, 100 pairs kept, tagged <BT>" in err
    assert os.stat(out / "train-1.src.bin").st_ino == first  # the same file, linked
    # the tag is part of what was encoded: untagged, train-2 is encoded again
    binarize(tokenizer, {"train-1": a, "train-2": b}, out, workers=1,
             filter_splits=("train-1", "train-2"))
    assert "binarize train-2 (b.es): 100 lines" in capsys.readouterr().err
    assert [name for name, _ in training_splits(recipe(corpora))] == ["train-1", "train-2"]
