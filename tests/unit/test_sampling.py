"""Sampling on hand-scripted models: the draws follow the scripted probabilities (with
temperature, top-k and top-p), a line's samples depend on the seed and its number alone,
top-k 1 is greedy search, and pad and the start token are never drawn."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from builders import BOS, EOS, PAD, SPECIALS, VOCAB, A, B, C, D, ScriptedModel, table
from test_search import random_probs, sources

from mtkit.config import Sampling
from mtkit.decode import sampling, search
from mtkit.decode.prefix import ForcedPrefix
from mtkit.decode.sampling import Draw, candidates, pick

greedy_search = partial(search.greedy_search, specials=SPECIALS)
sample_search = partial(sampling.sample_search, specials=SPECIALS)

FIRST = {A: 0.5, B: 0.3, C: 0.2}  # the first token; EOS after it
CHI2_BOUND = 35.0  # above the 1 - 1e-6 quantile of chi-square with up to 4 degrees of freedom


def draw(kind: str, temperature: float = 1.0, seed: int = 0, samples: int = 1) -> Draw:
    return Draw(Sampling.parse(kind), temperature, seed, samples)


def expected_first(kind: str, temperature: float) -> list[float]:
    """The distribution of the first token as sampling should draw it, by a plain
    reference: the scripted probabilities (1e-6 where unlisted, 0 for pad and the start
    token), tempered, cut, renormalised."""
    probs = [FIRST.get(t, 1e-6) if t not in (PAD, BOS) else 0.0 for t in range(VOCAB)]
    probs = [p ** (1 / temperature) for p in probs]
    probs = [p / sum(probs) for p in probs]
    order = sorted(range(VOCAB), key=lambda t: -probs[t])
    rule = Sampling.parse(kind)
    if rule.kind == "topk":
        keep = set(order[: rule.k])
    elif rule.kind == "topp":
        keep, mass = set(), 0.0
        for token in order:
            if mass < rule.p:
                keep.add(token)
            mass += probs[token]
    else:
        keep = set(order)
    kept = [p if t in keep else 0.0 for t, p in enumerate(probs)]
    return [p / sum(kept) for p in kept]


def chi_square(counts: list[int], probs: list[float]) -> float:
    """Pearson's statistic, tokens expected fewer than 5 times pooled into one class; a
    token drawn that should have probability 0 makes it infinite."""
    total = sum(counts)
    if any(c and not p for c, p in zip(counts, probs)):
        return math.inf
    big = [t for t, p in enumerate(probs) if p * total >= 5]
    small = [t for t in range(len(probs)) if t not in big and probs[t] > 0]
    classes = [([t], probs[t]) for t in big] + [(small, sum(probs[t] for t in small))]
    stat = 0.0
    for tokens, p in classes:
        if p * total > 0:
            observed = sum(counts[t] for t in tokens)
            stat += (observed - p * total) ** 2 / (p * total)
    return stat


@pytest.mark.parametrize("kind, temperature", [("full", 1.0), ("full", 0.5), ("full", 2.0),
                                               ("topk:2", 1.0), ("topp:0.8", 0.5)])
def test_samples_follow_the_scripted_distribution(kind, temperature):
    """2000 samples of one line: their first tokens pass a chi-square test against the
    tempered and cut distribution (a 1e-6 false alarm rate), and fail it against the
    distribution a sampler that ignored the temperature or the cut would draw from."""
    model = ScriptedModel(table({(): FIRST}))
    n = 2000
    (samples,) = sample_search([model], sources(A), draw(kind, temperature, seed=3, samples=n),
                               [0])
    counts = [0] * VOCAB
    for hyp in samples:
        counts[hyp.tokens[0]] += 1
    assert chi_square(counts, expected_first(kind, temperature)) < CHI2_BOUND
    wrong = expected_first("full", 1.0)  # untempered and uncut
    if (kind, temperature) != ("full", 1.0):
        assert chi_square(counts, wrong) > CHI2_BOUND
    # the score is the untempered log-probability of what was drawn, EOS included
    ended = [hyp for hyp in samples if len(hyp.tokens) == 1][:50]  # then EOS (most)
    assert ended
    for hyp in ended:
        p = FIRST[hyp.tokens[0]] / (1 + 7e-6)  # the script's row, normalised
        assert hyp.logprob == pytest.approx(math.log(p) + math.log(1 / (1 + 9e-6)), abs=1e-4)
        assert hyp.score == hyp.logprob


def test_top_p_keeps_exactly_the_smallest_set_of_likeliest_tokens():
    g = torch.Generator().manual_seed(0)
    lprobs = (3 * torch.randn(300, 40, generator=g)).log_softmax(-1)
    for p in (0.05, 0.5, 0.9, 0.999, 1.0):
        ids, probs = candidates(lprobs, Sampling("topp", p=p), 1.0)
        full = lprobs.double().softmax(-1)  # as exact as candidates' own
        for row in range(lprobs.size(0)):
            kept = ids[row][probs[row] > 0].tolist()
            mass = sorted(full[row, kept].tolist(), reverse=True)
            cut = [t for t in range(40) if t not in kept]
            assert sum(mass) >= p - 1e-9 or not cut  # enough mass (p = 1 may keep all)
            assert sum(mass[:-1]) < p  # and none to spare
            if cut:
                assert min(mass) >= full[row, cut].max().item()  # the likeliest ones


def test_top_k_one_is_greedy_search():
    model = ScriptedModel(random_probs(21))
    src = sources(A, B, C, D)
    one = sample_search([model], src, draw("topk:1", seed=9), [0, 1, 2, 3])
    assert [hyps[0] for hyps in one] == greedy_search([model], src)
    prefix = ForcedPrefix.of([[B], [], [D, D], [A]], PAD)
    one = sample_search([model], src, draw("topk:1", seed=9), [0, 1, 2, 3], prefix=prefix)
    assert [hyps[0] for hyps in one] == greedy_search([model], src, prefix=prefix)


def test_the_same_seed_gives_the_same_samples_whatever_the_batch():
    """A line's samples depend on the seed and its number, not on the batch around it."""
    model = ScriptedModel(random_probs(22))
    ids, lines = [A, B, C, D, A], [7, 8, 9, 10, 11]
    rule = draw("topp:0.9", temperature=1.3, seed=5, samples=3)
    batched = sample_search([model], sources(*ids), rule, lines)
    alone = [sample_search([model], sources(i), rule, [n])[0] for i, n in zip(ids, lines)]
    assert batched == alone
    backwards = sample_search([model], sources(*ids[::-1]), rule, lines[::-1])
    assert backwards == batched[::-1]
    assert batched[0] != batched[4]  # the same source on another line: other samples
    # sample 0 of three is the one sample of one
    single = sample_search([model], sources(*ids), draw("topp:0.9", 1.3, 5, 1), lines)
    assert [hyps[0] for hyps in single] == [hyps[0] for hyps in batched]


