"""Training curves (mtkit.plot): metrics.jsonl read into series, drawn into a PNG of the
promised size, runs told apart by colour and legend, and the errors a user can meet. The
figure is inspected as an object (axes, lines, legend), not as pixels. On the tiny run
(read-only) and a synthetic run written here. `mtkit plot`: tests/system/test_plot_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtkit.errors import ConfigError, DataError
from mtkit.report import plot

# drawing needs the extra mtkit[plot]; reading and the missing-extra error do not
drawing = pytest.mark.skipif(not plot.plot_available(), reason="matplotlib is not installed")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRAIN = [  # (step, elapsed seconds, loss)
    (100, 60.0, 6.0), (200, 120.0, 5.0), (300, 180.0, 4.5), (400, 240.0, 4.0),
]
VALID = [(200, 120.0, 5.5, 3.0), (400, 240.0, 4.8, 7.5)]  # (step, elapsed, loss, bleu)


def write_run(run_dir: Path, bleu: bool = True) -> Path:
    """A run directory whose metrics.jsonl has train and valid records, a skipped update
    and a last line cut by a crash."""
    records = []
    for step, elapsed, loss in TRAIN:
        records.append({"event": "train", "step": step, "epoch": 1, "elapsed": elapsed,
                        "loss": loss, "nll": loss - 0.5, "ppl": 2.718 ** (loss - 0.5),
                        "lr": 1e-3, "grad_norm": 0.5, "tgt_tokens_per_s": 1000.0})
    records.insert(2, {"event": "skipped", "step": 250, "loss": "nan"})
    for step, elapsed, loss, score in VALID:
        record = {"event": "valid", "step": step, "epoch": 1, "elapsed": elapsed,
                  "loss": loss, "nll": loss, "ppl": 2.718 ** loss, "best": True}
        records.append({**record, "bleu": score} if bleu else record)
    text = "".join(json.dumps(r) + "\n" for r in records) + '{"event": "train", "step": 5'
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(text, encoding="utf-8")
    return run_dir


def snapshot(directory: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(directory.rglob("*"))}


# --------------------------------------------------------------------------- reading


def test_read_curves_skips_the_cut_line_and_skipped_updates(tmp_path):
    curves = plot.read_curves(write_run(tmp_path / "base"))
    assert curves.records == len(TRAIN) + len(VALID)
    assert curves.points("train.loss") == [(s, e / 60, loss) for s, e, loss in TRAIN]
    assert curves.points("valid.bleu") == [(s, e / 60, b) for s, e, _, b in VALID]
    assert curves.points("valid.lr") == []


def test_read_curves_of_the_tiny_run(tiny_run):
    curves = plot.read_curves(tiny_run.run_dir)
    steps = [p[0] for p in curves.points("train.loss")]
    assert steps and steps == sorted(steps)
    assert [p[0] for p in curves.points("valid.bleu")] == [10, 20]  # valid_every 10, 20 steps


def test_a_missing_run_or_metrics_file_is_named(tmp_path):
    with pytest.raises(DataError, match="no such run directory") as missing:
        plot.read_curves(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(missing.value)
    (tmp_path / "fresh").mkdir()
    with pytest.raises(DataError, match="no metrics.jsonl"):
        plot.read_curves(tmp_path / "fresh")


# --------------------------------------------------------------------------- drawing


@drawing
def test_plot_runs_writes_a_png_of_the_figure_size(tiny_run, tmp_path):
    from matplotlib import image
    before = snapshot(tiny_run.run_dir)
    out = plot.plot_runs([tiny_run.run_dir], tmp_path / "curves.png")

    assert out == tmp_path / "curves.png"
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    height, width = image.imread(out).shape[:2]
    assert (width, height) == (plot.FIGURE_WIDTH * plot.DPI, 2 * plot.ROW_HEIGHT * plot.DPI)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]  # no temporary left
    assert snapshot(tiny_run.run_dir) == before


@drawing
def test_two_runs_get_one_colour_each_and_a_legend(tiny_run, tmp_path):
    runs = [plot.read_curves(tiny_run.run_dir), plot.read_curves(write_run(tmp_path / "base"))]
    figure = plot.build_figure(runs)

    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["tiny", "base"]
    axes = figure.axes
    assert [ax.get_title() for ax in axes] == [
        "Training loss vs updates", "Training loss vs training time",
        "Dev BLEU vs updates", "Dev BLEU vs training time"]
    assert [ax.get_xlabel() for ax in axes] == ["updates (steps)", "training time (minutes)"] * 2
    for name in ("tiny", "base"):
        colours = {line.get_color() for ax in axes for line in ax.lines
                   if line.get_label() == name}
        assert len(colours) == 1, f"{name} changes colour between panels"
    assert all(len(ax.lines) == 2 for ax in axes)
    assert {line.get_marker() for ax in axes[2:] for line in ax.lines} == {"o"}  # dev points
    minutes = axes[1].lines[1].get_xdata()
    assert list(minutes) == [e / 60 for _, e, _ in TRAIN]


def test_runs_with_the_same_name_are_told_apart_by_their_path(tmp_path):
    dirs = [tmp_path / "a" / "runs" / "tiny", tmp_path / "b" / "runs" / "tiny",
            tmp_path / "other"]
    assert plot.run_names(dirs) == ["a/runs/tiny", "b/runs/tiny", "other"]


@drawing
def test_chosen_metrics_get_a_row_each_and_absent_ones_say_no_data(tmp_path):
    run = write_run(tmp_path / "nobleu", bleu=False)
    figure = plot.build_figure([plot.read_curves(run)], ("train.ppl", "valid.bleu"))

    assert len(figure.axes) == 4
    assert figure.axes[0].get_yscale() == "log"
    for ax in figure.axes[2:]:
        assert not ax.lines
        assert [t.get_text() for t in ax.texts] == ["no data"]
    out = plot.plot_runs([run], tmp_path / "nobleu.png", ("valid.bleu",))
    assert out.read_bytes().startswith(PNG_SIGNATURE)


@drawing
def test_the_output_replaces_an_old_file(tmp_path):
    out = tmp_path / "curves.png"
    out.write_bytes(b"old")
    plot.plot_runs([write_run(tmp_path / "base")], out)
    assert out.read_bytes().startswith(PNG_SIGNATURE)


# --------------------------------------------------------------------------- errors


def test_an_unknown_metric_lists_the_valid_names(tmp_path):
    with pytest.raises(ConfigError) as error:
        plot.plot_runs([write_run(tmp_path / "base")], tmp_path / "c.png", ("valid.blue",))
    message = str(error.value)
    assert "valid.blue" in message and "\n" not in message
    assert all(name in message for name in plot.METRICS)
    assert not (tmp_path / "c.png").exists()


@drawing
def test_runs_without_any_record_are_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text('{"event": "train", "st', encoding="utf-8")
    with pytest.raises(DataError, match="no training records"):
        plot.plot_runs([tmp_path / "empty"], tmp_path / "c.png")


@drawing
@drawing
def test_a_run_without_records_is_left_out_of_the_others_plot(tmp_path):
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "metrics.jsonl").write_text("", encoding="utf-8")
    out = plot.plot_runs([write_run(tmp_path / "base"), tmp_path / "fresh"], tmp_path / "c.png")
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    runs = [plot.read_curves(tmp_path / "base"), plot.read_curves(tmp_path / "fresh")]
    assert [t.get_text() for t in plot.build_figure(runs).legends[0].get_texts()] == ["base"]


def test_a_non_png_output_name_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"\.png"):
        plot.plot_runs([write_run(tmp_path / "base")], tmp_path / "curves.pdf")


def test_missing_matplotlib_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    assert not plot.plot_available()
    with pytest.raises(ConfigError) as error:
        plot.plot_runs([write_run(tmp_path / "base")], tmp_path / "c.png")
    assert str(error.value) == plot.MISSING
    assert "pip install 'mtkit[plot]'" in plot.MISSING


def test_the_module_imports_without_matplotlib_or_torch():
    code = ("import sys; sys.modules['matplotlib'] = None; import mtkit.report.plot as p; "
            "assert not p.plot_available(); assert 'torch' not in sys.modules, 'torch'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
