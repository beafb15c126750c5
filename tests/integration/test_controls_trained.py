"""A forced prefix and sampling on the tiny copy model of test_search_trained.py: the
properties the scripted models of tests/unit/test_prefix.py and test_sampling.py pin, on a
real model (whose batches round differently from its sentences alone)."""

from __future__ import annotations

from functools import partial

from builders import PAD, SPECIALS
from test_search_trained import assert_same, copy_model  # noqa: F401 - the fixture

from mtkit.config import Sampling
from mtkit.decode import sampling, search
from mtkit.decode.prefix import ForcedPrefix
from mtkit.decode.sampling import Draw

greedy_search = partial(search.greedy_search, specials=SPECIALS)
beam_search = partial(search.beam_search, specials=SPECIALS)
sample_search = partial(sampling.sample_search, specials=SPECIALS)


def test_the_start_of_greedys_own_output_changes_nothing_real(copy_model):  # noqa: F811
    """(For the outputs that ended with EOS: one cut at its cap goes on, as a prefix's
    tokens come on top of the cap.)"""
    model, src = copy_model
    free = greedy_search([model], src)
    caps = search.target_caps([model], src, 1.2, 10, SPECIALS).tolist()
    ended = [row for row, (h, cap) in enumerate(zip(free, caps)) if len(h.tokens) < cap]
    assert len(ended) >= 8
    for length in (1, 3):
        prefix = ForcedPrefix.of([h.tokens[:length] for h in free], PAD)
        forced = greedy_search([model], src, prefix=prefix)
        assert_same([forced[row] for row in ended], [free[row] for row in ended], atol=1e-5)


def test_a_prefix_is_kept_by_beam_and_batch_equals_one_by_one_real(copy_model):  # noqa: F811
    model, src = copy_model
    prefixes = [[5 + i % 6] * (i % 3) for i in range(src.size(0))]  # none, one, two tokens
    found = beam_search([model], src, beam=3, nbest=3, prefix=ForcedPrefix.of(prefixes, PAD))
    for row, (hyps, prefix) in enumerate(zip(found, prefixes, strict=True)):
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        one = src[row, None, : int((src[row] != PAD).sum())]
        alone = beam_search([model], one, beam=3, nbest=3, prefix=ForcedPrefix.of([prefix], PAD))
        assert_same(hyps, alone[0])


def test_samples_do_not_depend_on_the_batch_real(copy_model):  # noqa: F811
    model, src = copy_model
    draw = Draw(Sampling.parse("topp:0.95"), temperature=2.0, seed=1, samples=2)
    lines = list(range(100, 100 + src.size(0)))
    batched = sample_search([model], src, draw, lines)
    for row, hyps in enumerate(batched):
        one = src[row, None, : int((src[row] != PAD).sum())]
        assert_same(hyps, sample_search([model], one, draw, [lines[row]])[0])
    greedy = greedy_search([model], src)
    top1 = sample_search([model], src, Draw(Sampling.parse("topk:1")), lines)
    assert_same([hyps[0] for hyps in top1], greedy, atol=1e-6)
    assert batched != sample_search([model], src, Draw(draw.sampling, 2.0, 2, 2), lines)
