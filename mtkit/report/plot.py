"""Training curves of one or more runs, read from RUN_DIR/metrics.jsonl, drawn into a PNG.

Each chosen metric gets a row of two panels: the metric against updates (steps) and
against training time (the records' `elapsed`, in minutes), one line per run in the same
colour in every panel, so runs compare at a glance. Needs the optional extra
`pip install 'mtkit[plot]'`; matplotlib is imported only where a figure is drawn, so this
module (and the pipeline that calls it) imports without it, and nothing here needs torch.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mtkit.errors import ConfigError, DataError, MtkitError
from mtkit.files.atomic import atomic_write, make_parent_dirs
from mtkit.files.textio import read_json_lines

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

log = logging.getLogger("mtkit")

# metric -> (panel title, y-axis label with its unit). The records' fields are written by
# meter.TrainMeter.record ("train") and evaluation.Validation.record ("valid").
PANELS = {
    "train.loss": ("Training loss", "loss (nats/token, label-smoothed)"),
    "train.nll": ("Training NLL", "NLL (nats/token)"),
    "train.ppl": ("Training perplexity", "perplexity (log scale)"),
    "train.lr": ("Learning rate", "learning rate"),
    "train.grad_norm": ("Gradient norm", "gradient L2 norm (mean per update)"),
    "train.tgt_tokens_per_s": ("Training speed", "target tokens/s"),
    "valid.loss": ("Dev loss", "loss (nats/token)"),
    "valid.nll": ("Dev NLL", "NLL (nats/token)"),
    "valid.ppl": ("Dev perplexity", "perplexity (log scale)"),
    "valid.bleu": ("Dev BLEU", "BLEU (greedy decoding)"),
}
METRICS = tuple(PANELS)
DEFAULT_METRICS = ("train.loss", "valid.bleu")
LOG_SCALE = {"train.ppl", "valid.ppl"}  # perplexity falls by orders of magnitude early on
X_AXES = (("updates", "updates (steps)"), ("training time", "training time (minutes)"))
METRICS_FILE = "metrics.jsonl"  # run.RunPaths.metrics; run.py imports torch, this must not
MISSING = "mtkit plot needs matplotlib; install the extra: pip install 'mtkit[plot]'"
FIGURE_WIDTH, ROW_HEIGHT, DPI = 10.0, 3.5, 120  # 2 metrics: 10 x 7 in, 1200 x 840 px

Point = tuple[int, float, float]  # (step, training minutes, value)


@dataclass
class Curves:
    """One run's metrics.jsonl as series: metric name (`train.loss`) -> points in file order."""

    run_dir: Path
    series: dict[str, list[Point]] = field(default_factory=dict)
    records: int = 0  # train and valid records read

    def points(self, metric: str) -> list[Point]:
        return self.series.get(metric, [])


def plot_available() -> bool:
    """Whether matplotlib is installed, i.e. whether plot_runs can draw."""
    try:
        figure_classes()
    except ConfigError:
        return False
    return True


def read_curves(run_dir: Path) -> Curves:
    """Read RUN_DIR/metrics.jsonl; lines that do not decode (a last line cut by a crash) and
    values that are not finite numbers (a diverging run) are skipped."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    if run_dir.exists() and not run_dir.is_dir():
        raise DataError(f"{run_dir}: is a file, expected a run directory (the one "
                        "`mtkit train` wrote, with metrics.jsonl)")
    if not run_dir.is_dir():
        raise DataError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise DataError(f"{run_dir}: no {METRICS_FILE}; has the run started training?")
    curves = Curves(run_dir)
    for record in read_json_lines(path):
        event = record.get("event")
        step = record.get("step") if event in ("train", "valid") else None
        if not _is_number(step):
            continue  # "skipped" updates and anything foreign
        curves.records += 1
        elapsed = record.get("elapsed")
        minutes = elapsed / 60 if _is_number(elapsed) else math.nan
        for metric in METRICS:
            kind, name = metric.split(".")
            if kind == event and _is_number(record.get(name)):
                curves.series.setdefault(metric, []).append(
                    (int(step), minutes, float(record[name])))
    return curves


def plot_runs(run_dirs: list[Path], out: Path, metrics: tuple[str, ...] = DEFAULT_METRICS,
              names: list[str] | None = None) -> Path:
    """Draw the curves of `run_dirs` into the PNG `out` (written atomically); returns `out`."""
    out = Path(out)
    metrics = check_metrics(metrics)
    if out.suffix.lower() != ".png":
        raise ConfigError(f"-o {out}: mtkit plot writes PNG; give a file name ending in .png")
    figure_classes()  # before reading anything: the missing extra is the first thing to fix
    curves = [read_curves(run_dir) for run_dir in run_dirs]
    if not any(c.records for c in curves):
        raise DataError(f"{', '.join(map(str, run_dirs))}: no training records in "
                        f"{METRICS_FILE} yet; plot once training has logged")
    for empty in (c.run_dir for c in curves if not c.records):
        log.warning("%s: no training records in %s yet; not in the plot", empty, METRICS_FILE)
    figure = build_figure(curves, metrics, names)
    make_parent_dirs(out)
    atomic_write(out, lambda file: figure.savefig(file, format="png", dpi=DPI))
    return out


def run_curves(run_dir: Path, metrics: Path) -> Path | None:
    """RUN_DIR/curves.png of the run's `metrics` (metrics.jsonl) when matplotlib is
    installed (the extra mtkit[plot]), redrawn only when the metrics are newer: a second
    `mtkit train` writes nothing. None when there is no picture."""
    curves = run_dir / "curves.png"
    if not plot_available() or not metrics.is_file():
        return None
    if curves.is_file() and curves.stat().st_mtime >= metrics.stat().st_mtime:
        return curves
    try:
        return plot_runs([run_dir], curves)
    except MtkitError as exc:  # a picture is not worth failing a finished run for
        log.warning("curves.png not written: %s", exc)
        return None


def check_metrics(metrics: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The metric names, checked and without repeats (none given: DEFAULT_METRICS)."""
    for name in metrics:
        if name not in METRICS:
            raise ConfigError(f"--metric {name}: unknown metric; expected one of "
                              f"{', '.join(METRICS)}")
    return tuple(dict.fromkeys(metrics)) or DEFAULT_METRICS


