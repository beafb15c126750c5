"""What `mtkit serve`'s routes run over: the `Service` (the translator that measures
requests, the batcher, the metrics, the limits), the engine that counts what it decodes,
and the batcher's decode function, which every model thread calls."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from mtkit.config import DecodeConfig
from mtkit.decode.engine import Engine
from mtkit.decode.scoring import encode_pairs, score_encoded
from mtkit.decode.search import Hypothesis
from mtkit.decode.translate import Translator
from mtkit.errors import DataError
from mtkit.report.info import ARCHITECTURE
from mtkit.serve.api import Limits, RequestError, Translation
from mtkit.serve.batcher import Batcher
from mtkit.serve.lines import line_links
from mtkit.serve.metrics import ServeMetrics
from mtkit.serve.score_api import ScoreRequest

# the batcher's settings for scoring jobs: batched with each other, never with translations
SCORING = "score"


class MeteredEngine:
    """The engine, counting the lines of every batch it decodes into the metrics."""

    def __init__(self, engine: Engine, metrics: ServeMetrics):
        self.engine = engine
        self.metrics = metrics
        self.name = engine.name
        self.tokenizer = engine.tokenizer
        self.recipe = engine.recipe
        self.max_source = engine.max_source
        self.stop_rules = engine.stop_rules

    def search(self, sources: list[list[int]], settings: DecodeConfig,
               prefixes: list[list[int]] | None = None,
               lines: list[int] | None = None) -> list[list[Hypothesis]]:
        self.metrics.count_batch(len(sources))
        return self.engine.search(sources, settings, prefixes, lines)

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        self.metrics.count_batch(len(sources))
        return self.engine.score(sources, targets)

    def cross_attention(self, sources: list[list[int]], targets: list[list[int]],
                        layer: int) -> list[Tensor]:
        return self.engine.cross_attention(sources, targets, layer)


def decoder(translator: Translator) -> Callable[[Any, list[Any]], list[Any]]:
    """The batcher's decode function, called by every model thread: each thread decodes
    with a Translator of its own over the shared engine, set to the settings its step's
    jobs share. Lines of several requests share a batch, prefixes and samples too: each
    line keeps its request's numbering, so its samples are those it would get alone.
    Scoring jobs (settings SCORING) bring pairs of ids, encoded and checked already."""
    own = threading.local()

    def decode(settings: Any, lines: list[Any]) -> list[Any]:
        if settings == SCORING:
            return score_encoded(translator.engine, [src for src, _ in lines],
                                 [tgt for _, tgt in lines], translator.max_tokens)
        mine = getattr(own, "translator", None)
        if mine is None:
            mine = own.translator = Translator(translator.engine, settings,
                                               translator.max_tokens, translator.tag,
                                               *translator.chosen_langs)
        mine.settings = settings
        found: list[list[Hypothesis]] = [[] for _ in lines]
        for pair in dict.fromkeys(line.pair for line in lines):  # a search per language pair
            chosen = [i for i, line in enumerate(lines) if line.pair == pair]
            prefixes = [lines[i].prefix for i in chosen]
            for i, hyps in zip(chosen, mine.search(
                    [lines[i].text for i in chosen], prefixes=prefixes if any(prefixes) else None,
                    numbers=[lines[i].number for i in chosen], src_lang=pair[0],
                    tgt_lang=pair[1])):
                found[i] = hyps
        texts = [mine.texts(hyps) for hyps in found]  # what `mtkit translate` prints
        links = line_links(mine, lines, found)
        return [Translation(tuple(t), tuple(h.score for h in hyps), len(hyps[0].tokens), each)
                for t, hyps, each in zip(texts, found, links, strict=True)]

    return decode


@dataclass
class Service:
    translator: Translator  # its tokenizer measures requests; the workers decode
    settings: DecodeConfig  # the server's; a request may change beam, lenpen, nbest
    batcher: Batcher
    metrics: ServeMetrics
    limits: Limits
    api_key: str | None
    models: dict[str, Any]  # the /v1/models answer
    # the web origins whose pages may call the API (CORS); none: only pages of this server
    cors_origins: tuple[str, ...] = ()

    def source_lengths(self, lines: list[str], prefixes: list[str]
                       ) -> tuple[list[int], int]:
        """(padded source tokens per line as the engine will see it, inputs truncated:
        sources, and prefixes of non-empty lines, as translate's summary counts them):
        the batcher sizes its steps by the lengths."""
        todo = [i for i, line in enumerate(lines) if line.strip()]
        lengths = [0] * len(lines)
        limit = self.translator.max_source
        tokenizer = self.translator.tokenizer
        encoded = tokenizer.encode_src([lines[i] for i in todo]) if todo else []
        for index, ids in zip(todo, encoded):
            lengths[index] = min(len(ids), limit) + 1  # + EOS
        forced = [prefixes[i] for i in todo if prefixes[i].strip()]
        cut_prefixes = sum(len(ids) > limit for ids in tokenizer.encode_tgt(forced)) \
            if forced else 0
        return lengths, sum(len(ids) > limit for ids in encoded) + cut_prefixes

    def langs(self, pair: tuple[str | None, str | None] = (None, None)) -> tuple[str, str]:
        """The languages a request translates between: its pair's, else the server's."""
        src, tgt = self.translator.langs
        return pair[0] or src, pair[1] or tgt

    def encode_pairs(self, request: ScoreRequest) -> tuple[list[tuple[list[int], list[int]]],
                                                           str | None]:
        """(the request's pairs as ids, the tag given to the sources: the request's, or
        else the server's); 422 for a tag the model lacks or a side over its length."""
        tag = request.tag if request.tag is not None else self.translator.tag
        try:
            tokenizer = self.translator.engine.tokenizer.tagged(tag).with_langs(
                *self.translator.chosen_langs)
            src, tgt, long = encode_pairs(tokenizer, request.sources, request.targets,
                                          self.translator.max_source)
        except DataError as exc:
            raise RequestError(422, str(exc)) from None
        if long:
            first = long[0]
            raise RequestError(422, f"pair {first.index}: the {first.side} has {first.length} "
                                    f"tokens, the model takes at most {first.limit}")
        return list(zip(src, tgt)), tag


def models_answer(translator: Translator, names: list[str], limits: Limits,
                  api_key: str | None, window_ms: float) -> dict[str, Any]:
    engine = translator.engine
    recipe = engine.recipe
    summary = recipe.to_dict()
    summary.pop("data")  # the training machine's file paths
    return {
        "models": [{
            "id": "+".join(names),
            "files": names,
            "engine": engine.name,
            "source": translator.langs[0],  # the pair of requests that name none
            "target": translator.langs[1],
            "architecture": {key: getattr(recipe.model, key) for key in ARCHITECTURE},
            "vocabulary": {"src": translator.tokenizer.src_vocab_size,
                           "tgt": translator.tokenizer.tgt_vocab_size,
                           "joint": translator.tokenizer.joint},
            "max_source_tokens": engine.max_source,
            "decode": {**dataclasses.asdict(translator.settings),
                       "sampling": str(translator.settings.sampling)},
            "recipe": summary,
        }],
        "limits": dataclasses.asdict(limits),
        "batching": {"window_ms": window_ms, "max_tokens": translator.max_tokens},
        "api_key_required": api_key is not None,
    }
