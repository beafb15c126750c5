"""Greedy and beam search: hand-scripted models with known answers, then a tiny real one."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from mtkit.config import ModelConfig
from mtkit.model import Transformer
from mtkit.search import (
    Hypothesis,
    beam_search,
    greedy_search,
    max_lengths,
    source_lengths,
)

PAD, UNK, BOS, EOS = 0, 1, 2, 3
A, B, C, D = 4, 5, 6, 7
VOCAB = 10

Probs = dict[int, float]


# --------------------------------------------------------------------------- scripted model


class ScriptedCache:
    """Remembers each row's source id and its tokens so far; reorder keeps them aligned."""

    def __init__(self, keys: torch.Tensor, max_len: int, beam: int) -> None:
        self.sentence_keys = keys  # (n,) source id per sentence
        self.keys = keys.repeat_interleave(beam)  # (B,) source id per row
        self.history = keys.new_zeros((self.keys.numel(), 0))  # (B, step) tokens so far
        self.max_len = max_len
        self.step = 0

    def reorder(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        beam = rows.numel() // (self.keys.numel() if sentences is None else sentences.numel())
        if sentences is None:  # the search promises that rows stay within their sentence
            assert torch.equal(self.keys[rows], self.keys)
        else:  # and that new row i comes from sentence sentences[i // beam]
            self.sentence_keys = self.sentence_keys[sentences]
            assert torch.equal(self.keys[rows], self.sentence_keys.repeat_interleave(beam))
        self.keys, self.history = self.keys[rows], self.history[rows]


class ScriptedModel:
    """A stand-in with the model interface whose next-token probabilities are set by hand.

    next_probs(source_id, prefix) -> {token: probability}: source_id is the first token of
    the source row, prefix the tokens after BOS. Tokens not listed get probability 1e-6.
    """

    def __init__(self, next_probs: Callable[[int, tuple[int, ...]], Probs],
                 max_positions: int = 64) -> None:
        self.max_positions = max_positions
        self.next_probs = next_probs
        self.rows_per_step: list[int] = []  # rows in each decode_step call

    def encode(self, src: torch.Tensor):
        return src.float().unsqueeze(-1), src == PAD  # memory (B, S, 1) carries the ids

    def init_cache(self, memory, src_pad_mask, max_len: int, beam: int) -> ScriptedCache:
        assert max_len <= self.max_positions
        return ScriptedCache(memory[:, 0, 0].long(), max_len, beam)

    def decode_step(self, prev_tokens: torch.Tensor, cache: ScriptedCache) -> torch.Tensor:
        assert cache.step < cache.max_len, "decode_step beyond the cache's max_len"
        self.rows_per_step.append(prev_tokens.numel())
        cache.history = torch.cat([cache.history, prev_tokens[:, None]], dim=1)
        cache.step += 1
        return self._logits(cache.keys, cache.history)

    def decode(self, tgt_in: torch.Tensor, memory, src_pad_mask) -> torch.Tensor:
        assert tgt_in.size(1) <= self.max_positions
        keys = memory[:, 0, 0].long()
        steps = [self._logits(keys, tgt_in[:, : i + 1]) for i in range(tgt_in.size(1))]
        return torch.stack(steps, dim=1)  # (B, T, V)

    def _logits(self, keys: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        probs = torch.full((keys.numel(), VOCAB), 1e-6)
        for row, (key, seq) in enumerate(zip(keys.tolist(), history.tolist(), strict=True)):
            assert seq[0] == BOS
            for token, p in self.next_probs(key, tuple(seq[1:])).items():
                probs[row, token] = p
        return probs.log()


def table(script: dict[tuple[int, ...], Probs], default: Probs | None = None):
    """next_probs from a {prefix: probs} table; other prefixes get `default` (EOS)."""
    default = default or {EOS: 1.0}
    return lambda key, prefix: script.get(prefix, default)


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


@pytest.mark.parametrize("stop", ["early", "exact"])
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


# Ending now scores ln 0.7 = -0.36; A (0.3) has -1.2 / 2 = -0.6 if it ended next, but
# with near-certain tokens after it A B C D EOS scores (ln 0.3 + 3 ln 0.99) / 5 = -0.25.
LONG_RECOVERS = {(): {EOS: 0.7, A: 0.3}, (A,): {B: 0.99, EOS: 0.01},
                 (A, B): {C: 0.99, EOS: 0.01}, (A, B, C): {D: 0.99, EOS: 0.01}}


def test_early_stop_gives_up_a_hypothesis_that_would_recover():
    model = ScriptedModel(table(LONG_RECOVERS))
    (early,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="early")
    assert early[0].tokens == [] and model.rows_per_step == [2]
    (exact,) = beam_search([model], sources(A), beam=2, lenpen=1.0, stop="exact")
    assert exact[0].tokens == [A, B, C, D]
    assert exact[0].score == pytest.approx((ln(0.3) + 3 * ln(0.99)) / 5, abs=1e-4)
    for stop in ("early", "exact"):  # without length penalty, ending now is the best
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


# --------------------------------------------------------------------------- a real model


def train_copy_model(seed: int = 0) -> tuple[Transformer, torch.Tensor]:
    """A tiny Transformer fitted for 100 Adam steps to copy a few random sequences."""
    torch.manual_seed(seed)
    cfg = ModelConfig(enc_layers=1, dec_layers=1, d_model=32, heads=2, ffn_dim=64,
                      dropout=0.0, max_positions=32)
    vocab = 12
    model = Transformer(cfg, vocab, vocab, pad_id=PAD)
    lengths = torch.randint(2, 7, (16,))
    src = torch.full((16, 8), PAD)
    tgt_in = torch.full((16, 8), PAD)
    tgt_out = torch.full((16, 8), PAD)
    for row, n in enumerate(lengths.tolist()):
        seq = torch.randint(4, vocab, (n,))
        src[row, :n], src[row, n] = seq, EOS
        tgt_in[row, 0], tgt_in[row, 1 : n + 1] = BOS, seq
        tgt_out[row, :n], tgt_out[row, n] = seq, EOS
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(100):
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, vocab), tgt_out.view(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    # Test on half the training sources (copied well) and unseen ones (less sure).
    unseen = torch.full((4, 8), PAD)
    for row, n in enumerate([2, 7, 4, 5]):
        unseen[row, :n], unseen[row, n] = torch.randint(4, vocab, (n,)), EOS
    return model, torch.cat([src[:8], unseen])


@pytest.fixture(scope="module")
def copy_model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: extra threads only contend on a shared CPU
    try:
        return train_copy_model()
    finally:
        torch.set_num_threads(threads)


def assert_same(got: list[Hypothesis], expected: list[Hypothesis], atol: float = 1e-4):
    assert [h.tokens for h in got] == [h.tokens for h in expected]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=atol)
    assert [h.logprob for h in got] == pytest.approx([h.logprob for h in expected], abs=atol)


def test_copy_model_learned_to_copy(copy_model):
    model, src = copy_model
    copied = sum(h.tokens == [t for t in row.tolist() if t > EOS]
                 for h, row in zip(greedy_search([model], src), src, strict=True))
    assert copied >= 6  # not degenerate: most of the 8 training sources come back


def test_cached_equals_uncached_real(copy_model):
    model, src = copy_model
    assert_same(greedy_search([model], src), greedy_search([model], src, use_cache=False))
    cached = beam_search([model], src, beam=4, nbest=4)
    uncached = beam_search([model], src, beam=4, nbest=4, use_cache=False)
    caps = max_lengths(source_lengths(src), 1.2, 10, model.cfg.max_positions).tolist()
    for got, expected, cap in zip(cached, uncached, caps, strict=True):
        assert_same(got, expected)
        assert len(got) == 4 and all(len(h.tokens) <= cap for h in got)


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_beam_one_is_greedy_real(copy_model, lenpen):
    # Exact for lenpen 0. With lenpen > 0 beam 1 may keep searching after greedy's EOS if a
    # longer ending could score better per token; this confident model never lets it.
    model, src = copy_model
    greedy = greedy_search([model], src)
    beam = [h[0] for h in beam_search([model], src, beam=1, lenpen=lenpen)]
    assert [h.tokens for h in beam] == [h.tokens for h in greedy]
    assert [h.logprob for h in beam] == pytest.approx([h.logprob for h in greedy], abs=1e-5)


def test_smaller_nbest_is_a_prefix_of_larger(copy_model):
    # Stopping once the n-best cannot change must not change the n-best.
    model, src = copy_model
    full = beam_search([model], src, beam=5, nbest=5, stop="exact")
    for nbest in (1, 2):
        for got, expected in zip(beam_search([model], src, beam=5, nbest=nbest, stop="exact"),
                                 full, strict=True):
            assert_same(got, expected[:nbest])


def test_early_stop_is_exact_without_length_penalty(copy_model):
    # With lenpen 0 a step's best candidate ending with EOS beats every live beam's future.
    model, src = copy_model
    for beam in (2, 5):
        early = beam_search([model], src, beam=beam, lenpen=0.0, stop="early")
        for got, expected in zip(early, beam_search([model], src, beam=beam, lenpen=0.0,
                                                    stop="exact"), strict=True):
            assert_same(got, expected)


def test_beam_model_score_is_never_worse_than_greedy(copy_model):
    model, src = copy_model
    greedy = greedy_search([model], src)
    beam = [h[0] for h in beam_search([model], src, beam=5, lenpen=0.0)]
    for b, g in zip(beam, greedy, strict=True):
        assert b.logprob >= g.logprob - 1e-5


def test_batch_equals_one_by_one_real(copy_model):
    model, src = copy_model
    alone = [row[None, : int((row != PAD).sum())] for row in src]  # no padding at all
    assert_same(greedy_search([model], src), [greedy_search([model], s)[0] for s in alone])
    batched = beam_search([model], src, beam=3, nbest=2)
    for got, one in zip(batched, alone, strict=True):
        assert_same(got, beam_search([model], one, beam=3, nbest=2)[0])


def test_ensemble_with_itself_is_the_model_real(copy_model):
    model, src = copy_model
    assert_same(greedy_search([model, model], src), greedy_search([model], src), atol=1e-5)
    pair = beam_search([model, model], src, beam=3, nbest=3)
    for got, expected in zip(pair, beam_search([model], src, beam=3, nbest=3), strict=True):
        assert_same(got, expected, atol=1e-5)