def run_names(run_dirs: list[Path]) -> list[str]:
    """Each run's directory name, or its shortest path suffix that no other run shares."""
    # abspath, not resolve: a run reached through a symlink keeps the name the user gave
    parts = [Path(os.path.abspath(d)).parts for d in run_dirs]
    names = []
    for mine in parts:
        k = 1
        while k < len(mine) and any(o != mine and o[-k:] == mine[-k:] for o in parts):
            k += 1
        names.append("/".join(mine[-k:]))
    return names


def build_figure(curves: list[Curves], metrics: tuple[str, ...] = DEFAULT_METRICS,
                 names: list[str] | None = None) -> Figure:
    """The figure plot_runs saves (its own object, no pyplot state): a row of two panels
    per metric, and one legend of the runs above them."""
    figure_cls, canvas_cls = figure_classes()
    metrics = check_metrics(metrics)
    names = names if names is not None else run_names([c.run_dir for c in curves])
    if len(names) != len(curves):
        raise ValueError(f"{len(names)} names for {len(curves)} runs")
    figure = figure_cls(figsize=(FIGURE_WIDTH, ROW_HEIGHT * len(metrics)), dpi=DPI,
                        layout="constrained")
    canvas_cls(figure)  # Agg: renders without a display
    axes = figure.subplots(len(metrics), 2, squeeze=False)
    for row, metric in zip(axes, metrics):
        for x_index, ax in enumerate(row):
            _panel(ax, curves, names, metric, x_index)
    handles = {}  # one legend entry per run that drew a line, whichever panel it is in
    for ax in axes.flat:
        for line in ax.lines:
            handles.setdefault(line.get_label(), line)
    if handles:
        figure.legend(handles.values(), handles.keys(), loc="outside upper center",
                      ncols=min(len(handles), 4), frameon=False)
    return figure


def _panel(ax: Axes, curves: list[Curves], names: list[str], metric: str, x_index: int):
    """One metric of every run against X_AXES[x_index] (a Point's index: step or minutes)."""
    (title, y_label), (against, x_label) = PANELS[metric], X_AXES[x_index]
    ax.set_title(f"{title} vs {against}")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    drawn = False
    for i, (run, label) in enumerate(zip(curves, names)):
        points = run.points(metric)
        if not points:
            continue
        # dev points are sparse (one per validation): mark each; training logs are dense
        valid = metric.startswith("valid.")
        style = {"marker": "o", "markersize": 4, "linewidth": 1.2} if valid else {}
        ax.plot([p[x_index] for p in points], [p[2] for p in points], color=f"C{i % 10}",
                label=label, **style)
        drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                color="gray", fontsize=12)
        ax.set_xticks([])
        ax.set_yticks([])
    elif metric in LOG_SCALE:
        ax.set_yscale("log")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def figure_classes(missing: str = MISSING):
    """(Figure, FigureCanvasAgg), or the one-line error `missing`, which says how to
    install them."""
    try:
        import matplotlib  # noqa: F401  (first: a missing package fails here, not below)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(missing) from None
    return Figure, FigureCanvasAgg
