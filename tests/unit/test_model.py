"""The Transformer: masks, positions, the decoder cache, tied embeddings, a training canary."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from mtkit.config import ModelConfig
from mtkit.model import cache as cache_module
from mtkit.model.layers import attention, dropout, explicit_attention, sinusoidal_positions
from mtkit.model.loss import label_smoothed_nll
from mtkit.model.step import StepLinear
from mtkit.model.transformer import Transformer

PAD, BOS, VOCAB = 0, 1, 23
TINY = ModelConfig(
    enc_layers=2, dec_layers=2, d_model=16, heads=2, ffn_dim=32, dropout=0.1, max_positions=64
)
VARIANTS = [
    replace(TINY, norm=norm, activation=act)
    for norm in ("pre", "post")
    for act in ("relu", "swiglu")
]
# Marian's options (an imported OPUS-MT model): swish, sines then cosines, a logits bias
VARIANTS.append(replace(TINY, norm="post", activation="swish", position_layout="halves",
                        output_bias=True, scale_embeddings=False))
VARIANT_IDS = [f"{c.norm}-{c.activation}" for c in VARIANTS]


def make_model(cfg: ModelConfig = TINY, src_vocab: int = VOCAB, tgt_vocab: int = VOCAB):
    torch.manual_seed(0)
    return Transformer(cfg, src_vocab, tgt_vocab, pad_id=PAD).eval()


def tokens(*lengths: int, total: int | None = None, vocab: int = VOCAB) -> torch.Tensor:
    """Right-padded random ids >= 2 (so neither PAD nor BOS), one row per length."""
    total = total or max(lengths)
    out = torch.full((len(lengths), total), PAD)
    for row, n in enumerate(lengths):
        out[row, :n] = torch.randint(2, vocab, (n,))
    return out


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1)


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("cfg", VARIANTS, ids=VARIANT_IDS)
def test_future_target_tokens_do_not_change_earlier_logits(cfg):
    model = make_model(cfg)
    src, tgt = tokens(5, 7), tokens(6, 6)
    with torch.no_grad():
        before = model(src, tgt)
        changed = tgt.clone()
        changed[:, 4] = (changed[:, 4] - 1) % (VOCAB - 2) + 2  # another id >= 2
        after = model(src, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-5, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_padded_source_content_is_ignored():
    # Untied source embeddings: with "all", the pad row is also the pad logit's weights.
    model = make_model(replace(TINY, tie_embeddings="decoder"))
    src, tgt = tokens(4, 7), tokens(5, 5)
    with torch.no_grad():
        memory, pad = model.encode(src)
        logits = model.decode(tgt, memory, pad)
        # What the encoder puts at padded positions must not reach the decoder ...
        noisy = memory + 5 * torch.randn_like(memory) * pad[:, :, None]
        assert not torch.equal(noisy, memory)
        torch.testing.assert_close(model.decode(tgt, noisy, pad), logits, atol=1e-5, rtol=0)
        # ... and what enters the encoder at padded positions must not reach real positions.
        model.src_embed.weight[PAD] = torch.randn(TINY.d_model)
        memory2, pad2 = model.encode(src)
        assert torch.equal(pad2, pad)
        real = ~pad[:, :, None]
        torch.testing.assert_close(memory2 * real, memory * real, atol=1e-5, rtol=0)
        torch.testing.assert_close(model.decode(tgt, memory2, pad), logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cfg", VARIANTS[:2], ids=VARIANT_IDS[:2])
def test_batch_equals_sentences_one_by_one(cfg):
    model = make_model(cfg)
    src_lens, tgt_lens = (3, 8, 5), (6, 2, 4)
    src, tgt = tokens(*src_lens), tokens(*tgt_lens)
    with torch.no_grad():
        batch = model(src, tgt)
        for row, (s, t) in enumerate(zip(src_lens, tgt_lens, strict=True)):
            alone = model(src[row : row + 1, :s], tgt[row : row + 1, :t])
            torch.testing.assert_close(batch[row : row + 1, :t], alone, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- positions


def test_sinusoidal_values_follow_the_formula():
    dim = 16
    table = sinusoidal_positions(50, dim)
    for pos, i in [(0, 0), (1, 0), (7, 3), (49, 7), (20, 5)]:
        angle = pos / 10000 ** (2 * i / dim)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    model = make_model()
    assert "pos_table" not in model.state_dict()  # rebuilt from the config, not stored


def test_learned_positions_run_and_train():
    model = make_model(replace(TINY, positions="learned")).train()
    logits = model(tokens(4, 6), tokens(5, 3))
    logits.sum().backward()
    assert logits.shape == (2, 5, VOCAB)
    assert model.pos_embed.weight.grad[:5].abs().sum() > 0
    assert model.pos_embed.weight.grad[6:].abs().sum() == 0


def test_too_long_input_is_a_clear_error():
    model = make_model()
    with pytest.raises(ValueError, match="max_positions"):
        model.encode(tokens(TINY.max_positions + 1))


# --------------------------------------------------------------------------- cache


def step_through(model: Transformer, cache, tgt: torch.Tensor) -> torch.Tensor:
    """decode_step over every position of tgt: (B, T) -> (B, T, V)."""
    return torch.stack([model.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], 1)


@pytest.mark.parametrize("cfg", VARIANTS, ids=VARIANT_IDS)
def test_cached_steps_equal_full_decode(cfg):
    model = make_model(cfg)
    src, tgt = tokens(4, 7, 2), tokens(6, 6, 6)
    tgt[:, 0] = BOS
    with torch.inference_mode():
        memory, pad = model.encode(src)
        full = model.decode(tgt, memory, pad)
        cache = model.init_cache(memory, pad, max_len=10)
        stepped = step_through(model, cache, tgt)
    assert cache.step == 6
    assert stepped.dtype == torch.float32
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)


def test_cache_reorder_repeats_and_drops_rows():
    """Beam search's use of the cache: 2 rows per sentence, re-ranked inside sentences,
    then a sentence dropped; every step must equal a full decode of the row's prefix."""
    model = make_model(replace(TINY, norm="post", activation="swiglu"))
    src, tgt = tokens(4, 7, 2), tokens(6, 6, 6, 6, 6, 6)
    tgt[:, 0] = BOS
    beam = 2  # rows 2i and 2i+1 belong to sentence i
    with torch.inference_mode():
        memory, pad = model.encode(src)
        row_memory, row_pad = memory.repeat_interleave(beam, 0), pad.repeat_interleave(beam, 0)
        full = model.decode(tgt, row_memory, row_pad)
        cache = model.init_cache(memory, pad, max_len=8, beam=beam)
        step_through(model, cache, tgt[:, :3])

        first = torch.tensor([1, 1, 2, 3, 5, 4])  # repeated rows, new order (beam re-ranking)
        cache.reorder(first)
        after = step_through(model, cache, tgt[first, 3:5])
        torch.testing.assert_close(after, full[first, 3:5], atol=1e-5, rtol=0)

        rows, sentences = torch.tensor([4, 4, 0, 1]), torch.tensor([2, 0])  # sentence 1 done
        cache.reorder(rows, sentences)
        assert cache.rows == 4 and cache.sentences == 2 and cache.cross_k[0].size(0) == 2
        extra = torch.tensor([5, 6, 7, 8])
        last = model.decode_step(extra, cache)
        old_rows = first[rows]  # the rows of tgt they descend from
        prefix = torch.cat([tgt[old_rows, :5], extra[:, None]], 1)
        reference = model.decode(prefix, row_memory[old_rows], row_pad[old_rows])
        torch.testing.assert_close(last, reference[:, -1], atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="2 x 2 rows"):
            cache.reorder(torch.tensor([0]))


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("changed", [0, 1, 3, 5, 12])
def test_cache_reorder_equals_a_gather_whether_it_copies_some_rows_or_all(changed, compiled,
                                                                          monkeypatch):
    """reorder copies only the changed rows when at most half change, else gathers all:
    either way every layer's K and V at the filled positions equal a plain gather, sources
    that are themselves overwritten (a row's and its source's content swap) included; on
    the CPU compiled by TorchScript, and as the Python it falls back to."""
    if compiled:
        assert cache_module.compiled_gather_rows() is not cache_module.gather_rows
    else:
        monkeypatch.setattr(cache_module, "compiled_gather_rows", lambda: cache_module.gather_rows)
    model = make_model()
    g = torch.Generator().manual_seed(changed)
    with torch.inference_mode():
        memory, pad = model.encode(tokens(4, 7, 2, 5))
        cache = model.init_cache(memory, pad, max_len=6, beam=3)  # 4 sentences x 3 rows
        step_through(model, cache, torch.randint(4, VOCAB, (12, 4), generator=g))
        rows = torch.arange(12)
        which = torch.randperm(12, generator=g)[:changed]
        rows[which] = rows[which.roll(1)] if changed > 1 else 11 - which
        before = cache.self_kv[..., :4, :].clone()
        cache.reorder(rows)
        torch.testing.assert_close(cache.self_kv[:, :, :12, :, :4], before[:, :, rows],
                                   atol=0, rtol=0)


