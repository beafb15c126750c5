"""Greedy and beam search on a tiny Transformer trained in-process to copy its input: the
properties the scripted models of tests/unit/test_search.py pin, on a real model."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from builders import BOS, EOS, PAD, SPECIALS

from mtkit.config import ModelConfig
from mtkit.decode import search
from mtkit.decode.search import Hypothesis, max_lengths
from mtkit.model.transformer import Transformer

# the searches and length rule with the scripted vocabulary's special ids (builders.SPECIALS)
greedy_search = partial(search.greedy_search, specials=SPECIALS)
beam_search = partial(search.beam_search, specials=SPECIALS)
source_lengths = partial(search.source_lengths, specials=SPECIALS)

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


def test_early_and_top_stops_are_exact_without_length_penalty(copy_model):
    # With lenpen 0 a step's best candidate ending with EOS beats every live beam's future,
    # and a finished hypothesis no live beam outscores in log-probability cannot be beaten.
    model, src = copy_model
    for beam in (2, 5):
        exact = beam_search([model], src, beam=beam, lenpen=0.0, stop="exact")
        for stop in ("early", "top"):
            got = beam_search([model], src, beam=beam, lenpen=0.0, stop=stop)
            for one, expected in zip(got, exact, strict=True):
                assert_same(one, expected)


def test_top_stop_does_no_more_steps_than_exact_and_keeps_a_full_nbest(copy_model):
    """exact ends a sentence once no live beam could reach the n-best's worst score; for
    lenpen >= 0 that implies a finished hypothesis with at least every live beam's
    log-probability, so top never searches longer. Its n-best is full and sorted."""
    model, src = copy_model
    rows = {}
    for stop in ("top", "exact"):
        counted = []
        step = model.decode_step

        def counting(tokens, cache, step=step, counted=counted):
            counted.append(tokens.numel())
            return step(tokens, cache)

        model.decode_step = counting
        try:
            found = beam_search([model], src, beam=4, nbest=3, lenpen=1.0, stop=stop)
        finally:
            del model.decode_step
        rows[stop] = sum(counted)
        for hyps in found:
            assert len(hyps) == 3
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert rows["top"] <= rows["exact"]


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


def test_encoding_by_length_groups_changes_no_translation(copy_model, monkeypatch):
    """A batch of mixed lengths, encoded in length groups (no padding slack at all, so the
    copy model's sources split), gives the memory and the hypotheses of one padded batch."""
    from mtkit.decode import search

    model, src = copy_model
    whole_memory, whole_mask = model.encode(src)
    whole_greedy = greedy_search([model], src)
    whole_beam = beam_search([model], src, beam=3, nbest=2)
    monkeypatch.setattr(search, "PAD_SLACK_TOKENS", 0)
    monkeypatch.setattr(search, "PAD_SLACK_SHARE", 0.0)
    assert len(search.length_groups(src.ne(PAD).sum(1).tolist())) > 2
    memory, mask = search.encode_by_length(model, src, PAD)
    assert torch.equal(mask, whole_mask)
    keep = ~mask
    torch.testing.assert_close(memory[keep], whole_memory[keep], atol=1e-5, rtol=1e-5)
    assert_same(greedy_search([model], src), whole_greedy)
    for got, expected in zip(beam_search([model], src, beam=3, nbest=2), whole_beam,
                             strict=True):
        assert_same(got, expected)
