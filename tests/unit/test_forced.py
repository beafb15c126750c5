"""The teacher-forced pass (decode/forced.py): its log-probabilities are the search's, its
attention rows are distributions over the real source tokens, an ensemble averages."""

from __future__ import annotations

import pytest
import torch
from builders import SPECIALS

from mtkit.config import ModelConfig
from mtkit.decode.forced import forced_pass
from mtkit.decode.search import beam_search, greedy_search
from mtkit.model.transformer import Transformer, decoder_layer

VOCAB = 29
TINY = ModelConfig(enc_layers=2, dec_layers=3, d_model=16, heads=2, ffn_dim=32,
                   dropout=0.0, max_positions=64)
SOURCES = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19]]


def model(seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TINY, VOCAB, VOCAB, pad_id=SPECIALS.pad).eval()


def padded_sources() -> torch.Tensor:
    width = max(len(s) for s in SOURCES) + 1
    out = torch.full((len(SOURCES), width), SPECIALS.pad)
    for row, ids in enumerate(SOURCES):
        out[row, : len(ids) + 1] = torch.tensor([*ids, SPECIALS.eos])
    return out


@pytest.mark.parametrize("seeds", [(1,), (1, 2)], ids=["one model", "ensemble"])
def test_the_score_of_the_searchs_own_output_is_the_searchs(seeds):
    models = [model(s) for s in seeds]
    for hyps in ([[h] for h in greedy_search(models, padded_sources(), 2.0, 5,
                                              specials=SPECIALS)],
                 beam_search(models, padded_sources(), beam=3, nbest=3, lenpen=0.0,
                             max_len_a=2.0, max_len_b=5, specials=SPECIALS)):
        for src, found in zip(SOURCES, hyps):
            for h in found:
                (forced,) = forced_pass(models, [src], [h.tokens], SPECIALS)
                assert forced.token_logprobs.shape == (len(h.tokens) + 1,)
                # a hypothesis cut at its cap has no EOS term: then its tokens' sum is its
                tokens_only = float(forced.token_logprobs[:-1].sum())
                assert min(abs(h.logprob - forced.logprob),
                           abs(h.logprob - tokens_only)) < 1e-4, (h, forced.token_logprobs)


def test_a_batch_scores_each_pair_as_alone():
    models = [model(3)]
    targets = [[20, 21, 22], [], [23, 24, 25, 26, 27, 28, 5, 6, 7, 8]]
    together = forced_pass(models, SOURCES, targets, SPECIALS, attention_layers=[-2])
    for src, tgt, batched in zip(SOURCES, targets, together):
        (alone,) = forced_pass(models, [src], [tgt], SPECIALS, attention_layers=[-2])
        assert batched.token_logprobs.shape == (len(tgt) + 1,)
        assert torch.allclose(batched.token_logprobs, alone.token_logprobs, atol=1e-5)
        assert batched.attention.shape == (1, len(tgt) + 1, len(src) + 1)
        assert torch.allclose(batched.attention, alone.attention, atol=1e-5)


def test_attention_rows_are_distributions_over_the_source():
    first, second = model(4), model(5)
    targets = [[20, 21], [22], [23, 24, 25]]
    for models, heads in (([first], True), ([first], False), ([first, second], False)):
        for pair in forced_pass(models, SOURCES, targets, SPECIALS, [0, -1], heads=heads):
            attention = pair.attention  # (2, [H,] T + 1, S + 1)
            rows = len(pair.token_logprobs)
            assert attention.shape[:2] == ((2, TINY.heads) if heads else (2, rows))
            assert torch.allclose(attention.sum(dim=-1), torch.ones(attention.shape[:-1]),
                                  atol=1e-5)
            assert bool((attention >= 0).all())


def test_an_ensemble_averages_attention_and_per_head_needs_one_model():
    first, second = model(6), model(7)
    targets = [[20, 21], [22], [23]]
    each = [forced_pass([m], SOURCES, targets, SPECIALS, [1]) for m in (first, second)]
    both = forced_pass([first, second], SOURCES, targets, SPECIALS, [1])
    for a, b, mean in zip(*each, both):
        assert torch.allclose((a.attention + b.attention) / 2, mean.attention, atol=1e-6)
    with pytest.raises(ValueError, match="one model"):
        forced_pass([first, second], SOURCES, targets, SPECIALS, [1], heads=True)


def test_layers_count_from_the_end_and_out_of_range_is_refused():
    m = model(8)
    assert [decoder_layer(m, i) for i in (0, 2, -1, -3)] == [0, 2, 2, 0]
    for bad in (3, -4):
        with pytest.raises(ValueError, match="has 3"):
            decoder_layer(m, bad)
