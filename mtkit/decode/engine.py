"""Decoding engines: what turns encoded sources into hypotheses, behind one interface.

`TorchEngine` runs mtkit's own models and search (one model or an ensemble, optionally
int8); `ct2.CTranslate2Engine` runs an exported CTranslate2 model. Both satisfy `Engine`,
so the Translator, the pipeline, validation during training and the benchmarks never ask
which one they hold. `load_engine` picks one for the files `translate -m` is given.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

from mtkit.config import DecodeConfig, Recipe
from mtkit.data.tokenizer import Tokenizer
from mtkit.decode import ct2
from mtkit.decode.forced import forced_pass, pad_sources
from mtkit.decode.int8 import quantize_int8
from mtkit.decode.prefix import ForcedPrefix
from mtkit.decode.sampling import Draw, sample_search
from mtkit.decode.search import STOP_RULES, Hypothesis, beam_search, greedy_search
from mtkit.errors import CheckpointError, ConfigError
from mtkit.model.cache import DecoderCache
from mtkit.model.checkpoint import Bundle, load_checkpoint
from mtkit.model.step import StepWeights
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
        if isinstance(self.weights, StepWeights):  # (tests' stand-in models gather none)
            self.weights.script()  # on the CPU: see step.py
        self.max_positions = model.max_positions
        # bound once: the search calls them directly, decode_step at every step
        self.encode, self.decode, self.decode_step = model.encode, model.decode, model.decode_step

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int,
                   beam: int) -> DecoderCache:
        return self.model.init_cache(memory, src_pad_mask, max_len, beam, self.weights)


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
        return ct2.CTranslate2Engine(paths[0], device.type, threads, quantize)
    if quantize == "int8" and device.type != "cpu":
        raise ConfigError("--quantize int8 runs on the CPU; use --device cpu")
    return TorchEngine.load(paths, device, quantize)
