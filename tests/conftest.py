"""Shared test fixtures: the small real corpus under tests/data and a tokenizer trained on it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
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


# --------------------------------------------------------------------------- the mtkit command
# Helpers for tests/test_cli.py and tests/test_translate.py: run the installed `mtkit`
# script as a user would, and train the tiny Bible model once per session.

MTKIT = Path(sys.executable).with_name("mtkit")  # the console script of this environment
# One torch thread per process: the test machine has two cores shared with other work, and
# torch's default (every core) makes a small model many times slower under contention.
CLI_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("mtkit: error:")]


def run_mtkit(
    args: list[str], cwd: Path, input: bytes | str | None = None, timeout: float = 300
) -> CliResult:
    """Run `mtkit ARGS` in `cwd` (stdin: `input`, or nothing), capturing both streams."""
    if isinstance(input, str):
        input = input.encode("utf-8")
    done = subprocess.run(
        [str(MTKIT), *map(str, args)],
        cwd=cwd,
        input=input if input is not None else b"",
        capture_output=True,
        env=CLI_ENV,
        timeout=timeout,
    )
    return CliResult(
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
        done.stdout,
    )


@pytest.fixture(scope="session")
def mtkit_cli():
    """`mtkit_cli(args, cwd, input=None)` runs the mtkit script in a subprocess."""
    return run_mtkit


@pytest.fixture(scope="session")
def mtkit_script() -> tuple[Path, dict[str, str]]:
    """(path of the mtkit script, its environment) for tests that start it themselves."""
    return MTKIT, CLI_ENV


@pytest.fixture
def mtkit_inprocess(capfd: pytest.CaptureFixture[str]):
    """`mtkit_inprocess(args, cwd)` runs the `mtkit` entry point (mtkit.cli:main) in this
    process, as the console script would, and returns its exit code and output.

    Used for the table of error rows, where a subprocess per row would spend most of its
    time importing torch. An exception escaping main() is reported the way Python would
    report it from the script: a traceback on stderr and exit code 1.
    """
    import mtkit.cli

    logger = logging.getLogger("mtkit")

    def run(args: list[str], cwd: Path) -> CliResult:
        saved = (logger.handlers[:], logger.level, logger.propagate)
        old_cwd, old_argv = os.getcwd(), sys.argv
        capfd.readouterr()
        code: int = 0
        try:
            os.chdir(cwd)
            sys.argv = ["mtkit", *map(str, args)]
            mtkit.cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except Exception:  # noqa: BLE001 - exactly what the script would print and exit with
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = old_argv
            os.chdir(old_cwd)
            logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
            mtkit.cli._debug = False
        out, err = capfd.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def expect_error():
    """`expect_error(result, *needles)`: the CLI error contract of the README, checked."""

    def check(result: CliResult, *needles: str) -> str:
        everything = result.stdout + result.stderr
        assert "Traceback" not in everything, everything
        assert result.returncode == 2, f"exit code {result.returncode}; stderr:\n{result.stderr}"
        errors = result.error_lines()
        assert len(errors) == 1, f"expected one 'mtkit: error:' line, stderr:\n{result.stderr}"
        tail = result.stderr.rstrip("\n").split("\n")[-1]
        assert tail == errors[0], f"the error message is not one line:\n{result.stderr}"
        for needle in needles:
            assert needle in errors[0], f"{needle!r} not in: {errors[0]}"
        assert result.stdout == "", f"stdout should stay empty: {result.stdout!r}"
        return errors[0]

    return check


@dataclass
class TinyRun:
    root: Path  # the working directory the user ran mtkit in
    recipe: Path  # root / tiny.yaml
    run_dir: Path  # root / runs / tiny
    first: CliResult  # the output of the `mtkit train tiny.yaml` that built it

    @property
    def model(self) -> Path:
        return self.run_dir / "model.pt"

    def copy_to(self, directory: Path) -> TinyRun:
        """A private copy (recipe + run directory) for tests that change or refuse a run."""
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.recipe, directory / self.recipe.name)
        shutil.copytree(self.run_dir, directory / "runs" / self.run_dir.name)
        return TinyRun(directory, directory / self.recipe.name,
                       directory / "runs" / self.run_dir.name, self.first)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """`mtkit train tiny.yaml` run once per session: 20 steps on the Bible sample, a few
    seconds. Tests must not modify it (use `tiny_run.copy_to(tmp_path)`)."""
    from toy import bible_recipe

    root = tmp_path_factory.mktemp("tiny_run")
    recipe = bible_recipe(root)
    first = run_mtkit(["train", recipe.name], cwd=root)
    assert first.returncode == 0, f"mtkit train failed:\n{first.stderr}"
    return TinyRun(root, recipe, root / "runs" / "tiny", first)
