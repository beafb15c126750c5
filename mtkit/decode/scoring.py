"""Scoring given translations: the model's log-probability of each (source, target) pair.

The pairs are encoded as the search reads them (the source as `translate` encodes its
input, a corpus tag included; the target as the model's target pieces) and go to the
engine (`Engine.score`) in token-bounded, length-sorted batches; the scores come back in
the pairs' order. An empty source or target is a pair like any other: an empty target
scores the model's choice to end at once (EOS alone). A side longer than the model's
positions is refused (`TooLong`), never truncated: a truncated pair's score would be the
score of another pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mtkit.data.batching import token_batches
from mtkit.data.tokenizer import Tokenizer
from mtkit.decode.engine import Engine
from mtkit.errors import DataError


@dataclass(frozen=True)
class PairScore:
    """One pair's score: natural-log probabilities of the target's tokens, then of EOS."""

    token_logprobs: tuple[float, ...]

    @property
    def total(self) -> float:
        """log P(target | source), EOS included."""
        return sum(self.token_logprobs)

    @property
    def tokens(self) -> int:
        """The target's tokens and its EOS: what `per_token` divides by."""
        return len(self.token_logprobs)

    @property
    def per_token(self) -> float:
        return self.total / self.tokens

    def line(self) -> str:
        """The line `mtkit score-pairs` writes: total TAB per_token."""
        return f"{self.total:.4f}\t{self.per_token:.4f}"


class TooLong(ValueError):
    """Pair `index` has a side (`source` or `target`) of `length` tokens, over `limit`."""

    def __init__(self, index: int, side: str, length: int, limit: int):
        super().__init__(f"pair {index}: the {side} has {length} tokens, over {limit}")
        self.index, self.side, self.length, self.limit = index, side, length, limit


# The score of a pair the model cannot read whole (score-pairs --skip-long): the worst
# there is, so that a filter ranking pairs by score drops it first.
UNSCORED = PairScore((float("-inf"),))


def encode_pairs(tokenizer: Tokenizer, sources: Sequence[str], targets: Sequence[str],
                 limit: int) -> tuple[list[list[int]], list[list[int]], list[TooLong]]:
    """(source ids, target ids) of each pair, without EOS, and a TooLong for each pair
    with a side over `limit` tokens (the engine's `max_source`: the model's positions
    less the one EOS or the start token takes), in order."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources and {len(targets)} targets")
    src, tgt = tokenizer.encode_src(list(sources)), tokenizer.encode_tgt(list(targets))
    long = []
    for index, pair in enumerate(zip(src, tgt)):
        for side, ids in zip(("source", "target"), pair):
            if len(ids) > limit:
                long.append(TooLong(index, side, len(ids), limit))
                break
    return src, tgt, long


def pair_lengths(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
                 ) -> list[int]:
    """What a pair weighs in a batch: its longer side with EOS (the encoder reads the
    source and EOS; the decoder start + the target)."""
    return [max(len(s), len(t)) + 1 for s, t in zip(sources, targets, strict=True)]


def score_encoded(engine: Engine, sources: list[list[int]], targets: list[list[int]],
                  max_tokens: int) -> list[PairScore]:
    """Each pair's score, in order, through the engine in batches of at most `max_tokens`
    padded tokens (longest side first)."""
    scores: list[PairScore | None] = [None] * len(sources)
    for batch in token_batches(pair_lengths(sources, targets), max_tokens):
        found = engine.score([sources[k] for k in batch], [targets[k] for k in batch])
        for k, logprobs in zip(batch, found, strict=True):
            scores[k] = PairScore(tuple(logprobs))
    return scores  # type: ignore[return-value] - every index was in one batch


def score_texts(engine: Engine, tokenizer: Tokenizer, pairs: tuple[Sequence[str], Sequence[str]],
                max_tokens: int, where: tuple[int, tuple[str, str]] = (0, ("source", "target")),
                skip_long: bool = False) -> list[PairScore]:
    """`Translator.score` of (sources, targets) lines: each pair's score in order; a side
    over the engine's `max_source` is a DataError naming the file (`where`: the first
    line's number, from 0, and the two sides' names) and line, or with `skip_long` its
    pair's score is UNSCORED."""
    first_line, names = where
    src, tgt, long = encode_pairs(tokenizer, *pairs, engine.max_source)
    if long and not skip_long:
        first = long[0]
        name = names[first.side == "target"]
        raise DataError(f"{name} line {first_line + first.index + 1}: {first.length} "
                        f"tokens, the model takes at most {first.limit}; shorten or split "
                        "the pair, or skip such pairs (score-pairs --skip-long): a truncated "
                        "pair would get another pair's score")
    skipped = {pair.index for pair in long}
    kept = [i for i in range(len(src)) if i not in skipped]
    scored = iter(score_encoded(engine, [src[i] for i in kept], [tgt[i] for i in kept],
                                max_tokens))
    return [UNSCORED if i in skipped else next(scored) for i in range(len(src))]
