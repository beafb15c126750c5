"""int8 inference (`--quantize int8`): the int8 linear against fp32, and a quantised model
whose cached decoding still equals its full decode."""

from __future__ import annotations

import warnings

import pytest
import torch

from mtkit.config import ModelConfig
from mtkit.decode.engine import Int8Linear, quantize_int8
from mtkit.model.transformer import Transformer

BOS, VOCAB = 1, 23
TINY = ModelConfig(enc_layers=2, dec_layers=2, d_model=16, heads=2, ffn_dim=32,
                   max_positions=64)


@pytest.mark.parametrize("shape", [(1, 32), (7, 32), (3, 5, 32), (0, 32)])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_is_close_to_fp32(shape, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 24, bias=bias)
    x = torch.randn(*shape)
    with torch.inference_mode():
        expected, got = linear(x), Int8Linear(linear)(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    # 8 bits for x and W: errors of a few hundredths of the output's range
    if expected.numel():
        assert (got - expected).abs().max() <= 0.03 * expected.abs().max()


def test_int8_keeps_zero_inputs_exact():
    """The activation range always includes 0, so a zero row maps to the bias exactly."""
    linear = torch.nn.Linear(8, 4)
    x = torch.zeros(2, 8)
    x[1] = torch.rand(8) + 1.0  # all positive: a range not including 0 unless forced
    with torch.inference_mode():
        got = Int8Linear(linear)(x)
    torch.testing.assert_close(got[0], linear.bias.detach(), atol=1e-6, rtol=0)


def test_quantized_model_decodes_step_by_step_as_in_full_without_deprecations():
    torch.manual_seed(0)
    model = Transformer(TINY, VOCAB, VOCAB).eval()
    src = torch.randint(2, VOCAB, (2, 6))
    tgt = torch.randint(2, VOCAB, (2, 5))
    tgt[:, 0] = BOS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.ao's path warned DeprecationWarning here
        quantized = quantize_int8(model)
        with torch.inference_mode():
            memory, pad = quantized.encode(src)
            full = quantized.decode(tgt, memory, pad)
            cache = quantized.init_cache(memory, pad, max_len=5)
            stepped = torch.stack([quantized.decode_step(tgt[:, t], cache)
                                   for t in range(5)], 1)
            reference = model(src, tgt)
    assert type(model.out_proj) is torch.nn.Linear  # the original is left as it was
    linears = [m for m in quantized.modules() if isinstance(m, torch.nn.Linear)]
    assert not linears and isinstance(quantized.out_proj, Int8Linear)
    # Activations are quantised per call: one step's rows against the whole prefix's
    # rows give slightly different scales, so close rather than equal (within twice
    # the 8-bit tolerance of 0.05: x has 7 bits, see Int8Linear).
    torch.testing.assert_close(stepped, full, atol=0.1, rtol=0)
    assert (full.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.8