def test_different_seeds_give_different_samples():
    model = ScriptedModel(random_probs(23))
    src, lines = sources(A, B, C, D), [0, 1, 2, 3]
    first = sample_search([model], src, draw("full", seed=0, samples=2), lines)
    again = sample_search([model], src, draw("full", seed=0, samples=2), lines)
    other = sample_search([model], src, draw("full", seed=1, samples=2), lines)
    assert first == again
    assert first != other


@pytest.mark.parametrize("kind", ["full", "topp:1", "topk:10"])
def test_pad_and_the_start_token_are_never_drawn(kind):
    """Even as the likeliest tokens, at a temperature that flattens the rest."""
    model = ScriptedModel(table({(): {PAD: 0.5, BOS: 0.3, A: 0.1, EOS: 0.1}},
                                default={PAD: 0.6, BOS: 0.3, EOS: 0.1}))
    (samples,) = sample_search([model], sources(A), draw(kind, temperature=5.0, samples=500),
                               [0])
    drawn = {t for hyp in samples for t in hyp.tokens}
    assert PAD not in drawn and BOS not in drawn
    assert len(drawn) > 3  # the flattened rest was drawn


def test_samples_keep_a_forced_prefix_and_the_cap_after_it():
    never_ends = ScriptedModel(lambda key, prefix: {A: 0.5, B: 0.5})
    prefix = ForcedPrefix.of([[C, D, C]], PAD)
    (samples,) = sample_search([never_ends], sources(A, length=2), draw("full", samples=20),
                               [0], max_len_a=0.0, max_len_b=3, prefix=prefix)
    assert all(h.tokens[:3] == [C, D, C] and len(h.tokens) == 6 for h in samples)
    assert len({tuple(h.tokens) for h in samples}) > 1


@pytest.mark.parametrize("kind", ["full", "topk:3", "topp:0.9"])
def test_a_tiny_temperature_draws_the_argmax_and_a_huge_one_stays_a_distribution(kind):
    """(lprobs / 1e-300 overflowed every token to -inf: a NaN distribution.) A vanishing
    temperature leaves all the mass on each row's likeliest token; a huge one flattens
    the candidates, never leaving pad and the start token with any."""
    g = torch.Generator().manual_seed(1)
    lprobs = (3 * torch.randn(50, 40, generator=g)).log_softmax(-1)
    lprobs[:, :2] = -math.inf  # never emitted, as pad and the start token
    for temperature in (1e-300, 1e-30):
        ids, probs = candidates(lprobs, Sampling.parse(kind), temperature)
        best = ids.gather(1, probs.argmax(-1, keepdim=True)).squeeze(1)
        assert torch.equal(best, lprobs.argmax(-1)) and torch.all(probs.max(-1).values == 1)
        assert torch.equal(pick(ids, probs, torch.rand(50, dtype=torch.float64)), best)
    ids, probs = candidates(lprobs, Sampling.parse(kind), 1e300)
    assert torch.isfinite(probs).all() and torch.all(probs[ids < 2] == 0)
    if kind != "topp:0.9":  # (a topp cut leaves less than all the mass)
        assert torch.allclose(probs.sum(-1), torch.ones(50, dtype=torch.float64))
