"""`mtkit translate`'s job without the CLI (decode/job.py): a file translated whole, or in
shares that join to the whole byte for byte, and the one-line errors for input that
cannot be shared or read. (The command, torchrun's ranks included: tests/system.)"""

from __future__ import annotations

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
