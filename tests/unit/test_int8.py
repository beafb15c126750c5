"""int8 inference (`--quantize int8`): the int8 linear against fp32 on each of its kernels
(for few rows fbgemm's dynamic int8 linear, or fp32 with the dequantised weights; oneDNN's
int8 matmul for many), which path a call takes, and quantised models: cached decoding
equals the full decode, and a Translator gives one sentence alone what it gives it in a
batch."""

from __future__ import annotations

import warnings

import pytest
import torch
from builders import SPECIALS, raw_recipe

from mtkit.config import DecodeConfig, ModelConfig, recipe_from_dict
from mtkit.decode import int8 as int8_module
from mtkit.decode.engine import TorchEngine
from mtkit.decode.int8 import (
    FEW_ROWS,
    FEW_ROWS_ONE_THREAD,
    FP32_WORK,
    Int8Linear,
    quantize_int8,
)
from mtkit.decode.translate import Translator
from mtkit.model.step import StepWeights
from mtkit.model.transformer import Transformer

BOS, VOCAB = 1, 23
TINY = ModelConfig(enc_layers=2, dec_layers=2, d_model=16, heads=2, ffn_dim=32,
                   max_positions=64)
FP32, INT8 = 10**12, 0  # fp32_work that sends every call down one path (with few="fp32")
FBGEMM = "fbgemm" in torch.backends.quantized.supported_engines
needs_fbgemm = pytest.mark.skipif(not FBGEMM, reason="this torch build has no fbgemm")


@pytest.fixture
def threads():
    """Set torch's threads for the test (fp32_work is per thread), then restore them."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture
def paths_taken(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(path, rows) of every Int8Linear call with rows, in order; and each call took the
    path its rows call for."""
    taken: list[tuple[str, int]] = []
    for path in ("few_rows", "many_rows"):
        original = getattr(Int8Linear, path)

        def spy(self, x, *kernel, original=original, path=path):
            assert path == ("few_rows" if x.size(0) <= self.few_rows_max else "many_rows")
            taken.append((path, x.size(0)))
            return original(self, x, *kernel)

        monkeypatch.setattr(Int8Linear, path, spy)
    return taken


