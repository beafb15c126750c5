"""Streaming translation: lines in -> bounded buffers -> length-sorted token batches ->
search -> lines out, in input order.

The line contract: exactly one output line per input line (or `nbest` lines, see
`format_hypotheses`), in input order, always. Empty input lines give empty output lines
without running the model; over-long inputs are truncated (counted, warned), never
dropped; invalid UTF-8 is replaced with U+FFFD and counted.
"""

from __future__ import annotations

import logging
import os
import select
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from .checkpoint import load_checkpoint
from .config import Recipe, recipe_from_dict
from .data import token_batches
from .errors import CheckpointError
from .model import Transformer
from .search import Hypothesis, beam_search, greedy_search
from .tokenizer import EOS_ID, PAD_ID, Tokenizer

log = logging.getLogger("mtkit")


@dataclass(frozen=True)
class DecodeOptions:
    beam: int = 5
    lenpen: float = 1.0
    stop: str = "early"  # "early" or "exact": see DecodeConfig.stop
    nbest: int = 1
    max_len_a: float = 1.2
    max_len_b: int = 10
    max_tokens: int = 4096
    scores: bool = False
    use_cache: bool = True  # False recomputes every prefix: the reference for benchmarks


@dataclass
class Stats:
    sentences: int = 0
    tokens: int = 0  # target tokens produced (best hypothesis, without EOS)
    truncated: int = 0
    invalid_utf8: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        rate = self.sentences / max(self.seconds, 1e-9)
        text = (
            f"translated {self.sentences} sentences, {self.tokens} tokens in "
            f"{self.seconds:.1f}s ({rate:.1f} sentences/s)"
        )
        if self.truncated:
            text += f"; {self.truncated} inputs truncated"
        if self.invalid_utf8:
            text += f"; {self.invalid_utf8} lines had invalid UTF-8 (replaced)"
        return text


# --------------------------------------------------------------------------- models


def load_models(
    paths: list[Path], device: torch.device
) -> tuple[list[Transformer], Tokenizer, Recipe]:
    """Load one or more model bundles (an ensemble must share its vocabulary)."""
    bundles = [load_checkpoint(path) for path in paths]
    first = bundles[0]
    for path, bundle in zip(paths[1:], bundles[1:]):
        if (bundle["spm_src"], bundle["spm_tgt"]) != (first["spm_src"], first["spm_tgt"]):
            raise CheckpointError(
                f"{path}: its vocabulary differs from {paths[0]}; an ensemble needs models "
                "trained with the same tokenizer"
            )
    tokenizer = Tokenizer.from_bytes(first["spm_src"], first["spm_tgt"])
    models = [model_from_bundle(b, tokenizer, str(p)).to(device) for p, b in zip(paths, bundles)]
    return models, tokenizer, recipe_from_dict(first["recipe"], where=str(paths[0]))


