"""What `mtkit spm-train`, `mtkit binarize` and a recipe's data stages do with inputs that
are not plain text files, and with an output they cannot write: one line naming the path
and what to do, exit 2, and nothing already written lost."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
from builders import DATA, bible_recipe
from conftest import CliResult, start_mtkit


def binarize_args(spm_model: Path, src: Path | str, tgt: Path = DATA / "train.en") -> list:
    return ["binarize", "--tokenizer", spm_model, "--src", src, "--tgt", tgt, "-o", "bin",
            "--workers", "1"]


def test_binarize_refuses_a_named_pipe_rather_than_waiting_forever(tmp_path, spm_model,
                                                                    mtkit_cli, expect_error):
    """binarize reads each file three times (count, fingerprint, encode): the second read
    of a pipe waited for a writer that never came."""
    os.mkfifo(tmp_path / "fifo")
    done = mtkit_cli(binarize_args(spm_model, "fifo"), cwd=tmp_path, timeout=60)
    expect_error(done, "fifo: is not a regular file", "save it to a file")
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.mkdir(), "is a directory, expected a text file"),
    (os.mkfifo, "is not a regular file"),
])
def test_spm_train_says_what_an_input_is_instead_of_not_found(tmp_path, mtkit_inprocess,
                                                              expect_error, make, needle):
    make(tmp_path / "odd")
    done = mtkit_inprocess(["spm-train", "-i", "odd", "--model-prefix", "spm"], tmp_path)
    expect_error(done, f"odd: {needle}")
    assert not (tmp_path / "spm.model").exists()


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.mkdir(), "is a directory, expected a text file"),
    (os.mkfifo, "is not a regular file"),
])
def test_a_recipe_data_file_that_is_no_file_is_named_for_what_it_is(tmp_path, mtkit_inprocess,
                                                                    expect_error, make,
                                                                    needle):
    bible_recipe(tmp_path)
    make(tmp_path / "odd")
    done = mtkit_inprocess(["train", "tiny.yaml", "--dry-run", "--set", "data.valid.src=odd"],
                           tmp_path)
    expect_error(done, "data.valid.src", f"odd: {needle}")


def test_binarize_on_a_full_disk_names_the_output_and_keeps_the_old_data(tmp_path, spm_model,
                                                                         expect_error):
    """A write that fails (here: the file size limit, as `ulimit -f` sets it; a full disk
    fails the same way) is one line naming the output directory; the data there before
    stays whole and no half-built directory is left."""
    first = run_limited(binarize_args(spm_model, DATA / "dev.es", DATA / "dev.en"), tmp_path)
    assert first.returncode == 0, first.stderr
    before = (tmp_path / "bin" / "manifest.json").read_bytes()
    done = run_limited(binarize_args(spm_model, DATA / "train.es"), tmp_path)
    expect_error(done, "bin: cannot write the binarised data (File too large)",
                 "the previous data, if any, is intact")
    assert (tmp_path / "bin" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def run_limited(args: list, cwd: Path, max_bytes: int = 16_000) -> CliResult:
    """`mtkit ARGS` where no file may grow beyond `max_bytes`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    process = start_mtkit(args, cwd, preexec_fn=limit, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    return CliResult(process.returncode, out.decode(), err.decode(), out)
