"""What `mtkit spm-train`, `mtkit binarize` and a recipe's data stages do with inputs that
are not plain text files, and with an output they cannot write: one line naming the path
and what to do, exit 2, and nothing already written lost."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import resource
import signal
import subprocess
import time
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


@pytest.mark.parametrize("signum, group", [
    (signal.SIGTERM, False),  # kill PID, timeout: the parent alone
    (signal.SIGINT, True),  # Ctrl-C in a terminal: the parent and its workers
])
def test_a_signal_stops_binarize_cleanly(tmp_path, spm_model, signum, group):
    """SIGTERM to the parent ended it at once: its encoding workers, finding it gone,
    printed BrokenPipeError tracebacks, and the half-built directory was left. Ctrl-C
    gave each worker a KeyboardInterrupt traceback when it came mid-chunk."""
    for lang in ("es", "en"):  # enough lines that binarize is still encoding when signalled
        (tmp_path / f"big.{lang}").write_bytes((DATA / f"train.{lang}").read_bytes() * 400)
    args = binarize_args(spm_model, "big.es", "big.en")
    process = start_mtkit([*args[:-1], "2"], tmp_path, stderr=subprocess.PIPE,
                          start_new_session=True)
    while not list(tmp_path.glob("bin.partial-*")) and process.poll() is None:
        time.sleep(0.05)  # the new directory is made once the workers have started
    time.sleep(0.5)  # into the encoding (the outcome is the same at any moment)
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    try:  # without the fix Ctrl-C could hang binarize in the pool's shutdown for good
        err = process.communicate(timeout=120)[1].decode()
    finally:
        process.kill()
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.en", "big.es"]


@pytest.mark.parametrize("suffix, compress, needle", [
    (".xz", lzma.compress, "is xz-compressed"),
    (".bz2", bz2.compress, "is bzip2-compressed"),
    ("", gzip.compress, "is gzip-compressed"),  # .gz is what says gzip: not its bytes
])
def test_a_compressed_file_mtkit_does_not_read_is_named_as_such(tmp_path, spm_model,
                                                                mtkit_inprocess, expect_error,
                                                                suffix, compress, needle):
    """Read as text, a compressed file gave 'train: a.es.xz has 6 lines but ... has 300'
    (binarize) or an invalid UTF-8 byte on line 1 (spm-train)."""
    src = tmp_path / f"a.es{suffix}"
    src.write_bytes(compress((DATA / "train.es").read_bytes()))
    for args in (binarize_args(spm_model, src.name),
                 ["spm-train", "-i", src.name, "--model-prefix", "spm"]):
        done = mtkit_inprocess(args, tmp_path)
        expect_error(done, f"{src.name}: {needle}", "plain text or gzip")


def test_binarize_given_a_tokenizer_directory_says_which_models_it_holds(
        tmp_path, spm_model, mtkit_inprocess, expect_error):
    """A run's tokenizer directory is what tokenizer.model takes; --tokenizer takes the
    model file in it, and said the directory was 'not found'."""
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "spm.model").write_bytes(spm_model.read_bytes())
    args = binarize_args(spm_model, DATA / "train.es")
    args[args.index(spm_model)] = "tok"
    expect_error(mtkit_inprocess(args, tmp_path),
                 "tok: is a directory, expected a SentencePiece model file (it holds spm.model)")