@pytest.mark.parametrize("rows, queries", [(64, 1), (16, 5), (2, 1)])
def test_decode_step_attention_equals_the_fused_kernel(rows, queries):
    """attention() switches to plain matmuls for many rows of few queries (a large batch's
    decode step); both paths must agree, with and without a padding mask."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, 4, queries, 16, generator=g)
    k, v = torch.randn(2, rows, 4, 9, 16, generator=g)
    keep = torch.rand(rows, 1, 1, 9, generator=g) > 0.3
    keep[:, :, :, 0] = True  # every row sees at least one position
    for mask in (None, keep):
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(attention(q, k, v, mask, 0.0), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_explicit_attention_equals_the_fused_kernel_forward_and_backward(causal):
    """bf16 attention on a CPU runs as plain matmuls (explicit_attention); in fp32 the same
    code equals torch's fused kernel, outputs and gradients, causal or with padding."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g, requires_grad=True) for _ in range(3))
    keep = None if causal else torch.rand(3, 1, 1, 7, generator=g) > 0.3
    if keep is not None:
        keep[..., 0] = True
    grads = []
    for run in (explicit_attention, None):
        out = (run(q, k, v, keep, 0.0, causal) if run else
               torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                                                is_causal=causal))
        grads.append((out.detach(), *torch.autograd.grad(out.square().sum(), (q, k, v))))
    for ours, fused in zip(*grads):
        torch.testing.assert_close(ours, fused, atol=1e-5, rtol=0)
    bf16 = [t.detach().bfloat16() for t in (q, k, v)]
    out = attention(*bf16, keep, 0.0, causal)  # the bf16 route: explicit matmuls
    torch.testing.assert_close(out.float(), grads[1][0], atol=0.05, rtol=0)


