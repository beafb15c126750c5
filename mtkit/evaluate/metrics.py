"""Corpus BLEU / chrF / TER and paired significance tests, through sacrebleu's API.

We compute nothing ourselves: every number comes from sacrebleu, so a score printed by
mtkit equals the one `sacrebleu REF -i HYP` prints for the same files, and each score
carries sacrebleu's signature so it can be reproduced.

`refs` is always a list of reference *streams*: refs[i][j] is line j of reference i,
and every stream is as long as the hypotheses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

from mtkit.errors import ConfigError, DataError

METRICS = ("bleu", "chrf", "ter")


@dataclass(frozen=True)
class Score:
    """One corpus-level score, as sacrebleu reports it."""

    name: str  # sacrebleu's name: "BLEU", "chrF2", "TER"
    score: float
    signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    text: str  # sacrebleu's one-line report: "BLEU|<signature> = 32.15 63.2/38.1/... (BP = ...)"
    mean: float | None = None  # bootstrap mean, when confidence intervals were asked for
    ci: float | None = None  # half-width of the 95% bootstrap interval around `mean`


def make_metric(
    name: str, tokenize: str | None = None, lowercase: bool = False, tgt_lang: str | None = None,
    chrf_lowercase: bool = False, ter_case_sensitive: bool = False,
) -> Metric:
    """A sacrebleu metric object, set as sacrebleu's command line sets it: `tokenize` and
    `lowercase` apply to BLEU only, chrF has `chrf_lowercase`, TER `ter_case_sensitive`
    (TER is case-insensitive unless asked).

    With tokenize=None BLEU picks sacrebleu's default for `tgt_lang`: zh -> zh,
    ja -> ja-mecab, ko -> ko-mecab, anything else -> 13a.
    """
    key = name.lower()
    if key == "bleu":
        if tokenize is not None and tokenize not in BLEU.TOKENIZERS:
            raise ConfigError(
                f"unknown BLEU tokenizer {tokenize!r}; choose one of {', '.join(BLEU.TOKENIZERS)}"
            )
        try:
            return BLEU(lowercase=lowercase, tokenize=tokenize, trg_lang=tgt_lang or "")
        except (RuntimeError, ImportError) as exc:
            # ja-mecab / ko-mecab / spm need optional packages; sacrebleu says which.
            detail = " ".join(str(exc).split())
            raise ConfigError(f"{_tokenizer_named(tokenize, tgt_lang)} is unavailable: "
                              f"{detail} (or choose another tokenizer, e.g. char)") from None
        except OSError as exc:
            # the flores/spm tokenizers download their SentencePiece model on first use
            raise ConfigError(
                f"{_tokenizer_named(tokenize, tgt_lang)} is unavailable: sacrebleu could not "
                f"download its SentencePiece model ({' '.join(str(exc).split())}); run once "
                "with network access (sacrebleu keeps it in $SACREBLEU, ~/.sacrebleu by "
                "default), or choose another tokenizer, e.g. char") from None
    if key == "chrf":
        return CHRF(lowercase=chrf_lowercase)
    if key == "ter":
        return TER(case_sensitive=ter_case_sensitive)
    raise ConfigError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")


def _tokenizer_named(tokenize: str | None, tgt_lang: str | None) -> str:
    """The BLEU tokenizer a user asked for, in words, for an error message."""
    if tokenize is not None:
        return f"BLEU tokenizer {tokenize!r}"
    return f"BLEU tokenizer for target language {tgt_lang!r}"


def check_streams(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    ref_names: Sequence[str] | None = None,
    hyp_name: str | None = None,
) -> None:
    """Raise DataError unless there are hypotheses and every reference stream matches them."""
    what = f"hypotheses ({hyp_name})" if hyp_name else "hypotheses"
    if len(hyps) == 0:
        raise DataError(f"{what}: nothing to score, there are no lines")
    if len(refs) == 0:
        raise DataError("no reference given; pass at least one reference file")
    for i, ref in enumerate(refs):
        if len(ref) != len(hyps):
            name = f" ({ref_names[i]})" if ref_names and i < len(ref_names) else ""
            raise DataError(
                f"{what} have {len(hyps)} lines but reference {i + 1}{name} has {len(ref)}"
            )


def corpus_scores(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu", "chrf"),
    tokenize: str | None = None,
    lowercase: bool = False,
    tgt_lang: str | None = None,
    ref_names: Sequence[str] | None = None,
    hyp_name: str | None = None,
    n_bootstrap: int = 0,
    chrf_lowercase: bool = False,
    ter_case_sensitive: bool = False,
) -> list[Score]:
    """Corpus scores of `hyps` against one or more reference streams, in `metrics` order.

    n_bootstrap > 1 adds a 95% bootstrap confidence interval (sacrebleu's resampling,
    seeded by $SACREBLEU_SEED, 12345 by default).
    """
    check_streams(hyps, refs, ref_names, hyp_name)
    hyps, refs = list(hyps), [list(r) for r in refs]
    scores = []
    for name in metrics:
        metric = make_metric(name, tokenize, lowercase, tgt_lang, chrf_lowercase,
                             ter_case_sensitive)
        result = metric.corpus_score(hyps, refs, n_bootstrap=max(n_bootstrap, 1))
        signature = metric.get_signature().format()
        has_ci = n_bootstrap > 1  # sacrebleu keeps the interval in private fields only
        scores.append(
            Score(
                name=result.name,
                score=float(result.score),
                signature=signature,
                text=result.format(signature=signature),
                mean=float(result._mean) if has_ci else None,
                ci=float(result._ci) if has_ci else None,
            )
        )
    return scores


def compare_systems(
    systems: dict[str, Sequence[str]],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu", "chrf"),
    method: Literal["bootstrap", "ar"] = "bootstrap",
    n_samples: int = 0,
    tokenize: str | None = None,
    lowercase: bool = False,
    tgt_lang: str | None = None,
    ref_names: Sequence[str] | None = None,
    chrf_lowercase: bool = False,
    ter_case_sensitive: bool = False,
) -> list[dict[str, Any]]:
    """Paired significance test of every system against the first one (the baseline).

    method: "bootstrap" (paired bootstrap resampling, as Moses' script) or "ar"
    (approximate randomization). n_samples: resamples / trials; 0 = sacrebleu's
    defaults (1000 / 10000). Confidence intervals are 95% bootstrap intervals (for "ar",
    from 1000 extra bootstrap resamples). Results are seeded by $SACREBLEU_SEED.

    Returns one row per (system, metric), systems in input order:
    {"name", "metric", "score", "mean", "ci", "p_value", "signature"}; the baseline's
    p_value is None.
    """
    if method not in ("bootstrap", "ar"):
        raise ConfigError(f"unknown significance test {method!r}; choose bootstrap or ar")
    if not systems:
        raise DataError("no system to compare")
    for name, hyps in systems.items():
        check_streams(hyps, refs, ref_names, hyp_name=name)
    test = PairedTest(
        named_systems=[(name, list(hyps)) for name, hyps in systems.items()],
        metrics={m: make_metric(m, tokenize, lowercase, tgt_lang, chrf_lowercase,
                                ter_case_sensitive) for m in metrics},
        references=[list(r) for r in refs],
        test_type="bs" if method == "bootstrap" else "ar",
        n_samples=n_samples,
        # "ar" needs extra bootstrap resamples for its intervals (0 = sacrebleu's 1000);
        # "bs" has its own, and a value > 0 would overwrite its count in the signature.
        n_ar_confidence=0 if method == "ar" else -1,
    )
    signatures, table = test()
    rows = []
    for metric_name, results in table.items():
        if metric_name == "System":
            continue
        for system, result in zip(table["System"], results, strict=True):
            rows.append(
                {
                    "name": system,
                    "metric": metric_name,
                    "score": float(result.score),
                    "mean": _maybe_float(result.mean),
                    "ci": _maybe_float(result.ci),
                    "p_value": _maybe_float(result.p_value),
                    "signature": signatures[metric_name].format(),
                }
            )
    order = {name: i for i, name in enumerate(systems)}
    return sorted(rows, key=lambda row: order[row["name"]])  # stable: metric order kept


def _maybe_float(value: Any) -> float | None:
    return None if value is None else float(value)
