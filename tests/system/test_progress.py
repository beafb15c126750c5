"""Progress bars: on a terminal's stderr only, never on stdout, never into logs or pipes."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

from builders import DATA
from conftest import start_mtkit


def run_on_a_terminal(args: list, cwd: Path) -> tuple[int, bytes, str]:
    """Run mtkit with stderr on a pseudo-terminal (stdout a pipe): exit code, stdout,
    what the terminal showed."""
    master, slave = pty.openpty()
    process = start_mtkit(args, cwd, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    shown = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown.append(chunk)
    stdout = process.stdout.read()
    process.stdout.close()
    os.close(master)
    return process.wait(), stdout, b"".join(shown).decode("utf-8", errors="replace")


def test_translate_shows_a_bar_for_a_file_on_a_terminal(tiny_run, tmp_path, mtkit_cli):
    source = DATA / "test.es"
    lines = len(source.read_text(encoding="utf-8").splitlines())
    args = ["translate", "-m", tiny_run.model, "--beam", "1", "--input", source]
    code, stdout, shown = run_on_a_terminal(args, tmp_path)
    assert code == 0, shown
    assert f"{lines}/{lines}" in shown and "line/s" in shown  # count, total and rate
    assert stdout.count(b"\n") == lines and b"line/s" not in stdout

    piped = mtkit_cli(args, cwd=tmp_path)  # stderr a pipe: no bar, only the summary
    assert piped.returncode == 0 and "line/s" not in piped.stderr
    assert piped.stdout_bytes == stdout
    quiet_code, _, quiet_shown = run_on_a_terminal([*args, "--quiet"], tmp_path)
    assert quiet_code == 0 and "line/s" not in quiet_shown


def test_train_and_binarize_bars_stay_off_pipes(tiny_run):
    """The tiny run was trained with stderr a pipe: its log has no bar."""
    assert "step/s" not in tiny_run.first.stderr and "line/s" not in tiny_run.first.stderr
    assert "step/s" not in (tiny_run.run_dir / "train.log").read_text(encoding="utf-8")
