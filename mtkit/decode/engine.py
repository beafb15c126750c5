"""Decoding engines: what turns encoded sources into hypotheses, behind one interface.

`TorchEngine` runs mtkit's own models and search (one model or an ensemble, optionally
int8); `ct2.CTranslate2Engine` runs an exported CTranslate2 model. Both satisfy `Engine`,
so the Translator, the pipeline, validation during training and the benchmarks never ask
which one they hold. `load_engine` picks one for the files `translate -m` is given.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

from mtkit.config import DecodeConfig, Recipe
from mtkit.data.tokenizer import Tokenizer
from mtkit.decode import ct2
from mtkit.decode.forced import forced_pass, pad_sources
from mtkit.decode.prefix import ForcedPrefix
from mtkit.decode.sampling import Draw, sample_search
from mtkit.decode.search import STOP_RULES, Hypothesis, beam_search, greedy_search
from mtkit.errors import CheckpointError, ConfigError
from mtkit.model.cache import DecoderCache
from mtkit.model.checkpoint import Bundle, load_checkpoint
from mtkit.model.transformer import Transformer

ENGINES = ("auto", "torch", "ctranslate2")
QUANTIZE = ("none", "int8")


class Engine(Protocol):
    name: str  # what `--engine` calls it: torch or ctranslate2
    tokenizer: Tokenizer
    recipe: Recipe  # the recipe the model was trained with: its `decode` section is the default
    max_source: int  # source tokens a sentence may have (longer ones are truncated first)
    stop_rules: tuple[str, ...]  # the decode.stop values it honours, the first by default

    def search(self, sources: list[list[int]], settings: DecodeConfig,
               prefixes: list[list[int]] | None = None,
               lines: list[int] | None = None) -> list[list[Hypothesis]]:
        """Up to settings.nbest hypotheses per encoded source, best first (samples: as
        the engine draws them). `prefixes`: target ids each hypothesis starts with (empty:
        none); `lines`: each source's number in its input, which keys its samples' random
        streams where the engine can (default: 0, 1, ...)."""

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """The natural-log probability of each token of each given target (ids without
        EOS) after its source, then of EOS: len(target) + 1 values per pair. Every pair
        fits the model (source and target at most `max_source` tokens)."""

    def cross_attention(self, sources: list[list[int]], targets: list[list[int]],
                        layer: int) -> list[Tensor]:
        """One teacher-forced pass of each (source, target) pair of ids (non-empty, without
        EOS): decoder layer `layer`'s attention over the source, heads averaged, (T, S):
        row t from the decoder position that predicts target token t, columns the source
        tokens (EOS rows and columns left out). For word alignments (align.py)."""


class TorchEngine:
    """mtkit's models (an ensemble if several, sharing one vocabulary) and search.

    The decoder weights each model's decode_step reads are gathered once, here
    (`InferenceModel`): an engine decodes with the weights its models had when it was
    made, so code that changes the weights makes a new engine (validation makes one per
    run) and nothing has to be told about the change.

    Threads: torch's one intra-op pool, all usable cores for every batch unless
    `--threads` says otherwise: unlike CTranslate2's (ct2.choose_threads), a second thread
    pays even for one sentence. On cores busy with other work intra-op threads wait on
    each other: there `--threads 1`.
    """

    name = "torch"
    stop_rules = STOP_RULES

    def __init__(self, models: Sequence[Transformer], tokenizer: Tokenizer, recipe: Recipe,
                 device: torch.device | str = "cpu", use_cache: bool = True):
        self.models = list(models)
        for model in self.models:
            model.eval()  # once here, not per batch: the search runs dropout-free
        self.searched = [InferenceModel(model) for model in self.models]
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.device = torch.device(device)
        self.use_cache = use_cache  # False recomputes every prefix: the benchmarks' reference
        self.max_source = min(m.max_positions for m in self.models) - 1  # room for EOS
        self._forcing = threading.Lock()  # one forced pass at a time: see cross_attention

    @classmethod
    def from_bundles(cls, bundles: Sequence[Bundle], names: Sequence[str],
                     device: torch.device | str = "cpu", quantize: str = "none") -> TorchEngine:
        first = bundles[0]
        for name, bundle in zip(names[1:], bundles[1:]):
            if not bundle.same_vocabulary(first):
                raise CheckpointError(
                    f"{name}: its vocabulary differs from {names[0]}; an ensemble needs models "
                    "trained with the same tokenizer"
                )
        tokenizer = first.tokenizer()
        models = [b.model(tokenizer, name).to(device) for b, name in zip(bundles, names)]
        if quantize == "int8":
            models = [quantize_int8(model) for model in models]
        return cls(models, tokenizer, first.recipe, device)

    @classmethod
    def load(cls, paths: Sequence[Path], device: torch.device | str = "cpu",
             quantize: str = "none") -> TorchEngine:
        bundles = [load_checkpoint(path) for path in paths]
        return cls.from_bundles(bundles, [str(p) for p in paths], device, quantize)

    @torch.inference_mode()
    def search(self, sources: list[list[int]], settings: DecodeConfig,
               prefixes: list[list[int]] | None = None,
               lines: list[int] | None = None) -> list[list[Hypothesis]]:
        specials = self.tokenizer.specials
        src = pad_sources(sources, specials).to(self.device)
        prefix = ForcedPrefix.of(prefixes, specials.pad, self.device)
        s = settings
        if s.sampling.kind != "none":
            draw = Draw(s.sampling, s.temperature, s.seed, s.nbest)
            lines = list(range(len(sources))) if lines is None else lines
            return sample_search(self.searched, src, draw, lines, s.max_len_a, s.max_len_b,
                                 self.use_cache, specials=specials, prefix=prefix)
        if s.beam == 1 and s.nbest == 1:
            best = greedy_search(self.searched, src, s.max_len_a, s.max_len_b,
                                 use_cache=self.use_cache, specials=specials, prefix=prefix)
            return [[h] for h in best]
        return beam_search(
            self.searched, src, beam=s.beam, lenpen=s.lenpen, nbest=s.nbest,
            max_len_a=s.max_len_a, max_len_b=s.max_len_b, use_cache=self.use_cache,
            stop=s.stop, specials=specials, prefix=prefix,
        )

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        # the whole target in one teacher-forced pass (an ensemble: as the search averages);
        # under the lock, or an alignment pass's hooks would catch this pass's input too
        with self._forcing:
            forced = forced_pass(self.models, sources, targets, self.tokenizer.specials)
        return [pair.token_logprobs.tolist() for pair in forced]

    def cross_attention(self, sources: list[list[int]], targets: list[list[int]],
                        layer: int) -> list[Tensor]:
        # One forced pass at a time: forced_pass catches the attention's input with hooks
        # on the shared modules, which would also catch another thread's (serve --workers)
        with self._forcing:
            forced = forced_pass(self.models, sources, targets, self.tokenizer.specials,
                                 [layer])
        return [pair.attention[0, :-1, :-1] for pair in forced]  # type: ignore[index]


class InferenceModel:
    """A model as an engine's search drives it (`search.SearchModel`): the Transformer, with
    the decoder weights its decode_step reads gathered once, when this is made, instead of
    at every search."""

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.weights = model.step_weights()
        self.max_positions = model.max_positions
        # bound once: the search calls them directly, decode_step at every step
        self.encode, self.decode, self.decode_step = model.encode, model.decode, model.decode_step

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int,
                   beam: int) -> DecoderCache:
        return self.model.init_cache(memory, src_pad_mask, max_len, beam, self.weights)


def quantize_int8(model: Transformer, fp32_work: int | None = None) -> Transformer:
    """A copy of the model with every linear layer in int8 (`Int8Linear`), for CPU
    inference; embeddings stay fp32 (the tied output projection gets its own int8 copy).
    `fp32_work`: see `Int8Linear` (None: `FP32_WORK`)."""
    if not torch.backends.mkldnn.is_available():
        raise ConfigError("--quantize int8 needs a torch build with oneDNN (mkldnn)")
    work = FP32_WORK if fp32_work is None else fp32_work
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child, work))
    return model


X_LEVELS = 127  # x is quantised to 0..127, not 0..255: see Int8Linear

# Multiply-adds per thread (rows x in x out / torch threads) up to which a call takes the
# fp32 path of Int8Linear. A oneDNN int8 call costs a fixed amount before it multiplies
# (most of it in torch's wrapper, not in oneDNN's kernel; more with 2 threads than with
# 1), and its first call with a new row count (a sentence of a new length) several times
# that. Measured on an AMX Xeon (/tmp scripts, not shipped) with the demo model's shapes,
# this threshold from 0 to 1e12 (fp32 always) against the fp32 engine: one test sentence
# at a time (beam 5 and greedy, 1 and 2 threads) int8 is level with fp32 from 10M up,
# 1-3% slower at 4M (7% with the kernels held to AVX2, as on an AVX2-only CPU) and 20-30%
# slower at 0; 300-400 sentences in 4096-token batches run 1.2-1.3x fp32's speed at every
# threshold from 0 to 30M (1.05-1.09x with AVX2 kernels).
FP32_WORK = 10_000_000


class Int8Linear(nn.Module):
    """x W^T + b with W in int8, one scale per output row, by one of two paths chosen per
    call by its work: rows x in x out multiply-adds, against `fp32_work` per thread.

    - more (a batch, the encoder of a batch): x quantised on the fly to 7-bit unsigned
      (0..127) with one scale and zero point per call (dynamic quantisation), through
      oneDNN's int8 matmul, which also applies the scales and the bias;
    - up to `fp32_work` per thread (the decoder steps of one sentence): x times W
      dequantised to fp32 (the int8 values times their scales, so both paths use the same
      weights), held transposed as decode_step's fp32 linears hold theirs (model/step.py).
      Where the threads of the moment it is made (`torch.get_num_threads()`) do not make
      one row's work fit (a big vocabulary's output projection), there is no fp32 copy
      and every call is int8.

    Why 7 bits for x: on x86 CPUs without VNNI (AVX2 only) oneDNN multiplies u8 x s8 with
    vpmaddubsw, which adds pairs of products into int16 and saturates: 255 * 127 * 2 does
    not fit (tests/unit/test_int8.py's random inputs came out wrong on such a machine).
    127 * 127 * 2 fits, on every CPU; fbgemm's `reduce_range` does the same, and the
    translations lose nothing measurable.

    Why this and not torch.ao's quantize_dynamic (deprecated, with quantized tensors) or
    torchao's dynamic int8 config (its successor): torchao quantises activations in a chain
    of small ops meant to be fused by torch.compile, and its weight-only kernel is slow
    without AVX-512; the oneDNN ops here are the ones torch's own x86 int8 inference lowers
    to, on plain int8/uint8 tensors, and were the fastest of the three on large batches
    (docs/benchmarks.md). Nor torch's weight-only `_weight_int8pack_mm` for few rows: on
    the CPU only its bf16 input is vectorised (AVX-512), and even that is slower than the
    fp32 product of a few rows.
    """

    def __init__(self, linear: nn.Linear, fp32_work: int = 0) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
        quantized = torch.round(weight / scale[:, None]).to(torch.int8)  # (out, in)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.size = self.in_features * self.out_features  # multiply-adds per row
        self.fp32_work = max(fp32_work, 0)
        self.register_buffer("w_scale", scale)
        self.register_buffer("w_zero", torch.zeros(self.out_features, dtype=torch.long))
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        # oneDNN's own blocked layout, an opaque tensor: not a buffer (no state_dict, no .to)
        self.packed = torch.ops.onednn.qlinear_prepack(quantized, None)
        self.dequantized = None  # (in, out), contiguous
        if self.size <= self.fp32_work * torch.get_num_threads():
            self.dequantized = (quantized.float() * scale[:, None]).t().contiguous()

    @property
    def fp32_rows(self) -> int:
        """Calls of up to this many rows take the fp32 path, at today's thread count."""
        if self.dequantized is None:
            return 0
        return self.fp32_work * torch.get_num_threads() // self.size

    def forward(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        if x.dim() != 2:  # decode_step's (rows, in) needs no reshapes
            lead = x.shape[:-1]
            return self.forward(x.reshape(-1, self.in_features)).view(*lead, self.out_features)
        if x.size(0) > self.fp32_rows:
            return self.many_rows(x)
        if self.dequantized is not None:
            return self.few_rows(x)
        return x.new_zeros(0, self.out_features)  # no rows: oneDNN refuses an empty x

    # Called as forward itself, without nn.Module's call machinery (its hooks, which
    # nothing sets on these): decode_step calls each linear once a step, where that
    # machinery made a sentence measurably slower than fp32's plain StepLinear calls.
    __call__ = forward

    def few_rows(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        if self.bias is None:
            return torch.mm(x, self.dequantized)
        return torch.addmm(self.bias, x, self.dequantized)

    def many_rows(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        # The range includes 0, so that zeros (padding, ReLU outputs) stay exact.
        lo, hi = (float(v) for v in torch.aminmax(x))  # no wait on the CPU
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = max(hi - lo, 1e-8) / X_LEVELS
        zero = round(-lo / scale)
        qx = x.div(scale).round_().add_(zero).clamp_(0, X_LEVELS).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(
            qx, scale, zero, self.packed, self.w_scale, self.w_zero, self.bias,
            1.0, 0, torch.float32, "none", [], "")  # output scale 1, zero 0: plain fp32

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8, "
                f"fp32 up to {self.fp32_rows} rows")


def load_engine(paths: Sequence[Path], engine: str = "auto", quantize: str = "none",
                device: torch.device | str = "cpu", threads: int = 0) -> Engine:
    """mtkit model files (an ensemble if several), or a directory `mtkit export` wrote."""
    paths = [Path(p) for p in paths]
    device = torch.device(device)
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine}: expected {', '.join(ENGINES)}")
    if quantize not in QUANTIZE:
        raise ConfigError(f"--quantize {quantize}: expected {' or '.join(QUANTIZE)}")
    exported = [ct2.is_exported_model(p) for p in paths]
    if engine == "ctranslate2" or (engine == "auto" and any(exported)):
        if len(paths) != 1 or not exported[0]:
            raise ConfigError("--engine ctranslate2 takes one directory written by `mtkit export`")
        return ct2.CTranslate2Engine(paths[0], device.type, threads)
    if quantize == "int8" and device.type != "cpu":
        raise ConfigError("--quantize int8 runs on the CPU; use --device cpu")
    return TorchEngine.load(paths, device, quantize)
