"""The decode settings a command line chooses, apart from what loads and runs a model:
`translate` and `serve` take the same ones (and `mtkit --help` needs no torch for them)."""

from __future__ import annotations

from dataclasses import dataclass

# translate's options for the decode settings and the pair, so that errors name what the
# user typed
OPTION_NAMES = {"beam": "--beam", "lenpen": "--lenpen", "stop": "--stop", "nbest": "--nbest",
                "max_len_a": "--max-len-a", "max_len_b": "--max-len-b",
                "sampling": "--sampling", "temperature": "--temperature", "seed": "--seed",
                "alignment_layer": "--alignment-layer", "split": "--split",
                "protect": "--no-protect", "protect_rules": "--protect",
                "protect_regex": "--protect-regex", "src_lang": "--src-lang",
                "tgt_lang": "--tgt-lang"}


@dataclass(frozen=True)
class DecodeChoices:
    """The decode settings a command line gives (`translate`, `serve`); None keeps the
    model's recipe's. `Translator.load(..., **dataclasses.asdict(choices))` applies them."""

    beam: int | None = None
    lenpen: float | None = None
    stop: str | None = None
    nbest: int | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    sampling: str | None = None  # none, full, topk:K or topp:P (checked by DecodeConfig)
    temperature: float | None = None
    seed: int | None = None
    alignment_layer: int | None = None  # the decoder layer word alignments read
    split: bool | None = None  # translate each line's sentences one by one (mtkit.document)
    protect: bool | None = None  # keep placeholders from the model
    protect_rules: tuple[str, ...] | None = None  # rules switched on beyond the defaults
    protect_regex: tuple[str, ...] | None = None  # further placeholders' patterns
