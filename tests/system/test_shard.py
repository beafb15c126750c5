"""Sharded translation: `torchrun ... -m mtkit translate --input F` (each rank a share,
rank 0 writes all in input order) and `--shard I/N` (one share per job) give the output
one process gives, byte for byte: hostile lines, empty lines and n-best rows included."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CLI_ENV, CliResult
from test_translate import HOSTILE

# the hostile lines twice over, so that every share holds some of each kind, and no
# '\n' after the last line (it still counts as a line)
TEXT = b"\n".join(HOSTILE * 2) + "\n\nUna línea sin fin de línea.".encode()
SETTINGS = ["--beam", "2", "--nbest", "2", "--scores"]


@pytest.fixture(scope="module")
def model(tiny_run) -> Path:
    return tiny_run.model


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shard") / "big.es"
    path.write_bytes(TEXT)
    return path


@pytest.fixture(scope="module")
def single(model, corpus, mtkit_cli) -> CliResult:
    """The reference: one process."""
    done = mtkit_cli(["translate", "-m", model, *SETTINGS, "--input", corpus], cwd=corpus.parent)
    assert done.returncode == 0, done.stderr
    return done


def test_torchrun_ranks_share_the_file_and_rank_0_writes_it_in_order(model, corpus, single,
                                                                        tmp_path):
    out = tmp_path / "out.txt"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "mtkit", "translate", "-m", str(model), *SETTINGS,
               "--input", str(corpus), "--output", str(out)]
    done = subprocess.run(command, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == single.stdout_bytes
    lines = TEXT.count(b"\n") + 1
    assert re.findall(r"^translated \d+ sentences", done.stderr, re.M) == [
        f"translated {lines} sentences"], done.stderr  # one summary, of the whole job
    assert "4 lines had invalid UTF-8 (replaced)" in done.stderr  # the summary counts both
    # the over-long line's warning names its line in the whole file, from either rank
    assert re.search(r"input line 5: \d+ tokens, truncated", done.stderr)
    assert re.search(r"\[rank 1\] .*input line 19: \d+ tokens, truncated", done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # nothing left over


@pytest.mark.parametrize("shards", [3, 40])  # 40: more shares than lines, some empty
def test_shards_of_an_array_join_to_the_single_output(model, corpus, single, mtkit_cli,
                                                      tmp_path, shards):
    parts = []
    for index in range(shards) if shards < 10 else (0, 1, 38, 39):
        part = tmp_path / f"out.{index}"
        done = mtkit_cli(["translate", "-m", model, *SETTINGS, "--input", corpus,
                          "--shard", f"{index}/{shards}", "--output", part], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        parts.append(part.read_bytes())
    if shards < 10:
        assert b"".join(parts) == single.stdout_bytes
    else:  # 30 lines in 40 shares: a share holds one line or none, in order
        rows = single.stdout_bytes.split(b"\n")
        assert parts[0] == b"" and parts[-1] == b"\n".join(r for r in rows if r.startswith(
            b"29\t")) + b"\n"


def test_shard_errors(model, corpus, mtkit_cli, expect_error, tmp_path):
    translate = ["translate", "-m", model, "--input", corpus]
    for bad in ("3/3", "1", "a/b", "-1/2", "1/0"):
        expect_error(mtkit_cli([*translate, "--shard", bad], cwd=tmp_path),
                     f"--shard {bad}: expected I/N with 0 <= I < N")
    done = mtkit_cli(["translate", "-m", model, "--shard", "0/2"], cwd=tmp_path, input=b"hola\n")
    expect_error(done, "--shard: needs --input FILE")
