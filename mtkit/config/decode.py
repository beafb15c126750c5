"""The recipe's decode section: beam search or sampling, and what `translate` does
around the model (sentence splitting, placeholders: mtkit.document)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from mtkit.config.fields import SEED_MAX, between, doc
from mtkit.config.sampling import Sampling

# the placeholder rules of mtkit.document.placeholders, by name (their patterns are there)
PLACEHOLDER_RULES = ("printf", "brace", "dollar", "percent_name", "url", "email", "number",
                     "accelerator")



@dataclass(frozen=True)
class DecodeConfig:
    beam: int = field(default=5, metadata=between(1, 1000, doc="beam size"))
    lenpen: float = field(default=1.0, metadata=between(
        0.0, 10.0, doc="length penalty: scores are divided by length^lenpen"))
    # exact: at any length up to the cap; top: CTranslate2's rule, in effect
    stop: Literal["early", "exact", "top"] = field(default="early", metadata=doc(
        "when a sentence's search ends once the n-best has finished: no live hypothesis "
        "would beat it by ending at the next step (early), none could (exact), or none "
        "has a higher log-probability than the best finished (top)"))
    nbest: int = field(default=1, metadata=between(
        1, 1000, doc="translations per sentence; at most beam (samples: any number)"))
    max_len_a: float = field(default=1.2, metadata=between(
        0.0, doc="output length cap: a x source length + b"))
    max_len_b: int = field(default=10, metadata=between(0, doc="b of the length cap"))
    sampling: Sampling = field(default=Sampling(), metadata=doc(
        "none: beam search (greedy for beam 1); or draw each translation at random, from "
        "the whole distribution (full), the K likeliest tokens (topk:K) or the smallest set "
        "of likeliest tokens with mass >= P (topp:P); nbest samples per line, beam unused"))
    temperature: float = field(default=1.0, metadata=between(0.0, above=True, doc=(
        "sampling: the log-probabilities are divided by this before the topk/topp cut "
        "(< 1 sharper, > 1 flatter)")))
    seed: int = field(default=0, metadata=between(0, SEED_MAX, doc=(
        "sampling: each line's samples come from random streams seeded by this, the line's "
        "number in its input and the sample's, so a rerun repeats them")))
    alignment_layer: int = field(default=-2, metadata=between(-64, 63, doc=(
        "word alignments (translate --alignments): the decoder layer whose cross-attention "
        "links output words to source words, from 0, or negative from the end (-1: the "
        "last); the default -2, the penultimate, is the only layer of a one-layer decoder")))
    tune_beam: tuple[int, ...] = field(default=(), metadata=between(
        1, 1000, doc="when set, the eval stage tries every beam x lenpen on the dev set and "
        "decodes the test sets with the best; beam fills in for an empty list"))
    tune_lenpen: tuple[float, ...] = field(default=(), metadata=between(
        0.0, 10.0, doc="the length penalties that tuning tries; lenpen fills in for an empty "
        "list"))
    split: bool = field(default=False, metadata=doc(
        "split each line into sentences, translate them one by one and join their "
        "translations (needs sentencex: the split extra); docs/guides/documents.md"))
    protect: bool = field(default=True, metadata=doc(
        "keep placeholders (printf, brace, $(NAME), %NAME%, URLs, e-mail addresses) from "
        "the model and put them back as they were; false switches every rule off, "
        "protect_rules and protect_regex included"))
    protect_rules: tuple[str, ...] = field(default=(), metadata=doc(
        "placeholder rules to switch on beyond those: number, accelerator (or all)"))
    protect_regex: tuple[str, ...] = field(default=(), metadata=doc(
        "further placeholders: regular expressions (Python's re) whose matches are kept"))

    def check(self) -> None:
        # the n best come out of the beam (samples do not)
        if self.nbest > self.beam and self.sampling.kind == "none":
            raise ValueError(
                f"decode.nbest ({self.nbest}) must not exceed decode.beam ({self.beam})"
            )
        for rule in self.protect_rules:
            if rule not in (*PLACEHOLDER_RULES, "all"):
                raise ValueError(f"decode.protect_rules {rule}: not a placeholder rule; "
                                 f"expected {', '.join(PLACEHOLDER_RULES)} or all")
        for pattern in self.protect_regex:
            try:
                empty = re.compile(pattern).match("") is not None
            except re.error as exc:
                raise ValueError(f"decode.protect_regex {pattern!r}: not a valid regular "
                                 f"expression ({exc}); fix it (Python's re syntax)") from None
            if empty:
                raise ValueError(f"decode.protect_regex {pattern!r}: matches empty text; "
                                 "give a pattern that matches at least one character")

    def alignment_index(self, depth: int) -> int | None:
        """Decoder layer `alignment_layer` (negative: from the end) of `depth` as an index,
        or None; -2 of a one-layer decoder is its only layer: the default suits any model."""
        layer = self.alignment_layer
        if layer == -2 and depth == 1:
            return 0
        return layer % depth if -depth <= layer < depth else None

    def alignment_layer_error(self, depth: int) -> str:
        return (f"decode.alignment_layer {self.alignment_layer}: the model's decoder has "
                f"{depth} layer{'s' * (depth > 1)}; give 0..{depth - 1}, or -1..-{depth} "
                "from the end")
