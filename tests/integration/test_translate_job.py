"""`mtkit translate`'s job without the CLI (decode/job.py): a file translated whole, or in
shares that join to the whole byte for byte, and the one-line errors for input that
cannot be shared or read. (The command, torchrun's ranks included: tests/system.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from builders import DATA

from mtkit.decode.choices import DecodeChoices
from mtkit.decode.job import TranslateJob, translate_job
from mtkit.decode.shard import Shard
from mtkit.errors import ConfigError

RUN_V1 = DATA / "run-v1"
MODEL = RUN_V1 / "runs" / "old" / "model.pt"
SOURCE = RUN_V1 / "data" / "test.src"


def job(tmp_path: Path, name: str, **changes) -> TranslateJob:
    return TranslateJob(models=(MODEL,), input_file=SOURCE, output_file=tmp_path / name,
                        device="cpu", threads=1, quiet=True, **changes)


def test_a_whole_file_is_translated_into_the_output_file(tmp_path):
    stats = translate_job(job(tmp_path, "all.hyp"))
    # what `mtkit translate -m model.pt --quiet < test.src` printed (run-v1/README.md)
    assert (tmp_path / "all.hyp").read_bytes() == (RUN_V1 / "expected.model.hyp").read_bytes()
    assert stats is not None
    assert stats.sentences == len(SOURCE.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("count", [2, 3])
def test_shares_join_to_the_whole(tmp_path, count):
    whole = tmp_path / "all.hyp"
    translate_job(job(tmp_path, whole.name, decode=DecodeChoices(beam=2, nbest=2), scores=True))
    parts = []
    for index in range(count):
        name = f"part.{index}"
        translate_job(job(tmp_path, name, decode=DecodeChoices(beam=2, nbest=2), scores=True,
                          shard=Shard(index, count)))
        parts.append((tmp_path / name).read_bytes())
    assert b"".join(parts) == whole.read_bytes()


def test_a_shard_needs_an_input_file(tmp_path):
    with pytest.raises(ConfigError, match="--shard: needs --input FILE"):
        translate_job(TranslateJob(models=(MODEL,), shard=Shard(0, 2), device="cpu"))


def test_an_input_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, expected a text file"):
        translate_job(TranslateJob(models=(MODEL,), input_file=tmp_path, device="cpu"))


SAMPLING = DecodeChoices(sampling="topk:5", temperature=1.5, seed=11, nbest=2)


def test_samples_repeat_whatever_the_batches_and_shares(tmp_path):
    """A line's samples come from streams keyed by the seed and its line number: batches
    of any size, and shares joined, give the whole file's samples byte for byte."""
    whole = tmp_path / "all.hyp"
    translate_job(job(tmp_path, whole.name, decode=SAMPLING, scores=True))
    translate_job(job(tmp_path, "small", decode=SAMPLING, scores=True, max_tokens=16))
    assert (tmp_path / "small").read_bytes() == whole.read_bytes()
    parts = []
    for index in range(3):
        translate_job(job(tmp_path, f"part.{index}", decode=SAMPLING, scores=True,
                          shard=Shard(index, 3)))
        parts.append((tmp_path / f"part.{index}").read_bytes())
    assert b"".join(parts) == whole.read_bytes()
    other = dataclasses.replace(SAMPLING, seed=12)
    translate_job(job(tmp_path, "other", decode=other, scores=True))
    assert (tmp_path / "other").read_bytes() != whole.read_bytes()
    rows = whole.read_text(encoding="utf-8").splitlines()
    assert [int(row.split("\t")[0]) for row in rows] == [i // 2 for i in range(len(rows))]


def test_top_k_one_translates_as_greedy_search(tmp_path):
    translate_job(job(tmp_path, "greedy", decode=DecodeChoices(beam=1)))
    translate_job(job(tmp_path, "top1", decode=DecodeChoices(sampling="topk:1", seed=3)))
    assert (tmp_path / "top1").read_bytes() == (tmp_path / "greedy").read_bytes()


def test_translations_start_with_their_prefixes(tmp_path):
    count = len(SOURCE.read_text(encoding="utf-8").splitlines())
    prefixes = ["a b", "", "j", "c c c"] * (count // 4) + ["h"] * (count % 4)
    (tmp_path / "prefix.txt").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    for decode in (DecodeChoices(beam=1), DecodeChoices(beam=3), SAMPLING):
        translate_job(job(tmp_path, "out", decode=decode, prefix_file=tmp_path / "prefix.txt"))
        rows = (tmp_path / "out").read_text(encoding="utf-8").splitlines()
        texts = [row.split("\t")[-1] for row in rows][:: decode.nbest or 1]
        assert len(texts) == count
        assert all(text.startswith(prefix) for text, prefix in zip(texts, prefixes)), texts


def test_a_prefix_file_of_another_length_is_refused_before_the_model_loads(tmp_path):
    (tmp_path / "prefix.txt").write_text("a\nb\n", encoding="utf-8")
    count = len(SOURCE.read_text(encoding="utf-8").splitlines())
    missing = TranslateJob(models=(tmp_path / "no-model.pt",), input_file=SOURCE,
                           prefix_file=tmp_path / "prefix.txt")
    with pytest.raises(ConfigError, match=rf"--prefix .*prefix.txt has 2 lines, .*test.src "
                                          rf"{count}: give one prefix per input line"):
        translate_job(missing)
    with pytest.raises(ConfigError, match="--prefix .*nope.txt: cannot read"):
        translate_job(dataclasses.replace(missing, prefix_file=tmp_path / "nope.txt"))
