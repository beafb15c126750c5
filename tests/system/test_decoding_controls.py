"""`mtkit translate --prefix FILE` and `--sampling/--temperature/--seed` as a user runs
them, with the run-v1 model (tests/data/run-v1: no training needed): samples that repeat
whatever the batches, prefixes that start the output, and one-line errors (exit 2) for
bad values and for a prefix file of another length."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import DATA

MODEL = DATA / "run-v1" / "runs" / "old" / "model.pt"
SOURCE = DATA / "run-v1" / "data" / "test.src"
COUNT = len(SOURCE.read_text(encoding="utf-8").splitlines())


ERRORS = [
    (["--sampling", "topp:0"], ["--sampling topp:0", "0 < P <= 1"]),
    (["--sampling", "topp:1.5"], ["--sampling topp:1.5", "0 < P <= 1"]),
    (["--sampling", "topk:0"], ["--sampling topk:0", "K >= 1"]),
    (["--sampling", "topk:-1"], ["--sampling topk:-1", "K >= 1"]),
    (["--sampling", "beam"], ["--sampling beam", "none, full, topk:K or topp:P"]),
    (["--sampling", "full", "--temperature", "0"], ["--temperature 0", "expected above 0.0"]),
    (["--sampling", "full", "--temperature", "-1"], ["--temperature -1", "out of range"]),
    (["--sampling", "full", "--seed", "-2"], ["--seed -2", "out of range"]),
    (["--prefix", "two.txt"], ["--prefix two.txt has 2 lines", f"test.src {COUNT}"]),
    (["--prefix", "nope.txt"], ["--prefix nope.txt: cannot read"]),
]


@pytest.mark.parametrize("options, needles", ERRORS, ids=[" ".join(o) for o, _ in ERRORS])
def test_bad_sampling_and_prefix_options_are_one_line_errors(options, needles, tmp_path,
                                                             mtkit_inprocess, expect_error):
    (tmp_path / "two.txt").write_text("a\nb\n", encoding="utf-8")
    result = mtkit_inprocess(["translate", "-m", MODEL, "-i", SOURCE, *options], tmp_path)
    expect_error(result, *needles)


def test_samples_repeat_and_prefixes_start_the_output(tmp_path, mtkit_cli):
    """The same seed twice, once in batches of a line or two: the same samples; another
    seed: others. A prefix file: every translation starts with its line's prefix."""
    options = ["translate", "-m", MODEL, "--quiet", "--sampling", "topp:0.9", "--seed", "4",
               "--nbest", "2", "--scores"]
    first = mtkit_cli([*options, "-i", SOURCE], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 2 * COUNT
    small = mtkit_cli([*options, "--max-tokens", "12"], cwd=tmp_path,
                      input=SOURCE.read_bytes())  # stdin, small batches
    assert small.stdout == first.stdout
    other = mtkit_cli([*options[:-4], "5", "-i", SOURCE], cwd=tmp_path)
    assert other.returncode == 0 and other.stdout != first.stdout

    prefixes = [("a b", "", "j j j")[i % 3] for i in range(COUNT)]
    Path(tmp_path / "prefix.txt").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    forced = mtkit_cli(["translate", "-m", MODEL, "--quiet", "--prefix", "prefix.txt"],
                       cwd=tmp_path, input=SOURCE.read_bytes())
    assert forced.returncode == 0, forced.stderr
    lines = forced.stdout.splitlines()
    assert len(lines) == COUNT
    assert all(line.startswith(prefix) for line, prefix in zip(lines, prefixes)), lines
    short = mtkit_cli(["translate", "-m", MODEL, "--quiet", "--prefix", "prefix.txt"],
                      cwd=tmp_path, input=b"a b\n" * (COUNT + 1))  # stdin: one line too many
    assert short.returncode == 2, short.stderr
    assert f"--prefix prefix.txt has {COUNT} lines, stdin more" in short.stderr


def test_invalid_utf8_in_a_prefix_file_is_warned_with_its_lines(tmp_path, mtkit_inprocess):
    """The prefix file is read as the input is: bad bytes replaced and said, naming the
    file, not forced silently as unknown pieces."""
    lines = [b"a \xff b", b""] + [b"a"] * (COUNT - 2)
    (tmp_path / "prefix.txt").write_bytes(b"\n".join(lines) + b"\n")
    result = mtkit_inprocess(["translate", "-m", MODEL, "-i", SOURCE, "--prefix",
                              "prefix.txt"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == COUNT
    assert "--prefix prefix.txt: 1 line had invalid UTF-8 (first: line 1)" in result.stderr


@pytest.mark.parametrize("options", [["--max-len-b", str(10**20)], ["--max-len-a", "1e20"],
                                     ["--max-len-b", str(2**63 - 1)]])
def test_a_huge_length_cap_is_no_cap(options, tmp_path, mtkit_inprocess):
    """A cap beyond int64 is the model's positions, as a cap of a million is: not a
    traceback, nor one-token outputs (the cap overflowed int64 to below 1)."""
    plain = mtkit_inprocess(["translate", "-m", MODEL, "-i", SOURCE, "--quiet", "--beam",
                             "1", "--max-len-a", "0", "--max-len-b", "1000000"], tmp_path)
    huge = mtkit_inprocess(["translate", "-m", MODEL, "-i", SOURCE, "--quiet", "--beam", "1",
                            *options], tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert huge.returncode == 0, huge.stderr
    assert huge.stdout == plain.stdout