def model_from_bundle(bundle: dict, tokenizer: Tokenizer, where: str) -> Transformer:
    """The model a checkpoint bundle describes, with its weights, in eval mode."""
    recipe = recipe_from_dict(bundle["recipe"], where=where)
    model = Transformer(recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    try:
        model.load_state_dict(bundle["model"])
    except RuntimeError:
        raise CheckpointError(f"{where}: weights do not match the model it describes") from None
    return model.eval()


def quantize_int8(model: Transformer) -> Transformer:
    """Dynamic int8 quantisation of every linear layer, for CPU inference: weights stored
    in int8, activations quantised on the fly per batch; embeddings stay fp32."""
    with warnings.catch_warnings():
        # torch.ao's eager-mode API and quantized tensors are deprecated in favour of
        # torchao, an extra package; in torch 2.13 they are the in-tree way and work.
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def pad_sources(sources: list[list[int]]) -> torch.Tensor:
    """Append EOS and right-pad: (batch, longest + 1)."""
    width = max(len(s) for s in sources) + 1
    out = torch.full((len(sources), width), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sources):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        out[row, len(ids)] = EOS_ID
    return out


# --------------------------------------------------------------------------- translating


class TorchEngine:
    """Decodes encoded sources with mtkit's own models and search (an ensemble if several)."""

    def __init__(self, models: list[Transformer], device: torch.device):
        self.models = models
        self.device = device
        self.max_source = min(m.cfg.max_positions for m in models) - 1  # room for EOS

    @torch.inference_mode()
    def __call__(self, sources: list[list[int]], opts: DecodeOptions) -> list[list[Hypothesis]]:
        src = pad_sources(sources).to(self.device)
        if opts.beam == 1 and opts.nbest == 1:
            best = greedy_search(self.models, src, opts.max_len_a, opts.max_len_b,
                                 use_cache=opts.use_cache)
            return [[h] for h in best]
        return beam_search(
            self.models, src, beam=opts.beam, lenpen=opts.lenpen, nbest=opts.nbest,
            max_len_a=opts.max_len_a, max_len_b=opts.max_len_b, use_cache=opts.use_cache,
            stop=opts.stop,
        )


class Translator:
    """Text lines in, hypotheses out; the engine (mtkit's models, or a CTranslate2 model:
    see ct2.py) sees only non-empty, token-bounded batches of encoded sources."""

    def __init__(
        self,
        engine: list[Transformer] | Any,
        tokenizer: Tokenizer,
        options: DecodeOptions,
        device: torch.device | None = None,
    ):
        if isinstance(engine, list):
            engine = TorchEngine(engine, device or torch.device("cpu"))
        self.engine = engine
        self.tokenizer = tokenizer
        self.options = options
        self.max_source = engine.max_source
        self.stats = Stats()

    def translate(self, lines: list[str]) -> list[list[Hypothesis]]:
        """n-best hypotheses per line (empty lines get one empty hypothesis)."""
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]
        encoded = self.tokenizer.encode_src([lines[i] for i in todo]) if todo else []
        for k, ids in enumerate(encoded):
            if len(ids) > self.max_source:
                encoded[k] = ids[: self.max_source]
                self.stats.truncated += 1
                if self.stats.truncated <= 3:  # then only counted, in the summary line
                    log.warning(
                        "input line %d: %d tokens, truncated to the model's %d%s",
                        self.stats.sentences + todo[k] + 1, len(ids), self.max_source,
                        "; further truncations are counted in the summary"
                        if self.stats.truncated == 3 else "",
                    )
        opts = self.options
        for batch in token_batches([len(ids) + 1 for ids in encoded], opts.max_tokens):
            found = self.engine([encoded[k] for k in batch], opts)
            for k, hyps in zip(batch, found):
                results[todo[k]] = hyps
        self.stats.sentences += len(lines)
        self.stats.tokens += sum(len(r[0].tokens) for r in results)
        return results

    def format(self, hyps_per_line: list[list[Hypothesis]], first_index: int) -> list[str]:
        """Output lines: one per input, or `index<TAB>score<TAB>text` n-best rows."""
        out = []
        for offset, hyps in enumerate(hyps_per_line):
            texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
            texts = [_one_line(t) for t in texts]
            if self.options.nbest > 1:
                out += [f"{first_index + offset}\t{h.score:.4f}\t{t}" for h, t in zip(hyps, texts)]
            elif self.options.scores:
                out.append(f"{texts[0]}\t{hyps[0].score:.4f}")
            else:
                out.append(texts[0])
        return out


def _one_line(text: str) -> str:
    """A hypothesis must never break the line contract."""
    return text.replace("\r", " ").replace("\n", " ")


# --------------------------------------------------------------------------- streaming


def read_line_buffers(fd: int, max_lines: int) -> Iterator[list[bytes]]:
    """Yield lists of raw lines (split on b'\\n' only) as soon as input pauses or
    `max_lines` are waiting, so interactive use answers each line at once while a
    pipe or file is processed in full buffers."""
    pending = b""
    lines: list[bytes] = []
    while True:
        while len(lines) >= max_lines:
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if lines and not _readable_now(fd):
            yield lines
            lines = []
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        pending += chunk
        if b"\n" in chunk:
            *complete, pending = pending.split(b"\n")
            lines.extend(complete)
    if pending:
        lines.append(pending)
    while lines:
        yield lines[:max_lines]
        lines = lines[max_lines:]


def _readable_now(fd: int) -> bool:
    try:
        ready, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def decode_lines(raw: list[bytes], stats: Stats) -> list[str]:
    lines = []
    for line in raw:
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            stats.invalid_utf8 += 1
            lines.append(line.decode("utf-8", errors="replace"))
    return lines


def translate_stream(
    translator: Translator, in_fd: int, out: BinaryIO, buffer_lines: int = 2000
) -> Stats:
    """Translate everything readable from in_fd to out, flushing after every buffer."""
    start = time.perf_counter()
    index = 0
    for raw in read_line_buffers(in_fd, buffer_lines):
        lines = decode_lines(raw, translator.stats)
        results = translator.translate(lines)
        text = "".join(line + "\n" for line in translator.format(results, index))
        out.write(text.encode("utf-8"))
        out.flush()
        index += len(lines)
    translator.stats.seconds = time.perf_counter() - start
    if translator.stats.invalid_utf8:
        log.warning(
            "%d input lines had invalid UTF-8; bad bytes were replaced with U+FFFD",
            translator.stats.invalid_utf8,
        )
    return translator.stats