@pytest.mark.parametrize("kernel", ["onednn", "fp32", pytest.param("fbgemm", marks=needs_fbgemm)])
@pytest.mark.parametrize("shape", [(1, 32), (7, 32), (3, 5, 32), (0, 32)])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_is_close_to_fp32(shape, bias, kernel, paths_taken, monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 0)  # fbgemm's for any size
    linear = torch.nn.Linear(32, 24, bias=bias)
    x = torch.randn(*shape)
    layer = Int8Linear(linear, FP32 if kernel == "fp32" else INT8,
                       "auto" if kernel == "fbgemm" else "fp32")
    assert (layer.fbgemm is not None) == (kernel == "fbgemm")
    with torch.inference_mode():
        expected, got = linear(x), layer(x)
    if x.numel():
        assert paths_taken == [("many_rows" if kernel == "onednn" else "few_rows",
                                x.numel() // 32)]
    assert got.shape == expected.shape and got.dtype == torch.float32
    # 8 bits for x and W: errors of a few hundredths of the output's range
    if expected.numel():
        assert (got - expected).abs().max() <= 0.03 * expected.abs().max()


def test_int8_keeps_zero_inputs_exact(monkeypatch):
    """The activation range always includes 0, so a zero row maps to the bias exactly."""
    linear = torch.nn.Linear(8, 4)
    x = torch.zeros(2, 8)
    x[1] = torch.rand(8) + 1.0  # all positive: a range not including 0 unless forced
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 0)
    with torch.inference_mode():
        got = Int8Linear(linear, INT8, "fp32")(x)  # oneDNN's
        few = Int8Linear(linear)(x)  # fbgemm's, where there is fbgemm
    torch.testing.assert_close(got[0], linear.bias.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(few[0], linear.bias.detach(), atol=1e-6, rtol=0)


def test_a_call_takes_the_fp32_path_up_to_fp32_work(paths_taken, threads):
    """Up to fp32_work multiply-adds per thread: x times the dequantised weights,
    exactly; beyond: int8, close to it. Both multiply by the same int8 weights."""
    torch.manual_seed(0)
    threads(1)
    linear = torch.nn.Linear(32, 24)
    layer = Int8Linear(linear, fp32_work=4 * 32 * 24 + 5, few="fp32")  # 4 rows
    dequantized = layer.w_scale[:, None] * torch.round(linear.weight.detach()
                                                        / layer.w_scale[:, None])
    x = torch.randn(9, 32)
    with torch.inference_mode():
        few = layer(x[:4])
        many = layer(x)
        one_by_one = torch.cat([layer(row[None]) for row in x])
        reference = torch.nn.functional.linear(x, dequantized, linear.bias.detach())
    assert paths_taken == [("few_rows", 4), ("many_rows", 9)] + [("few_rows", 1)] * 9
    torch.testing.assert_close(few, reference[:4], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(one_by_one, reference, atol=1e-5, rtol=1e-5)
    assert (many - reference).abs().max() <= 0.02 * reference.abs().max()


def test_few_rows_follow_the_layer_size_and_the_threads(threads, monkeypatch):
    """Up to FBGEMM_WORK multiply-adds a row, or without fbgemm, each layer takes the rows
    that fit in fp32_work multiply-adds per thread; a layer where one row does not fit at
    the threads it is made with keeps no fp32 copy. From FBGEMM_WORK on, with fbgemm, a
    layer takes FEW_ROWS, and keeps no fp32 copy; at one thread, every layer takes
    FEW_ROWS_ONE_THREAD through fbgemm."""
    model = Transformer(TINY, VOCAB, VOCAB).eval()
    threads(1)
    quantized = quantize_int8(model, 16 * 32 * 3, "fp32")  # the 16 -> 32 layer: 3 rows
    layers = [m for m in quantized.modules() if isinstance(m, Int8Linear)]
    assert {(m.in_features, m.out_features): m.few_rows_max for m in layers} == {
        (16, 48): 2, (16, 16): 6, (16, 32): 3, (32, 16): 3, (16, VOCAB): 4}
    threads(2)
    assert quantized.out_proj.few_rows_max == 8
    none = quantize_int8(model, (16 * 16 - 1) // 2, "fp32")
    assert all(m.few_rows_max == 0 and m.dequantized is None
               for m in none.modules() if isinstance(m, Int8Linear))
    default = quantize_int8(model, few="fp32")
    assert default.out_proj.few_rows_max == 2 * FP32_WORK // (16 * VOCAB)
    auto = [m for m in quantize_int8(model).modules() if isinstance(m, Int8Linear)]
    assert all(m.dequantized is not None for m in auto)  # all small: fp32 at 2 threads
    assert all(m.few_rows_max == 2 * FP32_WORK // m.size for m in auto)
    threads(1)  # ... and fbgemm's at one thread, where there is fbgemm
    assert all(m.few_rows_max == (FEW_ROWS_ONE_THREAD if FBGEMM else FP32_WORK // m.size)
               for m in auto)
    threads(2)
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 16 * 32)
    auto = [m for m in quantize_int8(model).modules() if isinstance(m, Int8Linear)]
    large = {(m.in_features, m.out_features) for m in auto if m.size >= 16 * 32}
    assert large == {(16, 48), (16, 32), (32, 16)}
    for m in auto:
        if (m.in_features, m.out_features) in large and FBGEMM:
            assert m.few_rows_max == FEW_ROWS and m.dequantized is None
        else:
            assert m.dequantized is not None and m.few_rows_max == 2 * FP32_WORK // m.size


@pytest.mark.parametrize("fp32_work, few", [(0, "fp32"), (None, "fp32"), (None, "auto")],
                         ids=["int8", "fp32-few", "fbgemm-few"])
def test_quantized_model_decodes_step_by_step_as_in_full_without_deprecations(
        fp32_work, few, monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 0)  # every layer is "large"
    model = Transformer(TINY, VOCAB, VOCAB).eval()
    src = torch.randint(2, VOCAB, (2, 6))
    tgt = torch.randint(2, VOCAB, (2, 5))
    tgt[:, 0] = BOS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.ao's path warned DeprecationWarning here
        quantized = quantize_int8(model, fp32_work, few)
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


class WordTokenizer:
    """Words w4 .. w22 are tokens 4 .. 22."""

    specials = SPECIALS
    target_start = ()  # a model of one language pair

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[int(word[1:]) for word in line.split()] for line in lines]

    def decode_tgt(self, sequences: list[list[int]]) -> list[str]:
        return [" ".join(f"w{token}" for token in seq) for seq in sequences]


@pytest.mark.parametrize("few", ["fp32", pytest.param("auto", marks=needs_fbgemm)])
def test_a_sentence_alone_translates_as_in_a_batch(monkeypatch, paths_taken, threads, few):
    """One sentence at beam 4 steps 4 rows, through the few-rows kernel (fp32, or
    fbgemm's); the same sentences in one batch step many rows, through oneDNN's: the same
    translations, scores within int8's error. (The step runs as plain Python here, so that
    the spy sees its calls; the compiled step calls the same kernels: the test below.)"""
    torch.manual_seed(0)
    monkeypatch.setattr(StepWeights, "script", lambda self: False)
    cfg = ModelConfig(enc_layers=1, dec_layers=2, d_model=32, heads=2, ffn_dim=64,
                      dropout=0.0, max_positions=64)
    model = Transformer(cfg, VOCAB, VOCAB, pad_id=SPECIALS.pad)
    threads(1)
    # 32 -> 96 (self-attention's q, k, v), the largest layer but the output: 5 rows
    monkeypatch.setattr(int8_module, "FP32_WORK", 32 * 96 * 5)
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 0)  # fbgemm for every layer (auto)
    monkeypatch.setattr(int8_module, "FEW_ROWS_ONE_THREAD", FEW_ROWS)  # 64 rows: oneDNN's
    engine = TorchEngine([quantize_int8(model, few=few)], WordTokenizer(),
                         recipe_from_dict(raw_recipe("a", "b")))
    settings = DecodeConfig(beam=4, lenpen=1.0, max_len_a=1.0, max_len_b=4)
    generator = torch.Generator().manual_seed(1)
    lines = [" ".join(f"w{t}" for t in torch.randint(4, VOCAB, (n,), generator=generator))
             for n in torch.randint(3, 9, (16,), generator=generator).tolist()]
    translator = Translator(engine, settings, max_tokens=4096)

    alone = [translator.search([line])[0][0] for line in lines]
    assert {path for path, rows in paths_taken if rows == settings.beam} == {"few_rows"}
    paths_taken.clear()
    together = [hyps[0] for hyps in translator.search(lines)]
    # all 16 sentences step together until some end (then fewer rows, maybe fp32 again)
    assert paths_taken.count(("many_rows", 16 * settings.beam)) >= 2 * 6 + 1  # 1st step

    assert [h.score for h in together] == pytest.approx([h.score for h in alone], abs=0.05)
    same = sum(a.tokens == b.tokens for a, b in zip(alone, together))
    assert same >= len(lines) - 1  # a near tie may fall the other way


@pytest.mark.parametrize("few", ["fp32", pytest.param("auto", marks=needs_fbgemm)])
@pytest.mark.parametrize("count", [1, 2])
def test_the_compiled_int8_step_calls_the_kernels_the_plain_one_calls(monkeypatch, threads,
                                                                        few, count):
    """The compiled step fixes each layer's kernels at the threads it was compiled for
    (`Int8Linear.scriptable`): its logits equal the plain step's bit for bit, for few rows
    (fbgemm's or fp32) and for many (oneDNN's), at one thread and at two."""
    torch.manual_seed(0)
    threads(count)
    monkeypatch.setattr(int8_module, "FP32_WORK", 32 * 96 * 3)  # fp32 up to 3 rows a thread
    monkeypatch.setattr(int8_module, "FBGEMM_WORK", 32 * 96)  # the larger layers: fbgemm
    model = quantize_int8(Transformer(TINY, VOCAB, VOCAB, pad_id=SPECIALS.pad).eval(), few=few)
    weights = model.step_weights()
    assert weights.script()
    compiled = weights.compiled
    for sentences in (1, 3, 9):  # 4, 12 and 36 rows at beam 4
        src = torch.randint(4, VOCAB, (sentences, 5))
        tokens = torch.randint(4, VOCAB, (sentences * 4, 3))
        logits = []
        with torch.inference_mode():
            memory, pad = model.encode(src)
            for run in (compiled, None):
                weights.compiled = run
                cache = model.init_cache(memory, pad, max_len=4, beam=4, weights=weights)
                logits.append(torch.stack([model.decode_step(tokens[:, t], cache)
                                           for t in range(3)]))
        assert torch.equal(logits[0], logits[1]), sentences
