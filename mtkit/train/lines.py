"""The training log's lines: what a person watching `mtkit train` reads (metrics.jsonl
holds the same values for programs)."""

from __future__ import annotations

import logging
from typing import Any

from tqdm import tqdm

from mtkit.evaluate.validation import Validation

log = logging.getLogger("mtkit")


def show_train(record: dict[str, Any], bar: tqdm | None) -> None:
    """A train record as the progress bar's postfix, or as a log line without a bar."""
    text = (
        f"step {record['step']} | epoch {record['epoch']} | loss {record['loss']:.3f} | "
        f"nll {record['nll']:.3f} | "
        + (f"align {record['align_loss']:.3f} | " if "align_loss" in record else "")
        + f"lr {record['lr']:.2e} | gnorm {record['grad_norm']:.2f} | "
        f"{record['tgt_tokens_per_s']:.0f} tgt tok/s"
    )
    if bar is not None:
        bar.n = record["step"]
        bar.set_postfix_str(text.split(" | ", 1)[1], refresh=True)
    else:
        log.info(text)


def show_valid(step: int, result: Validation, averaged: Validation | None,
               improved: bool) -> None:
    """A validation's log line; `averaged`: the same for train.ema's weights."""
    bleu = "" if result.bleu is None else f" | bleu {result.bleu:.2f}"
    ema = ""
    if averaged is not None:
        ema = f" | ema loss {averaged.loss:.3f}" + (
            "" if averaged.bleu is None else f" bleu {averaged.bleu:.2f}")
    log.info("valid step %d | loss %.3f | nll %.3f | ppl %.2f%s%s%s", step, result.loss,
             result.nll, result.ppl, bleu, ema, " | best" if improved else "")
