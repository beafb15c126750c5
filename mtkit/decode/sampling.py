"""Sampling: translations drawn at random from the model's distribution, token by token
(back-translation by sampling: Edunov et al., 2018).

Each step of a sample divides the (ensemble's) log-probabilities by the temperature,
keeps the candidates `Sampling` names (all, the K likeliest, or the smallest set of the
likeliest whose mass is at least P), and draws one of them in proportion to its
probability, by inverting the candidates' cumulative distribution at a uniform number.
Pad and the start token are never candidates (their log-probability is -inf, as in the
other searches). A sample ends at EOS or at its cap, as greedy search does (it is greedy
search with another rule for the token: `search.greedy_search(choose=...)`), and its
score is greedy's: the sum of the model's log-probabilities of its tokens (and EOS),
untempered. A forced prefix is forced as in greedy search.

Reproducibility: the uniform numbers of sample j of the line numbered i in its input come
from a stream of their own, seeded from (seed, i, j) (`stream_seed`), drawn before the
search (`uniforms`). So a line's samples depend on nothing else in the batch: the same
seed gives the same samples whatever the batch size, the batch's other lines or the
order they come in (up to the last bits of the model's floating point, which may differ
between batch shapes and move a draw that falls within ~1e-6 of a boundary). topk:1 keeps
the argmax alone, so it is greedy search exactly.

Cost: a sentence's samples are rows of their own, so its source is encoded once per
sample; `topp` sorts each row's distribution at every step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.config import Sampling
from mtkit.data.tokenizer import SpecialIds
from mtkit.decode.prefix import ForcedPrefix
from mtkit.decode.search import Hypothesis, SearchModel, greedy_search, target_caps
from mtkit.decode.topk import top_k


@dataclass(frozen=True)
class Draw:
    """What sampling takes besides the length cap (the `decode` settings of that name)."""

    sampling: Sampling  # full, topk or topp
    temperature: float = 1.0  # > 0
    seed: int = 0
    samples: int = 1  # per sentence (decode.nbest)


def stream_seed(seed: int, line: int, sample: int) -> int:
    """The seed of the random stream of one sample of one line: a hash, so that nearby
    (seed, line, sample) triples give unrelated streams."""
    digest = hashlib.blake2b(f"{seed}/{line}/{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # 63 bits, as torch.Generator takes


def uniforms(seeds: Sequence[int], counts: Sequence[int], offsets: Sequence[int],
             steps: int) -> Tensor:
    """(N, steps) float64 numbers in [0, 1): row r holds the first counts[r] numbers of the
    stream seeded seeds[r] at columns offsets[r] on (the steps after a forced prefix, which
    draws nothing), zeros elsewhere."""
    out = torch.zeros(len(seeds), steps, dtype=torch.float64)
    for row, (seed, count, offset) in enumerate(zip(seeds, counts, offsets, strict=True)):
        count = min(count, steps - offset)
        if count > 0:
            generator = torch.Generator().manual_seed(seed)
            out[row, offset : offset + count] = torch.rand(count, generator=generator,
                                                           dtype=torch.float64)
    return out


def candidates(lprobs: Tensor, sampling: Sampling, temperature: float
               ) -> tuple[Tensor, Tensor]:
    """The tokens a step draws from: (ids (N, K), probabilities (N, K) float64), 0 for a
    token cut (or never emitted); they sum to 1 before a topp cut. lprobs (N, V)."""
    logits = lprobs
    if temperature != 1.0:
        # less each row's max first (no probability changes): divided by a tiny temperature,
        # the likeliest token stays at 0 and the rest go to -inf, instead of every token
        # overflowing to -inf (a NaN distribution); float64 keeps a huge one finite (at 1,
        # only the K candidates go to float64, below)
        logits = lprobs.double()
        logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if sampling.kind == "topk":
        logits, ids = top_k(logits, min(sampling.k, logits.size(-1)))  # most probable first
    elif sampling.kind == "topp":
        logits, ids = logits.sort(dim=-1, descending=True)
    else:
        ids = None
    probs = logits.double().softmax(dim=-1)
    if sampling.kind == "topp":
        before = probs.cumsum(dim=-1) - probs  # the mass of the likelier candidates
        probs = torch.where(before < sampling.p, probs, 0.0)  # the smallest set with >= P
    if ids is None:
        ids = torch.arange(probs.size(-1), device=probs.device).expand_as(probs)
    return ids, probs


def pick(ids: Tensor, probs: Tensor, uniform: Tensor) -> Tensor:
    """(N,) the token at which each row's cumulative distribution passes uniform x its
    total: token i with probability probs[i] / total. A token of probability 0 is never
    picked: the first index whose cumulative sum exceeds a value adds a positive share."""
    cdf = probs.cumsum(dim=-1)  # (N, K)
    target = (uniform * cdf[:, -1]).unsqueeze(1)  # (N, 1), below the total
    index = torch.searchsorted(cdf, target, right=True).squeeze(1)
    # rounding could put the target at the total itself: then the last possible token
    last = probs.size(-1) - 1 - (probs > 0).flip(-1).int().argmax(dim=-1)
    index = torch.minimum(index, last)
    return ids.gather(1, index.unsqueeze(1)).squeeze(1)


class _Chooser:
    """greedy_search's `choose` for sampling: each live row draws with its own numbers."""

    def __init__(self, draw: Draw, numbers: Tensor) -> None:
        self.sampling, self.temperature = draw.sampling, draw.temperature
        self.numbers = numbers  # (N, steps), on the search's device

    def __call__(self, lprobs: Tensor, t: int, rows: Tensor) -> tuple[Tensor, Tensor]:
        ids, probs = candidates(lprobs, self.sampling, self.temperature)
        token = pick(ids, probs, self.numbers[rows, t])
        return token, lprobs.gather(1, token.unsqueeze(1)).squeeze(1)  # untempered


@torch.inference_mode()
def sample_search(
    models: SearchModel | Sequence[SearchModel],
    src: Tensor,
    draw: Draw,
    lines: Sequence[int],
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
    *,
    specials: SpecialIds,
    prefix: ForcedPrefix | None = None,
) -> list[list[Hypothesis]]:
    """`draw.samples` translations per sentence of src (B, S), in the order drawn (sample
    0 first, not ranked). `lines` (B,): each sentence's number in its input, which keys
    its random streams."""
    if len(lines) != src.size(0):
        raise ValueError(f"{len(lines)} line numbers for {src.size(0)} sentences")
    if src.size(0) == 0:
        return []
    n = draw.samples
    rows = src.repeat_interleave(n, 0)  # (B*n, S): sample j of sentence i is row i*n + j
    forced = prefix.repeat(n) if prefix is not None else None
    caps = target_caps(models, rows, max_len_a, max_len_b, specials, forced)
    offsets = forced.lengths if forced is not None else torch.zeros_like(caps)
    seeds = [stream_seed(draw.seed, line, j) for line in lines for j in range(n)]
    numbers = uniforms(seeds, (caps - offsets).tolist(), offsets.tolist(), int(caps.max()))
    found = greedy_search(models, rows, max_len_a, max_len_b, use_cache, specials=specials,
                          prefix=forced, choose=_Chooser(draw, numbers.to(src.device)))
    return [found[i * n : (i + 1) * n] for i in range(src.size(0))]
