"""Fixtures shared by the three test tiers: the small real corpus under tests/data, a
tokenizer trained on it, the `mtkit` command (in a subprocess or in process), the tiny run
trained once per session, and the reverse-task model.

The tiers: tests/unit (pure: no subprocess, no worker processes, no trained run; seconds),
tests/integration (modules together in process, tiny models trained), tests/system (the
`mtkit` command as a user runs it). Each test is marked with its tier (`pytest -m unit`).
Builders of inputs live in tests/builders.py; pyproject puts tests/ on sys.path for both.
"""

from __future__ import annotations

import logging
import multiprocessing.process
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import DATA, bible_recipe, prepare, reverse_recipe, reverse_task

from mtkit.data.tokenizer import Tokenizer, train_sentencepiece

TINY_VOCAB = 300  # small enough to train in a fraction of a second
TIERS = ("unit", "integration", "system")


# --------------------------------------------------------------------------- tiers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier, the folder under tests/ it lives in."""
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(tier)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_processes(request: pytest.FixtureRequest,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier is pure: a subprocess or a worker process there is a test in the
    wrong tier."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a unit test started a process: move it to tests/integration "
                             "(worker processes) or tests/system (the mtkit command)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


@pytest.fixture(autouse=True)
def _auto_precision_is_fp32_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.precision auto trains in bf16 where a matmul probe finds bf16 fast (AMX
    CPUs): in process its answer is fp32, so that the same tests compute the same on every
    machine. Tests of bf16 ask for it (or force the probe); the `mtkit` command in a
    subprocess probes for real."""
    from mtkit.runtime import devices

    monkeypatch.setattr(devices, "bf16_matmul_speedup", lambda device: 1.0)


# --------------------------------------------------------------------------- data, tokenizer


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
    args: list, cwd: Path, input: bytes | str | None = None, timeout: float = 300
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


def start_mtkit(args: list, cwd: Path, **popen: object) -> subprocess.Popen:
    """Start `mtkit ARGS` in `cwd` without waiting (stdin: nothing and env CLI_ENV, unless
    `popen` says), for tests that signal, kill or talk to it."""
    popen = {"stdin": subprocess.DEVNULL, "env": CLI_ENV, **popen}
    return subprocess.Popen([str(MTKIT), *map(str, args)], cwd=cwd, **popen)


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
    root = tmp_path_factory.mktemp("tiny_run")
    recipe = bible_recipe(root)
    first = run_mtkit(["train", recipe.name], cwd=root)
    assert first.returncode == 0, f"mtkit train failed:\n{first.stderr}"
    return TinyRun(root, recipe, root / "runs" / "tiny", first)


# --------------------------------------------------------------------------- reverse-task model


@pytest.fixture(scope="session")
def reverse_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(checkpoint_last.pt, test source file) of a tiny model trained in process on the
    reverse task: it ends its outputs with EOS. A second or so."""
    from mtkit.config import recipe_from_dict
    from mtkit.train.run import RunPaths
    from mtkit.train.trainer import train

    root = tmp_path_factory.mktemp("reverse")
    files = reverse_task(root / "data")
    recipe = recipe_from_dict(reverse_recipe(files, max_steps=250), name="reverse")
    run = root / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    return RunPaths(run).last, files["test"][0]