def test_bf16_dropout_keeps_one_minus_p_and_the_mean():
    """bf16 dropout's own mask (16-bit random numbers): it keeps about 1 - p of the values,
    scales the kept ones so the mean is unchanged, repeats under the same seed, and its
    gradient is the same mask and scale."""
    x = torch.ones(300, 1001, dtype=torch.bfloat16, requires_grad=True)
    torch.manual_seed(5)
    y = dropout(x, 0.1)
    kept = y.ne(0)
    assert abs(kept.float().mean().item() - 0.9) < 0.003
    assert abs(y.float().mean().item() - 1.0) < 0.005
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.1), y)
    (grad,) = torch.autograd.grad(y.float().sum(), x)
    assert torch.equal(grad, y.detach())  # 0 where dropped, the scale where kept
    assert torch.equal(dropout(x, 0.0), x)


@pytest.mark.parametrize("rows", [1, 5, 70])
@pytest.mark.parametrize("bias", [True, False])
def test_step_linear_equals_the_module(rows, bias):
    """decode_step's linears (the weight laid out transposed on the CPU) compute nn.Linear."""
    linear = torch.nn.Linear(16, 48, bias=bias)
    x = torch.randn(rows, 16)
    step = StepLinear.of(linear)
    assert step.weight.shape == (48, 16) and step.weight.t().is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(step(x), linear(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("cfg", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("sentences,beam", [(1, 2), (10, 8)])  # fused / explicit attention
def test_the_compiled_step_equals_the_plain_one(cfg, sentences, beam):
    """An engine runs decode_step compiled by TorchScript (StepWeights.script): every
    position's logits equal the plain Python step's bit for bit, through a padded batch
    and the cache reorders of a search."""
    model = make_model(cfg)
    src = tokens(*[2 + i % 6 for i in range(sentences)])
    weights = model.step_weights()
    assert weights.script() and weights.program() is not weights
    rows = sentences * beam
    steps = torch.randint(2, VOCAB, (rows, 6))
    steps[:, 0] = BOS
    reorders = [torch.randint(0, beam, (sentences, beam)) + torch.arange(sentences)[:, None]
                * beam for _ in range(6)]
    logits = {}
    with torch.inference_mode():
        memory, pad = model.encode(src)
        for run in ("compiled", "plain"):
            cache = model.init_cache(memory, pad, max_len=8, beam=beam, weights=weights)
            if run == "plain":
                weights.compiled = None
            out = []
            for t in range(6):
                out.append(model.decode_step(steps[:, t], cache))
                cache.reorder(reorders[t].view(-1))
            logits[run] = torch.stack(out)
    assert torch.equal(logits["compiled"], logits["plain"])


def test_the_compiled_step_is_run_at_the_threads_it_was_compiled_for():
    """Compiled code cannot ask torch's thread count (an int8 layer's kernel depends on
    it): at another count the plain step runs; where TorchScript fails, the plain step."""
    weights = make_model().step_weights()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert weights.script() and weights.program() is not weights
        torch.set_num_threads(2)
        assert weights.program() is weights
    finally:
        torch.set_num_threads(before)


def test_a_step_torchscript_cannot_compile_stays_plain(monkeypatch):
    def fails(module):
        raise RuntimeError("not in this torch")

    monkeypatch.setattr(torch.jit, "script", fails)
    weights = make_model().step_weights()
    assert not weights.script() and weights.program() is weights


def test_decode_step_follows_changes_to_the_weights():
    """decode_step reads the weights its cache was made with (a snapshot: transposed
    copies on the CPU); a cache made after an optimizer step, load_state_dict or a replaced
    parameter must decode with the new weights, as `decode` does."""
    model = make_model()
    src, tgt = tokens(4, 7), tokens(5, 5)
    tgt[:, 0] = BOS

    def stepped_and_full() -> tuple[torch.Tensor, torch.Tensor]:
        model.eval()
        with torch.inference_mode():
            memory, pad = model.encode(src)
            cache = model.init_cache(memory, pad, max_len=5)
            return step_through(model, cache, tgt), model.decode(tgt, memory, pad)

    before, _ = stepped_and_full()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss, _, _ = label_smoothed_nll(model(src, tgt), tgt, 0.0, PAD)
    loss.backward()
    optimizer.step()
    after, full = stepped_and_full()
    assert not torch.allclose(after, before, atol=1e-3)
    torch.testing.assert_close(after, full, atol=1e-5, rtol=0)

    other = make_model()  # the initial weights again
    with torch.no_grad():
        other.decoder[0].ffn.w_out.weight.mul_(2)
    model.load_state_dict(other.state_dict())
    stepped, full = stepped_and_full()
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)

    model.decoder[1].cross_attn.out.weight = torch.nn.Parameter(torch.zeros(16, 16))
    stepped, full = stepped_and_full()
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)


def test_full_cache_and_long_cache_are_errors():
    model = make_model()
    with torch.inference_mode():
        memory, pad = model.encode(tokens(3))
        with pytest.raises(ValueError, match="max_positions"):
            model.init_cache(memory, pad, max_len=TINY.max_positions + 1)
        cache = model.init_cache(memory, pad, max_len=1)
        model.decode_step(torch.tensor([BOS]), cache)
        with pytest.raises(ValueError, match="full"):
            model.decode_step(torch.tensor([BOS]), cache)


# --------------------------------------------------------------------------- tying


def test_tie_modes_share_the_right_parameters():
    d = TINY.d_model
    all_ = make_model(replace(TINY, tie_embeddings="all"))
    assert all_.src_embed.weight is all_.tgt_embed.weight is all_.out_proj.weight
    dec = make_model(replace(TINY, tie_embeddings="decoder"), src_vocab=30)
    assert dec.out_proj.weight is dec.tgt_embed.weight
    assert dec.src_embed.weight is not dec.tgt_embed.weight
    none = make_model(replace(TINY, tie_embeddings="none"), src_vocab=30)
    weights = {id(none.src_embed.weight), id(none.tgt_embed.weight), id(none.out_proj.weight)}
    assert len(weights) == 3
    # Each shared matrix counts once.
    assert none.num_parameters() - dec.num_parameters() == VOCAB * d
    assert dec.num_parameters() - all_.num_parameters() == 30 * d
    # Pad rows start at zero.
    for model in (all_, dec, none):
        assert model.src_embed.weight[PAD].abs().sum() == 0
        assert model.tgt_embed.weight[PAD].abs().sum() == 0
    # Sharing survives a state_dict round trip.
    again = make_model(replace(TINY, tie_embeddings="all"))
    again.load_state_dict(all_.state_dict())
    assert again.src_embed.weight is again.out_proj.weight
    torch.testing.assert_close(again.out_proj.weight, all_.out_proj.weight)


def test_tie_all_needs_one_vocabulary():
    with pytest.raises(ValueError, match="one vocabulary"):
        Transformer(replace(TINY, tie_embeddings="all"), 30, VOCAB)


# --------------------------------------------------------------------------- canary


def test_tiny_model_overfits_one_batch():
    model = make_model(replace(TINY, dropout=0.0, enc_layers=1, dec_layers=1, d_model=32))
    model.train()
    src, tgt = tokens(5, 6, 4, 6), tokens(6, 5, 6, 3, total=7)
    tgt_in, tgt_out = tgt[:, :-1].clone(), tgt[:, 1:]
    tgt_in[:, 0] = BOS
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        loss, _, ntokens = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.0, PAD)
        optimizer.zero_grad()
        (loss / ntokens).backward()
        optimizer.step()
        losses.append(loss.item() / ntokens)
    assert losses[0] > 2.5
    assert losses[-1] < 0.5, losses[::10]  # from ~ln(23) = 3.1; reaches ~0.05


def test_bf16_autocast_trains_and_caches():
    model = make_model(replace(TINY, activation="swiglu"))
    src, tgt = tokens(4, 7), tokens(5, 5)
    tgt[:, 0] = BOS
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model.train()(src, tgt)
    loss, _, _ = label_smoothed_nll(logits, tgt, 0.1, PAD)
    loss.backward()
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    model.eval()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        memory, pad = model.encode(src)
        full = model.decode(tgt, memory, pad)
        cache = model.init_cache(memory, pad, max_len=5)
        stepped = step_through(model, cache, tgt)
    assert cache.self_kv[0].dtype == torch.bfloat16 and stepped.dtype == torch.float32
    torch.testing.assert_close(stepped, full.float(), atol=0.05, rtol=0)
