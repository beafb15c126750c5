"""int8 inference on the CPU (`--quantize int8`): every linear layer of a model with int8
weights, one scale per output row, and the kernels that multiply by them.

A call's rows choose the kernel. One sentence's decoder steps multiply a handful of rows
(the beam) by every weight of the decoder: there the time is reading the weights, and a
kernel that reads int8 weights reads a quarter of fp32's bytes. Batches multiply many rows
by the same weights: there the time is arithmetic, and oneDNN's int8 matmul (the one
torch's own x86 int8 inference lowers to) does it fastest (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
from torch import Tensor, nn

from mtkit.errors import ConfigError
from mtkit.model.step import StepLinear
from mtkit.model.transformer import Transformer

X_LEVELS = 127  # x is quantised to 0..127, not 0..255: see Int8Linear

# Calls of up to this many rows take fbgemm's kernel, where torch has it: one sentence's
# beam rows, or a few sentences'. Beyond, oneDNN's int8 matmul is faster (2-3x at 320
# rows on an AMX Xeon); below, fbgemm's (one call, no per-shape set-up).
FEW_ROWS = 16
# ... and at one thread, where fbgemm has no rows to split: up to this many. oneDNN sets
# itself up again for every new row count, which one sentence's encoder (its length in
# rows) mostly is; through fbgemm a verse's encoder, and the steps of batches of a dozen
# sentences, were faster, and batches of thousands of tokens no slower.
FEW_ROWS_ONE_THREAD = 64
# ... in layers of at least this many multiply-adds per row, when torch runs several
# threads. fbgemm's call costs about 15 us before it multiplies, and splits few rows
# poorly between threads: at 2 threads a smaller layer's fp32 weights multiply 5 rows
# faster (AMX Xeon: 256 x 1024 20 us against fbgemm's 22, 512 x 2048 181 against 43), and
# a d=256 model's sentence was 5% slower with fbgemm everywhere. At one thread fbgemm
# serves every layer: reading a quarter of the bytes won there (the same model's sentence
# 9% faster than with small layers in fp32).
FBGEMM_WORK = 400_000

# Without fbgemm: multiply-adds per thread (rows x in x out / torch threads) up to which a
# call multiplies x by the weights dequantised to fp32 instead of calling oneDNN, whose
# fixed cost per call (and several times that for a new row count, a sentence of a new
# length) made one sentence slower than fp32 below about this much work.
FP32_WORK = 10_000_000

KERNELS = ("auto", "fp32")  # for few rows: fbgemm's where torch has it, or fp32
# the overload itself: calling it skips resolving the op's name on every call
_LINEAR_DYNAMIC = getattr(getattr(torch.ops.quantized, "linear_dynamic", None), "default", None)


def quantize_int8(model: Transformer, fp32_work: int | None = None, few: str = "auto"
                  ) -> Transformer:
    """A copy of the model with every linear layer in int8 (`Int8Linear`), for CPU
    inference; embeddings stay fp32 (the tied output projection gets its own int8 copy).
    `fp32_work`, `few`: see `Int8Linear` (None: `FP32_WORK`)."""
    if not torch.backends.mkldnn.is_available():
        raise ConfigError("--quantize int8 needs a torch build with oneDNN (mkldnn)")
    work = FP32_WORK if fp32_work is None else fp32_work
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child, work, few))
    return model


class Int8Linear(nn.Module):
    """x W^T + b with W in int8, one scale per output row, by one of two paths chosen per
    call by its rows (`few_rows_max`):

    - few (the decoder steps of one sentence): in a large layer (`FBGEMM_WORK`), or in
      any at one thread, fbgemm's dynamic int8 linear, one call that quantises x (7 bits,
      one scale per call) and multiplies it by the int8 weights packed for it
      (`few="auto"`, where torch has fbgemm: x86 builds). Otherwise (`few="fp32"`, a small
      layer at several threads, or no fbgemm) x times W dequantised to fp32, held
      transposed as decode_step's fp32 linears hold theirs, up to `fp32_work`
      multiply-adds per thread; a layer where one row does not fit at the threads of the
      moment it is made keeps no fp32 copy.
    - more: x quantised on the fly to 7-bit unsigned (0..127) with one scale and zero
      point per call (dynamic quantisation), through oneDNN's int8 matmul, which also
      applies the scales and the bias.

    Every path multiplies by the same int8 weights.

    Why 7 bits for x: on x86 CPUs without VNNI (AVX2 only) the int8 kernels multiply
    u8 x s8 with vpmaddubsw, which adds pairs of products into int16 and saturates: 255 *
    127 * 2 does not fit (tests/unit/test_int8.py's random inputs came out wrong on such a
    machine). 127 * 127 * 2 fits, on every CPU (fbgemm's `reduce_range`), and the
    translations lose nothing measurable.

    Why not torch.ao's quantize_dynamic (deprecated, with quantized tensors) or torchao's
    dynamic int8 config (its successor) for batches: torchao quantises activations in a
    chain of small ops meant to be fused by torch.compile, and its weight-only kernel is
    slow without AVX-512; the oneDNN ops here work on plain int8/uint8 tensors and were
    the fastest of the three on large batches (docs/benchmarks.md). fbgemm's kernel takes
    its weights packed from a quantized tensor, made once here and thrown away; where a
    torch build cannot make one any more, few rows go the fp32 way.
    """

    def __init__(self, linear: nn.Linear, fp32_work: int = 0, few: str = "auto") -> None:
        super().__init__()
        if few not in KERNELS:
            raise ValueError(f"few={few!r}: expected one of {KERNELS}")
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
        quantized = torch.round(weight / scale[:, None]).to(torch.int8)  # (out, in)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.size = self.in_features * self.out_features  # multiply-adds per row
        self.fp32_work = max(fp32_work, 0)
        self.register_buffer("w_scale", scale)
        self.register_buffer("w_zero", torch.zeros(self.out_features, dtype=torch.long))
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        # oneDNN's and fbgemm's own layouts, opaque objects: not buffers (no state_dict, no .to)
        self.packed = torch.ops.onednn.qlinear_prepack(quantized, None)
        self.fbgemm = _fbgemm_packed(quantized, scale, self.bias) if few == "auto" else None
        self.dequantized: StepLinear | None = None  # held as decode_step holds fp32's
        small = self.fbgemm is None or self.size < FBGEMM_WORK
        if small and self.size <= self.fp32_work * torch.get_num_threads():
            dequantized = quantized.float() * scale[:, None]  # (out, in)
            self.dequantized = StepLinear.laid_out(dequantized, self.bias)

    def _few_kernel(self) -> tuple[int, bool]:
        """At today's thread count: the most rows a call may have to take the few-rows
        path, and whether that path is fbgemm's kernel (FBGEMM_WORK) or fp32's. Asked once
        a call: decode_step calls every layer at every step."""
        threads = torch.get_num_threads()
        if self.fbgemm is not None and threads == 1:
            return FEW_ROWS_ONE_THREAD, True
        if self.fbgemm is not None and self.dequantized is None:
            return FEW_ROWS, True
        if self.dequantized is None:
            return 0, False
        return self.fp32_work * threads // self.size, False

    @property
    def few_rows_max(self) -> int:
        """Calls of up to this many rows take the few-rows path, at today's thread count."""
        return self._few_kernel()[0]

    def forward(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        if x.dim() != 2:  # decode_step's (rows, in) needs no reshapes
            lead = x.shape[:-1]
            return self.forward(x.reshape(-1, self.in_features)).view(*lead, self.out_features)
        most, by_fbgemm = self._few_kernel()
        if x.size(0) > most:
            return self.many_rows(x)
        if x.size(0):
            return self.few_rows(x, by_fbgemm)
        return x.new_zeros(0, self.out_features)  # no rows: oneDNN refuses an empty x

    # Called as forward itself, without nn.Module's call machinery (its hooks, which
    # nothing sets on these): decode_step calls each linear once a step, where that
    # machinery made a sentence measurably slower than fp32's plain StepLinear calls.
    __call__ = forward

    def few_rows(self, x: Tensor, by_fbgemm: bool | None = None) -> Tensor:
        """(rows, in) -> (rows, out) by the few-rows kernel (None: today's, `_few_kernel`)."""
        if by_fbgemm is None:
            by_fbgemm = self._few_kernel()[1]
        if by_fbgemm:
            return _LINEAR_DYNAMIC(x, self.fbgemm, True)  # True: x in 7 bits
        return self.dequantized(x)

    def many_rows(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        return onednn_linear(x, self.packed, self.w_scale, self.w_zero, self.bias)

    def scriptable(self) -> nn.Module:
        """This layer as the compiled decode step calls it (`step.scriptable_linear`): the
        kernels this layer picks at today's thread count, fixed."""
        most, by_fbgemm = self._few_kernel()
        many = OneDnnLinear(self.packed, self.w_scale, self.w_zero, self.bias)
        if by_fbgemm:
            few: nn.Module = FbgemmLinear(self.fbgemm)
        elif self.dequantized is not None:
            few = self.dequantized
        else:
            few = many
        return RowSplitLinear(few, many, most, self.out_features)

    def extra_repr(self) -> str:
        most, by_fbgemm = self._few_kernel()
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8, "
                f"{'fbgemm' if by_fbgemm else 'fp32'} up to {most} rows")


def _fbgemm_packed(quantized: Tensor, scale: Tensor, bias: Tensor | None) -> Any | None:
    """The int8 weights (out, in) and their row scales packed for fbgemm's dynamic linear,
    or None where this torch cannot (no fbgemm, or no quantized tensors any more)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines or _LINEAR_DYNAMIC is None:
        return None
    engine = torch.backends.quantized.engine
    try:
        with warnings.catch_warnings():
            # torch warns that quantized tensors are deprecated: this one only carries
            # the weights to the packing and is dropped
            warnings.simplefilter("ignore")
            weight = torch._make_per_channel_quantized_tensor(
                quantized, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0)
            torch.backends.quantized.engine = "fbgemm"  # packs for fbgemm's kernel
            return torch.ops.quantized.linear_prepack(weight, bias)
    except (AttributeError, RuntimeError):
        return None
    finally:
        torch.backends.quantized.engine = engine


def onednn_linear(x: Tensor, packed: Tensor, w_scale: Tensor, w_zero: Tensor,
                  bias: Tensor | None, levels: int = X_LEVELS) -> Tensor:
    """(rows, in) -> (rows, out) by oneDNN's int8 matmul, x quantised on the fly to
    0..levels (`Int8Linear`'s many-rows kernel), in code TorchScript compiles (which reads
    no module-level numbers: X_LEVELS comes in as a default)."""
    # The range includes 0, so that zeros (padding, ReLU outputs) stay exact.
    lo_hi = torch.aminmax(x)  # no wait on the CPU
    lo, hi = min(float(lo_hi[0]), 0.0), max(float(lo_hi[1]), 0.0)
    scale = max(hi - lo, 1e-8) / levels
    zero = int(round(-lo / scale))
    qx = x.div(scale).round_().add_(zero).clamp_(0, levels).to(torch.uint8)
    return torch.ops.onednn.qlinear_pointwise(
        qx, scale, zero, packed, w_scale, w_zero, bias,
        1.0, 0, torch.float32, "none", [], "")  # output scale 1, zero 0: plain fp32


class OneDnnLinear(nn.Module):
    """`onednn_linear` on one layer's weights, for the compiled step."""

    def __init__(self, packed: Tensor, w_scale: Tensor, w_zero: Tensor,
                 bias: Tensor | None) -> None:
        super().__init__()
        self.packed, self.w_scale, self.w_zero, self.bias = packed, w_scale, w_zero, bias

    def forward(self, x: Tensor) -> Tensor:
        return onednn_linear(x, self.packed, self.w_scale, self.w_zero, self.bias)


class FbgemmLinear(nn.Module):
    """fbgemm's dynamic int8 linear (x in 7 bits) on weights packed for it."""

    def __init__(self, packed: Any) -> None:
        super().__init__()
        self.packed = packed

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)


class RowSplitLinear(nn.Module):
    """Calls of up to `few_max` rows to `few`, more to `many`: `Int8Linear.forward`'s
    choice for (rows, in) inputs, its kernels fixed (`Int8Linear.scriptable`)."""

    def __init__(self, few: nn.Module, many: nn.Module, few_max: int, out_features: int
                 ) -> None:
        super().__init__()
        self.few, self.many = few, many
        self.few_max, self.out_features = few_max, out_features

    def forward(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        rows = x.size(0)
        if rows == 0:  # oneDNN refuses an empty x
            return x.new_zeros(0, self.out_features)
        if rows <= self.few_max:
            return self.few(x)
        return self.many(x)
