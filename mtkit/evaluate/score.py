"""`mtkit score`: hypothesis files (or stdin) scored against references, or several
systems compared with a paired significance test, as the text or JSON the command
prints. sacrebleu does the scoring (metrics.py); this module reads the files and words
the report.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtkit.errors import ConfigError
from mtkit.evaluate.metrics import compare_systems, corpus_scores
from mtkit.files.textio import read_lines, stream_lines

METRICS = ("bleu", "chrf", "ter")


@dataclass(frozen=True)
class ScoreRequest:
    refs: tuple[Path, ...]  # several: one reference stream each
    hyp: Path | None = None  # None: stdin
    systems: tuple[Path, ...] = ()  # to compare, the first the baseline (hyp is unused then)
    metrics: str = "bleu,chrf"  # comma-separated, as given on the command line
    as_json: bool = False
    tokenize: str | None = None  # sacrebleu's tokenizer; None: the metric's default
    lowercase: bool = False  # BLEU's, as sacrebleu's -lc
    chrf_lowercase: bool = False
    ter_case_sensitive: bool = False  # TER is case-insensitive by default, as in sacrebleu
    tgt_lang: str | None = None
    paired_ar: bool = False  # approximate randomisation instead of the paired bootstrap


def score_report(request: ScoreRequest) -> str:
    """What `mtkit score` prints: one line per metric (sacrebleu's), one row per system
    and metric for a comparison, or the same as JSON."""
    names = _metric_names(request.metrics)
    _check_comparison(request)
    refs = [list(read_lines(r)) for r in request.refs]
    ref_names = [str(r) for r in request.refs]
    options: dict[str, Any] = {"tokenize": request.tokenize, "lowercase": request.lowercase,
                               "tgt_lang": request.tgt_lang, "ref_names": ref_names,
                               "chrf_lowercase": request.chrf_lowercase,
                               "ter_case_sensitive": request.ter_case_sensitive}
    if request.systems:
        systems = {str(s): list(read_lines(s)) for s in request.systems}
        rows = compare_systems(systems, refs, names,
                               method="ar" if request.paired_ar else "bootstrap", **options)
        return _rows_text(rows, request.as_json)
    hyp = request.hyp
    hyps = list(read_lines(hyp)) if hyp is not None else _stdin_lines()
    results = corpus_scores(hyps, refs, names, hyp_name=str(hyp) if hyp is not None
                            else "<stdin>", **options)
    if request.as_json:
        payload = [{"name": s.name, "score": s.score, "signature": s.signature} for s in results]
        return json.dumps(payload, indent=1) + "\n"
    return "".join(f"{s.text}\n" for s in results)


def _check_comparison(request: ScoreRequest) -> None:
    """A comparison is of its --system files alone, two or more; --paired-ar is one."""
    if request.systems and request.hyp is not None:
        raise ConfigError(f"--input {request.hyp}: not with --system (a comparison scores its "
                          "systems alone); give it as a --system, the first for the baseline")
    repeated = next((s for k, s in enumerate(request.systems) if s in request.systems[:k]),
                    None)
    if repeated is not None:  # (rows are named by file: one would hide the other)
        raise ConfigError(f"--system {repeated}: given twice; give each system once")
    if len(request.systems) == 1:
        raise ConfigError(f"--system {request.systems[0]}: give two or more to compare (the "
                          "first is the baseline); score one file with --input")
    if request.paired_ar and not request.systems:
        raise ConfigError("--paired-ar: a test between --system files; give two or more")


def _metric_names(metrics: str) -> tuple[str, ...]:
    names = tuple(m.strip().lower() for m in metrics.split(",") if m.strip())
    for name in names:
        if name not in METRICS:
            raise ConfigError(f"--metrics {metrics}: unknown metric {name!r}; use bleu, chrf, ter")
    if not names:  # (`--metrics ,` or "": nothing would be scored, and nothing printed)
        raise ConfigError(f"--metrics {metrics!r}: no metric given; use one or more of bleu, "
                          "chrf, ter, separated by commas")
    return names


def _stdin_lines() -> list[str]:
    return list(stream_lines(sys.stdin.buffer, "<stdin>"))  # as a file's lines are read


def _rows_text(rows: list[dict[str, Any]], as_json: bool) -> str:
    if as_json:
        return json.dumps(rows, indent=1) + "\n"
    text = []
    for row in rows:
        ci = row.get("ci")
        ci_text = f" ± {ci:.2f}" if isinstance(ci, (int, float)) else ""
        p = row.get("p_value")
        p_text = f"  p = {p:.4f}" if p is not None else "  (baseline)"
        text.append(f"{row['name']}\t{row['metric']}\t{row['score']:.2f}{ci_text}{p_text}\n")
    return "".join(text)
