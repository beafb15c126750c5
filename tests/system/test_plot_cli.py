"""`mtkit plot` as a user runs it: the tiny run's curves into a PNG, and the error contract
(exit 2, one `mtkit: error:` line) for a bad metric and a missing run directory. What the
figure holds: tests/integration/test_plot.py."""

from __future__ import annotations

import pytest

from mtkit.report.plot import plot_available

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not plot_available(), reason="matplotlib is not installed")
def test_plot_writes_the_png(tiny_run, tmp_path, mtkit_cli):
    result = mtkit_cli(["plot", tiny_run.run_dir, "-o", "curves.png"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", "logs belong on stderr"
    assert (tmp_path / "curves.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "curves.png" in result.stderr


def test_an_unknown_metric_is_one_error_line(tiny_run, tmp_path, mtkit_cli, expect_error):
    result = mtkit_cli(["plot", tiny_run.run_dir, "-o", "c.png", "--metric", "bleu"],
                       cwd=tmp_path)
    expect_error(result, "--metric bleu", "valid.bleu", "train.loss")
    assert not (tmp_path / "c.png").exists()


def test_a_missing_run_directory_is_one_error_line(tmp_path, mtkit_cli, expect_error):
    result = mtkit_cli(["plot", "runs/nope", "-o", "c.png"], cwd=tmp_path)
    expect_error(result, "runs/nope")


def test_an_output_under_a_file_is_one_error_line(tiny_run, tmp_path, mtkit_cli, expect_error):
    """plot makes -o's missing directories; where a file stands in the way it says so (it
    said `notes.txt: File exists`)."""
    (tmp_path / "notes.txt").write_text("keep me\n")
    result = mtkit_cli(["plot", tiny_run.run_dir, "-o", "notes.txt/c.png"], cwd=tmp_path)
    expect_error(result, "-o notes.txt/c.png", "notes.txt is a file, not a directory")
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
