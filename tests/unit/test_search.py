"""Greedy and beam search on hand-scripted models with known answers (a tiny trained
model: tests/integration/test_search_trained.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import pytest
import torch
from builders import (
    BOS,
    EOS,
    LONG_RECOVERS,
    PAD,
    SPECIALS,
    UNK,
    VOCAB,
    A,
    B,
    C,
    D,
    Probs,
    ScriptedModel,
    table,
)

from mtkit.data.tokenizer import SpecialIds
from mtkit.decode import beam as beam_rules
from mtkit.decode import search
from mtkit.decode.beam import parent_slots, top_candidates
from mtkit.decode.search import Hypothesis, max_lengths

# the searches and length rule with the scripted vocabulary's special ids (builders.SPECIALS)
greedy_search = partial(search.greedy_search, specials=SPECIALS)
beam_search = partial(search.beam_search, specials=SPECIALS)
source_lengths = partial(search.source_lengths, specials=SPECIALS)

# --------------------------------------------------------------------------- scripted inputs


def random_probs(seed: int = 0) -> Callable[[int, tuple[int, ...]], Probs]:
    """Reproducible random distributions per (source, prefix), EOS likelier as it grows."""

    def next_probs(key: int, prefix: tuple[int, ...]) -> Probs:
        g = torch.Generator().manual_seed(hash((seed, key, prefix)) % 2**31)
        logits = 2 * torch.randn(VOCAB, generator=g)
        logits[EOS] += len(prefix) - 3
        probs = logits[EOS:].softmax(0).tolist()
        return dict(enumerate(probs, start=EOS))

    return next_probs


def sources(*ids: int, length: int = 3) -> torch.Tensor:
    """One row per id: `length` copies of it then EOS (source_lengths = length)."""
    return torch.tensor([[i] * length + [EOS] for i in ids])


def ln(p: float) -> float:
    return math.log(p)


# --------------------------------------------------------------------------- lengths


def test_max_lengths():
    src = torch.tensor([[A, EOS, PAD, PAD], [A, B, C, EOS], [BOS, A, B, EOS]])
    assert source_lengths(src).tolist() == [1, 3, 2]
    assert max_lengths([0, 5, 10], 1.2, 10, 1024).tolist() == [10, 16, 22]  # int(1.2*10+10)
    assert max_lengths([0, 5, 10], 1.2, 10, 20).tolist() == [10, 16, 19]  # max_positions - 1
    assert max_lengths([3], 0.0, 0, 20).tolist() == [1]
    # caps beyond int64 are the model's positions, not an overflow below the floor of 1
    assert max_lengths([3], 1e300, 0, 20).tolist() == [19]
    assert max_lengths([3], 1.0, 10**20, 20).tolist() == [19]
    assert max_lengths([3], 0.0, 2**63 - 1, 20).tolist() == [19]


# --------------------------------------------------------------------------- known answers

# Greedy takes A (0.5) then C: p = 0.2. B (0.4) then EOS (0.9) is better: p = 0.36.
GREEDY_TRAP = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {C: 0.4, D: 0.35, EOS: 0.25},
               (B,): {EOS: 0.9, C: 0.1}}


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_escapes_the_greedy_trap(use_cache):
    model = ScriptedModel(table(GREEDY_TRAP))
    (greedy,) = greedy_search([model], sources(A), use_cache=use_cache)
    assert greedy.tokens == [A, C]
    assert greedy.logprob == pytest.approx(ln(0.2), abs=1e-4)
    assert greedy.score == greedy.logprob
    (hyps,) = beam_search([model], sources(A), beam=2, lenpen=0.0, nbest=2, use_cache=use_cache)
    assert [h.tokens for h in hyps] == [[B], [A, C]]
    assert [h.logprob for h in hyps] == pytest.approx([ln(0.36), ln(0.2)], abs=1e-4)


@pytest.mark.parametrize("stop", ["early", "exact", "top"])
def test_search_stops_once_nothing_can_beat_the_nbest(stop):
    # After step 1, B EOS (0.36) is finished and the live A C (0.2), A D (0.175) can only
    # lose probability: with nbest=1 nothing can change, so the search stops there.
    model = ScriptedModel(table(GREEDY_TRAP))
    (hyps,) = beam_search([model], sources(A), beam=2, lenpen=0.0, nbest=1, stop=stop)
    assert hyps[0].tokens == [B]
    assert model.rows_per_step == [2, 2]
    model.rows_per_step.clear()
    beam_search([model], sources(A), beam=2, lenpen=0.0, nbest=2, stop=stop)  # A C's end
    assert model.rows_per_step == [2, 2, 2]


# LONG_RECOVERS (builders): the case where the stop rules differ.


def test_early_stop_gives_up_a_hypothesis_that_would_recover():
    model = ScriptedModel(table(LONG_RECOVERS))
    (early,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="early")
    assert early[0].tokens == [] and model.rows_per_step == [2]
    (exact,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="exact")
    assert exact[0].tokens == [A, B, C, D]
    assert exact[0].score == pytest.approx((ln(0.3) + 3 * ln(0.99)) / 5, abs=1e-4)
    for stop in search.STOP_RULES:  # without length penalty, ending now is the best
        (raw,) = beam_search([model], sources(A), beam=2, lenpen=0.0, stop=stop)
        assert raw[0].tokens == []
    with pytest.raises(ValueError, match="stop"):
        beam_search([model], sources(A), stop="never")


# Ending now (0.55) beats A B EOS (0.324) in total log-prob, but not per token.
SHORT_OR_LONG = {(): {EOS: 0.55, A: 0.45}, (A,): {B: 0.8, EOS: 0.2}, (A, B): {EOS: 0.9, C: 0.1}}


def test_length_penalty_changes_the_winner():
    model = ScriptedModel(table(SHORT_OR_LONG))
    (raw,) = beam_search([model], sources(A), beam=2, lenpen=0.0)
    assert raw[0].tokens == [] and raw[0].score == pytest.approx(ln(0.55), abs=1e-4)
    (normalised,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="exact")
    best = normalised[0]
    assert best.tokens == [A, B]
    assert best.logprob == pytest.approx(ln(0.324), abs=1e-4)
    assert best.score == pytest.approx(ln(0.324) / 3, abs=1e-4)  # 2 tokens + EOS
    (early,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="early")
    assert early == normalised  # A B stays ahead of the finished EOS at every step


def test_eos_first_gives_an_empty_hypothesis():
    model = ScriptedModel(table({(): {EOS: 0.7, A: 0.3}}))
    (greedy,) = greedy_search([model], sources(A))
    p_eos = pytest.approx(ln(0.7), abs=1e-4)
    assert greedy == Hypothesis([], p_eos, p_eos)
    (hyps,) = beam_search([model], sources(A), beam=2, nbest=2, lenpen=1.0)
    assert [h.tokens for h in hyps] == [[], [A]]
    assert hyps[1].score == pytest.approx(ln(0.3) / 2, abs=1e-4)


@pytest.mark.parametrize("use_cache", [True, False])
def test_max_length_is_respected(use_cache):
    never_ends = ScriptedModel(lambda key, prefix: {A: 0.9, B: 0.1})
    src = torch.tensor([[A, A, EOS, PAD], [B, B, B, EOS]])  # 2 and 3 real tokens
    caps = [int(0.5 * 2 + 1), int(0.5 * 3 + 1)]  # [2, 2]
    greedy = greedy_search([never_ends], src, max_len_a=0.5, max_len_b=1, use_cache=use_cache)
    for hyp, cap in zip(greedy, caps, strict=True):
        assert hyp.tokens == [A] * cap  # cut at the cap, as it is: no EOS term
        assert hyp.logprob == pytest.approx(cap * ln(0.9), abs=1e-4)
    beams = beam_search([never_ends], src, beam=3, nbest=3, lenpen=1.0, max_len_a=0.5,
                        max_len_b=1, use_cache=use_cache)
    for hyps, cap in zip(beams, caps, strict=True):
        assert len(hyps) == 3
        assert all(len(h.tokens) == cap for h in hyps)
        assert all(h.score == pytest.approx(h.logprob / cap, abs=1e-5) for h in hyps)
    # max_positions caps it too: no target longer than max_positions - 1
    short = ScriptedModel(lambda key, prefix: {A: 0.9, B: 0.1}, max_positions=4)
    assert [len(h.tokens) for h in greedy_search([short], src, use_cache=use_cache)] == [3, 3]
    for hyps in beam_search([short], src, beam=2, nbest=2, use_cache=use_cache):
        assert [len(h.tokens) for h in hyps] == [3, 3]


def test_nbest_is_sorted_and_complete():
    model = ScriptedModel(random_probs())
    for lenpen in (0.0, 1.0):
        for hyps in beam_search([model], sources(A, B, C), beam=4, nbest=4, lenpen=lenpen):
            assert len(hyps) == 4
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.tokens) for h in hyps}) == 4  # no duplicates
            for h in hyps:  # all ended by EOS here, so length = tokens + 1
                assert h.score == pytest.approx(h.logprob / (len(h.tokens) + 1) ** lenpen)
    with pytest.raises(ValueError, match="nbest"):
        beam_search([model], sources(A), beam=2, nbest=3)


def test_finished_sentences_leave_the_batch():
    # Source A ends at once; source B runs three tokens.
    def next_probs(key, prefix):
        if key == A:
            return {EOS: 0.99}
        return {B: 0.9} if len(prefix) < 3 else {EOS: 0.9}

    model = ScriptedModel(next_probs)
    greedy = greedy_search([model], sources(A, B))
    assert [h.tokens for h in greedy] == [[], [B, B, B]]
    assert model.rows_per_step == [2, 1, 1, 1]

    model.rows_per_step.clear()
    beams = beam_search([model], sources(A, B), beam=2, lenpen=0.0)
    assert [h[0].tokens for h in beams] == [[], [B, B, B]]
    rows = model.rows_per_step
    assert rows[0] == 4 and rows[-1] == 2  # both sentences, then B's beams only
    assert rows == sorted(rows, reverse=True)


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_cached_equals_uncached_scripted(lenpen):
    model = ScriptedModel(random_probs(1))
    src = sources(A, B, C, D)
    assert greedy_search([model], src) == greedy_search([model], src, use_cache=False)
    cached = beam_search([model], src, beam=3, nbest=3, lenpen=lenpen)
    assert cached == beam_search([model], src, beam=3, nbest=3, lenpen=lenpen, use_cache=False)


@pytest.mark.parametrize("stop", ["early", "exact", "top"])
def test_skipping_steps_where_nothing_ends_changes_nothing(stop, monkeypatch):
    """On the CPU a step where no candidate ends skips the n-best merge; searching with
    the merge at every step (as on a GPU) must give exactly the same hypotheses."""
    src = sources(A, B, C, D, UNK)
    for seed, lenpen in ((6, 0.0), (7, 1.0), (8, 0.6)):
        model = ScriptedModel(random_probs(seed))
        skipping = beam_search([model], src, beam=3, nbest=2, lenpen=lenpen, stop=stop)
        with monkeypatch.context() as patch:
            patch.setattr(beam_rules, "nothing_ends", lambda ends: False)
            patch.setattr(search, "compiled_beam_step", lambda: beam_rules.beam_step)
            merging = beam_search([model], src, beam=3, nbest=2, lenpen=lenpen, stop=stop)
        assert skipping == merging


@pytest.mark.parametrize("stop", ["early", "exact", "top"])
def test_the_compiled_beam_step_equals_the_python_one(stop, monkeypatch):
    """On the CPU the search runs its bookkeeping compiled by TorchScript
    (beam.compiled_beam_step): the same hypotheses, scores bit for bit, as the Python."""
    assert search.compiled_beam_step() is not beam_rules.beam_step
    src = sources(A, B, C, D, UNK)
    for seed, lenpen, nbest in ((6, 0.0, 1), (7, 1.0, 3), (8, 0.6, 2)):
        model = ScriptedModel(random_probs(seed))
        compiled = beam_search([model], src, beam=3, nbest=nbest, lenpen=lenpen, stop=stop)
        with monkeypatch.context() as patch:
            patch.setattr(search, "compiled_beam_step", lambda: beam_rules.beam_step)
            plain = beam_search([model], src, beam=3, nbest=nbest, lenpen=lenpen, stop=stop)
        assert compiled == plain


def test_beam_one_is_greedy_scripted():
    model = ScriptedModel(random_probs(2))
    src = sources(A, B, C, D, UNK)
    greedy = greedy_search([model], src)
    assert [h[0] for h in beam_search([model], src, beam=1, lenpen=0.0)] == greedy


def test_batch_equals_one_by_one_scripted():
    model = ScriptedModel(random_probs(3))
    src = torch.tensor([[A, EOS, PAD, PAD], [B, B, B, EOS], [C, C, EOS, PAD]])
    batched = beam_search([model], src, beam=3, nbest=2)
    alone = [beam_search([model], row[None], beam=3, nbest=2)[0] for row in src]
    assert batched == alone


def test_ensemble_averages_log_probs():
    first, second = ScriptedModel(random_probs(4)), ScriptedModel(random_probs(5))

    def averaged(key, prefix):  # exp(mean log p): same argmax as the ensemble's mean
        p, q = first.next_probs(key, prefix), second.next_probs(key, prefix)
        return {t: math.sqrt(p[t] * q[t]) for t in p}

    src = sources(A, B, C)
    ensemble = greedy_search([first, second], src)
    reference = greedy_search([ScriptedModel(averaged)], src)
    assert [h.tokens for h in ensemble] == [h.tokens for h in reference]
    assert greedy_search([first, first], src) == greedy_search([first], src)


@pytest.mark.parametrize("vocab", [3, 50, 20_000])  # 20,000: by blocks (topk.py)
def test_top_candidates_equal_a_top_k_over_every_beam_and_token(vocab):
    """Each beam's own top-k first, then the best of those: the same candidates, values,
    source beams and tokens as one top-k over all beam x vocab sums (fewer tokens than
    candidates too), dead beams (-inf) included."""
    g = torch.Generator().manual_seed(vocab)
    n, beam, count = 7, 4, 8
    logprob = -torch.rand(n, beam, generator=g) * 5
    logprob[2, 1:] = float("-inf")  # step 0: only the first beam is live
    lprobs = torch.randn(n, beam, vocab, generator=g).log_softmax(-1)
    value, source, token = top_candidates(logprob, lprobs, count)

    total = (logprob.unsqueeze(-1) + lprobs).view(n, -1)  # the reference: every sum
    expected_value, index = total.topk(count, dim=1)
    assert torch.equal(value, expected_value)
    live = expected_value.isfinite()  # -inf candidates tie: any of them will do
    assert torch.equal(source[live], (index // vocab)[live])
    assert torch.equal(token[live], (index % vocab)[live])


def test_parent_slots_keep_each_parents_best_continuation_in_its_row():
    """Against a plain reference: slot j gets the new beam order[j]; a parent's best
    continuation sits in the parent's own slot, the others fill the childless slots in
    rank order."""
    g = torch.Generator().manual_seed(0)
    for beam in (1, 2, 5):
        parent = torch.randint(0, beam, (200, beam), generator=g)
        parent[0] = 0  # step 0: every continuation of beam 0
        order = parent_slots(parent)
        for row, slots in zip(parent.tolist(), order.tolist(), strict=True):
            assert sorted(slots) == list(range(beam))
            firsts = {p: j for j, p in reversed(list(enumerate(row)))}  # parent -> best child
            expected = [firsts.get(s) for s in range(beam)]
            others = iter(j for j in range(beam) if firsts[row[j]] != j)
            expected = [j if j is not None else next(others) for j in expected]
            assert slots == expected


@pytest.mark.parametrize("done", [[0, 0, 0], [1, 0, 0, 1, 0, 0], [1, 1, 0], [0, 0, 1],
                                  [1, 1, 1], [0, 1, 0, 1, 0, 1, 1, 0]])
def test_kept_in_place_moves_only_sentences_from_behind_the_kept(done):
    done = torch.tensor(done, dtype=torch.bool)
    order = search._kept_in_place(done).tolist()
    kept = [i for i, d in enumerate(done.tolist()) if not d]
    assert sorted(order) == kept
    assert all(order[i] == i for i in kept if i < len(kept))  # those within stay put


# --------------------------------------------------------------------------- length groups


@pytest.mark.parametrize("lengths", [[5, 5, 6, 5], [1, 80, 2, 79, 40, 3, 41, 1, 80],
                                     list(range(1, 65)), [7], []])
def test_length_groups_cover_every_sentence_once_within_the_padding_slack(lengths):
    groups = search.length_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        sizes = [lengths[i] for i in group]
        padding = len(sizes) * max(sizes) - sum(sizes)
        # a group of one has no padding; a larger one stays within the slack
        assert len(group) == 1 or padding <= (search.PAD_SLACK_TOKENS
                                              + search.PAD_SLACK_SHARE * sum(sizes))


def test_length_groups_keep_a_batch_of_similar_lengths_whole_and_in_order():
    assert search.length_groups([30, 31, 29, 32]) == [[0, 1, 2, 3]]


def test_length_groups_split_mixed_lengths_shortest_first(monkeypatch):
    monkeypatch.setattr(search, "PAD_SLACK_TOKENS", 0)
    assert search.length_groups([80, 2, 79, 3, 2]) == [[1, 4], [3], [2, 0]]


@pytest.mark.parametrize("specials", [
    SpecialIds(pad=9, unk=1, start=9, eos=0),  # the decoder starts from pad (Marian's)
    SpecialIds(pad=1, unk=3, start=2, eos=2),  # it starts from eos (M2M100's, NLLB's)
])
@pytest.mark.parametrize("use_cache", [True, False])
def test_the_searches_take_the_special_ids_of_the_model(specials: SpecialIds,
                                                        use_cache: bool) -> None:
    """Rows start from the model's start token, end on its eos, and never produce its pad,
    the likeliest token here; eos stays allowed when it is also the start token."""
    pad, eos = specials.pad, specials.eos
    model = ScriptedModel(table({(): {pad: 0.6, A: 0.3, eos: 0.1}, (A,): {pad: 0.5, eos: 0.4}},
                                default={eos: 1.0}), specials=specials)
    src = torch.tensor([[A, B, eos], [C, eos, pad]])
    greedy = search.greedy_search([model], src, use_cache=use_cache, specials=specials)
    assert [h.tokens for h in greedy] == [[A], [A]]
    beams = search.beam_search([model], src, beam=2, nbest=2, lenpen=0.0, use_cache=use_cache,
                               specials=specials)
    assert [[h.tokens for h in hyps] for hyps in beams] == [[[A], []]] * 2
    assert search.source_lengths(src, specials).tolist() == [2, 1]


@pytest.mark.parametrize("stop", ["early", "exact", "top"])
def test_one_models_fused_step_equals_the_step_by_step_search(stop, monkeypatch):
    """One mtkit model on the CPU steps through beam.cached_beam_step (log-probs, the
    bookkeeping and the cache's reorder in one compiled call) until a sentence is done:
    the same hypotheses, bit for bit, as the search that reorders the cache on its own."""
    from mtkit.config import ModelConfig
    from mtkit.model.transformer import Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(enc_layers=1, dec_layers=2, d_model=16, heads=2, ffn_dim=32,
                      dropout=0.0, max_positions=64)
    model = Transformer(cfg, VOCAB, VOCAB, pad_id=PAD).eval()
    src = torch.tensor([[A, B, EOS, PAD, PAD], [C, C, D, B, EOS], [B, EOS, PAD, PAD, PAD],
                        [D, A, C, EOS, PAD]])
    settings = dict(beam=3, nbest=2, lenpen=0.6, max_len_a=1.0, max_len_b=3, stop=stop)
    fused = beam_search(model, src, **settings)
    with monkeypatch.context() as patch:
        patch.setattr(search._Ensemble, "one_cache", lambda self: None)
        stepwise = beam_search(model, src, **settings)
    assert fused == stepwise
    assert len({len(h[0].tokens) for h in fused}) > 1  # sentences ended at different steps
