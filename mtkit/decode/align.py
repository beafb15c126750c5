"""Word alignments: for each output word, the source words it was translated from, read
off one decoder layer's cross-attention.

The search carries no attention weights (its kernels return none); aligning costs one
teacher-forced pass over each finished hypothesis instead, in the engine that found it
(`Engine.cross_attention`). That pass gives, for each output piece, the chosen layer's
attention over the source pieces, heads averaged, at the decoder position that predicted
the piece: the one that reads the piece before it (the start token for the first) and
at which the search chose it. Each output piece links to the source piece it attends to
most, never the source's EOS or a tag or language token. At word level both sides are
lifted to whitespace words (mtkit.data.words: the source line's as written, the output's as
decoded), so every output word has at least one link.

Attention is not trained to align: the links are rough (docs/guides/alignments.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.data.batching import token_batches
from mtkit.data.tokenizer import Tokenizer
from mtkit.data.words import UNITS, output_units, source_units

Links = tuple[tuple[int, int], ...]  # (source unit i, output unit j), sorted
# (sources, targets, layer) -> per pair its (T, S) attention: the engine's cross_attention
CrossAttention = Callable[[list[list[int]], list[list[int]], int], list[Tensor]]


@dataclass(frozen=True)
class Aligned:
    """A translation and its links: (i, j) pairs, i counting the source line's units
    (whitespace words, or pieces) and j the translation's, from 0."""

    text: str
    links: Links

    @property
    def pharaoh(self) -> str:
        return pharaoh(self.links)


def pharaoh(links: Links) -> str:
    """Links as Pharaoh text: `i-j` pairs separated by spaces."""
    return " ".join(f"{i}-{j}" for i, j in links)


def best_links(attention: Tensor, src_units: Sequence[int | None],
               out_units: Sequence[int | None]) -> Links:
    """attention (T, S): output piece t's weights over source piece s. Each output piece
    with a unit links its unit to the unit of its strongest source piece among those with
    one; no links when no source piece has a unit."""
    allowed = torch.tensor([u is not None for u in src_units], dtype=torch.bool)
    if not bool(allowed.any()):
        return ()
    best = attention.float().masked_fill(~allowed, -1.0).argmax(dim=1).tolist()  # (T,)
    pairs = {(src_units[s], j) for s, j in zip(best, out_units, strict=True) if j is not None}
    return tuple(sorted(pairs))  # type: ignore[arg-type]  # None was masked out


def align(cross_attention: CrossAttention, tokenizer: Tokenizer, lines: Sequence[str],
          sources: Sequence[list[int]], targets: Sequence[list[int]], layer: int,
          unit: str = "word", max_tokens: int = 4096) -> list[Links]:
    """The links of each (source, output) pair of ids, as `tokenizer` (the Translator's:
    with its tag, if any) encoded and decodes them, the sources being `lines` encoded
    (source words are those of the lines as written); an empty side has none. `layer`: a
    decoder layer index (`DecodeConfig.alignment_index`); `max_tokens` bounds each pass's batch."""
    if unit not in UNITS:
        raise ValueError(f"alignment unit {unit!r}: expected {' or '.join(UNITS)}")
    todo = [k for k, (src, tgt) in enumerate(zip(sources, targets, strict=True)) if src and tgt]
    found: list[Links] = [() for _ in targets]
    lengths = [len(sources[k]) + len(targets[k]) + 2 for k in todo]  # + both EOS
    for batch in token_batches(lengths, max_tokens):
        chosen = [todo[b] for b in batch]
        weights = cross_attention([sources[k] for k in chosen], [targets[k] for k in chosen],
                                  layer)
        for k, attention in zip(chosen, weights, strict=True):
            found[k] = best_links(attention,
                                  source_units(tokenizer, lines[k], sources[k], unit),
                                  output_units(tokenizer, targets[k], unit))
    return found
