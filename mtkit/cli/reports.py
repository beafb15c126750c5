"""Commands that report on models and translations: info, plot, attention, score."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from mtkit.cli.options import (
    BeamOpt,
    DeviceOpt,
    TagOpt,
    one_of,
    std_stream,
)
from mtkit.errors import ConfigError

log = logging.getLogger("mtkit")


def info(
    path: Path = typer.Argument(..., metavar="MODEL|RUN_DIR", show_default=False,
                                help="A model file, or a run directory (its model.pt)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Show what a model holds: architecture, vocabulary, training, and its run's scores."""
    from mtkit.report.info import model_info

    found = model_info(path)
    text = json.dumps(found.to_dict(), indent=1) if as_json else "\n".join(found.lines())
    sys.stdout.write(text + "\n")


def plot(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR...", show_default=False,
                                          help="Run directories to compare."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE",
                                help="The PNG file to write."),
    metrics: list[str] | None = typer.Option(
        None, "--metric", metavar="NAME", help="Metric to draw, e.g. train.ppl (repeatable) "
        "[default: train.loss and valid.bleu]."
    ),
) -> None:
    """Plot runs' training curves into a PNG (needs the extra: pip install 'mtkit[plot]')."""
    from mtkit.report.plot import plot_runs

    plot_runs(list(run_dirs), output, tuple(metrics or ()))
    log.info("curves of %d run(s) written to %s", len(run_dirs), output)


def attention(
    models: list[Path] = typer.Option(
        ..., "-m", "--model", metavar="MODEL", help="Model file or run directory (its "
        "model.pt); repeat: an ensemble, heads and models averaged. Not a CTranslate2 "
        "export, which has no attention weights to read."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE",
                                help="The PNG file to write (several lines: FILE-1.png, ...)."),
    lines: int = typer.Option(1, "--lines", metavar="N",
                              help="Draw the first N lines of stdin, a picture each."),
    layer: int | None = typer.Option(
        None, "--layer", metavar="N", show_default="the alignment layer (decode.alignment_layer)",
        help="The decoder layer to draw, from 0 (negative: from the end), heads averaged."),
    every_head: bool = typer.Option(False, "--all",
                                    help="Every layer (rows) and head (columns), a grid."),
    beam: int | None = BeamOpt,
    tag: str | None = TagOpt,
    device: str = DeviceOpt,
) -> None:
    """Translate a sentence from stdin and draw where the decoder attended in the source
    into a PNG (needs the extra: pip install 'mtkit[plot]')."""
    from mtkit.report.attention import AttentionJob, attention_pictures

    if every_head and layer is not None:
        raise ConfigError("--layer and --all: give one (--all draws every layer)")
    paths = attention_pictures(AttentionJob(
        models=tuple(models), output=output, lines=lines, layer=layer, every_head=every_head,
        beam=beam, tag=tag, device=device))
    log.info("attention of %d sentence(s) written to %s", len(paths),
             ", ".join(map(str, paths)))


def score(
    refs: list[Path] = typer.Option(..., "-r", "--ref", metavar="FILE",
                                    help="Reference file (repeatable)."),
    hyp: Path | None = typer.Option(None, "-i", "--input", metavar="FILE", show_default="stdin",
                                    help="Hypotheses (-: stdin)."),
    old_hyp: Path | None = typer.Option(None, "--hyp", hidden=True),  # the old spelling
    systems: list[Path] | None = typer.Option(
        None, "-s", "--system", metavar="FILE",
        help="System output to compare (repeat; the first is the baseline).",
    ),
    metrics: str = typer.Option("bleu,chrf", "--metrics", metavar="LIST",
                                help="Comma-separated: bleu, chrf, ter."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    tokenize: str | None = typer.Option(None, "--tokenize", metavar="NAME",
                                        show_default="13a, or the target language's",
                                        help="BLEU's sacrebleu tokenizer."),
    lowercase: bool = typer.Option(False, "-lc", "--lowercase", help="Lowercase for BLEU."),
    chrf_lowercase: bool = typer.Option(False, "--chrf-lowercase", help="Lowercase for chrF."),
    ter_case_sensitive: bool = typer.Option(
        False, "--ter-case-sensitive", help="Case-sensitive TER (sacrebleu's default: not)."
    ),
    tgt_lang: str | None = typer.Option(None, "--tgt-lang", metavar="CODE",
                                        help="Target language code, e.g. zh."),
    paired_ar: bool = typer.Option(
        False, "--paired-ar", help="Approximate randomisation instead of bootstrap."
    ),
) -> None:
    """Score hypotheses against references with sacrebleu (BLEU, chrF, TER)."""
    from mtkit.evaluate.score import ScoreRequest, score_report

    sys.stdout.write(score_report(ScoreRequest(
        refs=tuple(refs), hyp=std_stream(one_of("--input", hyp, "--hyp", old_hyp)),
        systems=tuple(systems or ()), metrics=metrics, as_json=as_json, tokenize=tokenize,
        lowercase=lowercase, chrf_lowercase=chrf_lowercase,
        ter_case_sensitive=ter_case_sensitive, tgt_lang=tgt_lang, paired_ar=paired_ar,
    )))
