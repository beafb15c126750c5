"""A forced target prefix in greedy and beam search, on hand-scripted models: the output
starts with it, the model's own start changes nothing, the score counts it, the cap
counts after it, and the beam does not fill with copies of it."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from builders import EOS, PAD, SPECIALS, A, B, C, D, ScriptedModel, table
from test_search import GREEDY_TRAP, random_probs, sources

from mtkit.decode import search
from mtkit.decode.prefix import ForcedPrefix

greedy_search = partial(search.greedy_search, specials=SPECIALS)
beam_search = partial(search.beam_search, specials=SPECIALS)


def forced(*prefixes: list[int]) -> ForcedPrefix | None:
    return ForcedPrefix.of(list(prefixes), PAD)


def test_no_prefix_is_no_forcing():
    assert forced([], []) is None and ForcedPrefix.of(None, PAD) is None
    prefix = forced([A, B], [], [C])
    assert prefix.width == 2 and prefix.lengths.tolist() == [2, 0, 1]
    assert prefix.tokens.tolist() == [[A, B], [PAD, PAD], [C, PAD]]
    assert prefix.repeat(2).lengths.tolist() == [2, 2, 0, 0, 1, 1]


@pytest.mark.parametrize("use_cache", [True, False])
def test_the_output_starts_with_the_prefix_and_its_score_counts_it(use_cache):
    """GREEDY_TRAP: the model would start with A; forced to B it goes on with EOS, and the
    log-probability holds the forced B's own (ln 0.4), not 0."""
    model = ScriptedModel(table(GREEDY_TRAP))
    (greedy,) = greedy_search([model], sources(A), use_cache=use_cache, prefix=forced([B]))
    assert greedy.tokens == [B]
    assert greedy.logprob == pytest.approx(math.log(0.4) + math.log(0.9), abs=1e-4)
    (beams,) = beam_search([model], sources(A), beam=2, nbest=2, lenpen=0.0,
                           use_cache=use_cache, prefix=forced([A]))
    assert [h.tokens for h in beams] == [[A, C], [A, D]]  # not B, the beam's best otherwise
    assert [h.logprob for h in beams] == pytest.approx([math.log(0.5 * 0.4),
                                                        math.log(0.5 * 0.35)], abs=1e-4)


def test_a_prefix_the_model_would_choose_changes_nothing():
    """Forcing the start of greedy's own output gives greedy's output and score."""
    model = ScriptedModel(random_probs(11))
    src = sources(A, B, C, D)
    free = greedy_search([model], src)
    assert all(len(h.tokens) >= 2 for h in free), "the script should give longer outputs"
    for length in (1, 2):
        prefix = forced(*[h.tokens[:length] for h in free])
        assert greedy_search([model], src, prefix=prefix) == free
        (beam_one,) = zip(*beam_search([model], src, beam=1, lenpen=0.0, prefix=prefix))
        assert list(beam_one) == free


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_beam_with_a_prefix_keeps_one_live_beam_then_fills(lenpen):
    """During the forced steps one beam is live; afterwards the n-best are distinct
    hypotheses that all start with the prefix (not copies of the forced beam)."""
    model = ScriptedModel(random_probs(12))
    src = sources(A, B, C)
    prefixes = [[B, C], [D], [C, C, B]]
    found = beam_search([model], src, beam=4, nbest=4, lenpen=lenpen, prefix=forced(*prefixes))
    for hyps, prefix in zip(found, prefixes, strict=True):
        assert len(hyps) == 4
        assert len({tuple(h.tokens) for h in hyps}) == 4
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("use_cache", [True, False])
def test_the_cap_counts_the_tokens_after_the_prefix(use_cache):
    never_ends = ScriptedModel(lambda key, prefix: {A: 0.9, B: 0.1})
    src = torch.tensor([[A, A, EOS, PAD], [B, B, B, EOS]])  # caps int(0.5 * len + 1): 2, 2
    prefix = forced([B, B, B], [])
    greedy = greedy_search([never_ends], src, max_len_a=0.5, max_len_b=1,
                           use_cache=use_cache, prefix=prefix)
    assert [h.tokens for h in greedy] == [[B, B, B, A, A], [A, A]]
    beams = beam_search([never_ends], src, beam=2, nbest=2, max_len_a=0.5, max_len_b=1,
                        use_cache=use_cache, prefix=prefix)
    assert [len(h.tokens) for hyps in beams for h in hyps] == [5, 5, 2, 2]
    # and never past max_positions - 1, prefix included
    short = ScriptedModel(lambda key, prefix: {A: 0.9, B: 0.1}, max_positions=5)
    capped = greedy_search([short], src, max_len_a=1.0, max_len_b=5, prefix=prefix)
    assert [h.tokens for h in capped] == [[B, B, B, A], [A, A, A, A]]


def test_a_batch_with_prefixes_equals_its_sentences_one_by_one():
    model = ScriptedModel(random_probs(13))
    src = torch.tensor([[A, EOS, PAD, PAD], [B, B, B, EOS], [C, C, EOS, PAD]])
    prefixes = [[D, A], [], [B]]
    batched = beam_search([model], src, beam=3, nbest=2, prefix=forced(*prefixes))
    alone = [beam_search([model], row[None], beam=3, nbest=2, prefix=forced(p))[0]
             for row, p in zip(src, prefixes, strict=True)]
    assert batched == alone
    greedy = greedy_search([model], src, prefix=forced(*prefixes))
    assert greedy == [greedy_search([model], row[None], prefix=forced(p))[0]
                      for row, p in zip(src, prefixes, strict=True)]


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_cached_equals_uncached_with_a_prefix(lenpen):
    model = ScriptedModel(random_probs(14))
    src = sources(A, B, C, D)
    prefix = forced([C], [], [A, B, D], [D, D])
    assert (greedy_search([model], src, prefix=prefix)
            == greedy_search([model], src, use_cache=False, prefix=prefix))
    assert (beam_search([model], src, beam=3, nbest=3, lenpen=lenpen, prefix=prefix)
            == beam_search([model], src, beam=3, nbest=3, lenpen=lenpen, use_cache=False,
                           prefix=prefix))
