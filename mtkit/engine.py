"""Decoding engines: what turns encoded sources into hypotheses, behind one interface.

`TorchEngine` runs mtkit's own models and search (one model or an ensemble, optionally
int8); `ct2.CTranslate2Engine` runs an exported CTranslate2 model. Both satisfy `Engine`,
so the Translator, the pipeline, validation during training and the benchmarks never ask
which one they hold. `load_engine` picks one for the files `translate -m` is given.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from . import ct2  # CTranslate2 itself is imported only when an export is used
from .checkpoint import Bundle, load_checkpoint
from .config import DecodeConfig, Recipe
from .errors import CheckpointError, ConfigError
from .model import Transformer
from .search import STOP_RULES, Hypothesis, beam_search, greedy_search
from .tokenizer import EOS_ID, PAD_ID, Tokenizer

ENGINES = ("auto", "torch", "ctranslate2")
QUANTIZE = ("none", "int8")


class Engine(Protocol):
    name: str  # what `--engine` calls it: torch or ctranslate2
    tokenizer: Tokenizer
    recipe: Recipe  # the recipe the model was trained with: its `decode` section is the default
    max_source: int  # source tokens a sentence may have (longer ones are truncated first)
    stop_rules: tuple[str, ...]  # the decode.stop values it honours, the first by default

    def search(self, sources: list[list[int]], settings: DecodeConfig) -> list[list[Hypothesis]]:
        """Up to settings.nbest hypotheses per encoded source, best first."""


class TorchEngine:
    """mtkit's models (an ensemble if several, sharing one vocabulary) and search."""

    name = "torch"
    stop_rules = STOP_RULES

    def __init__(self, models: Sequence[Transformer], tokenizer: Tokenizer, recipe: Recipe,
                 device: torch.device | str = "cpu", use_cache: bool = True):
        self.models = list(models)
        for model in self.models:
            model.eval()  # once here, not per batch: the search runs dropout-free
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.device = torch.device(device)
        self.use_cache = use_cache  # False recomputes every prefix: the benchmarks' reference
        self.max_source = min(m.max_positions for m in self.models) - 1  # room for EOS

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
    def search(self, sources: list[list[int]], settings: DecodeConfig) -> list[list[Hypothesis]]:
        src = pad_sources(sources).to(self.device)
        s = settings
        if s.beam == 1 and s.nbest == 1:
            best = greedy_search(self.models, src, s.max_len_a, s.max_len_b,
                                 use_cache=self.use_cache)
            return [[h] for h in best]
        return beam_search(
            self.models, src, beam=s.beam, lenpen=s.lenpen, nbest=s.nbest,
            max_len_a=s.max_len_a, max_len_b=s.max_len_b, use_cache=self.use_cache,
            stop=s.stop,
        )


def pad_sources(sources: list[list[int]]) -> torch.Tensor:
    """Append EOS and right-pad: (batch, longest + 1)."""
    width = max(len(s) for s in sources) + 1
    out = torch.full((len(sources), width), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sources):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        out[row, len(ids)] = EOS_ID
    return out


def quantize_int8(model: Transformer) -> Transformer:
    """Dynamic int8 quantisation of every linear layer, for CPU inference: weights stored
    in int8, activations quantised on the fly per batch; embeddings stay fp32."""
    with warnings.catch_warnings():
        # torch.ao's eager-mode API and quantized tensors are deprecated in favour of
        # torchao, an extra package; in torch 2.13 they are the in-tree way and work.
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


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
