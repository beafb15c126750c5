"""The web app of `mtkit serve` (FastAPI): routes over one `Service`.

A translation request is read (bounded), parsed and checked (serve/api.py), measured in
source tokens, and queued in the batcher; its handler then waits for either the result
or the client going away, whichever comes first. A client that leaves takes its lines out
of the queue, or, if they are being decoded already, its result is dropped: either way
no one waits for it. A scoring request (`/v1/score`) goes the same way, its pairs
encoded and checked before they are queued (settings SCORING: batched only with other
pairs). The model runs only in the threads in `Batcher.run()` (the main thread and any
further workers), never on the event loop. Every error answer is `{"error": "one line"}`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from torch import Tensor

from mtkit.config import DecodeConfig
from mtkit.decode.engine import Engine
from mtkit.decode.scoring import encode_pairs, pair_lengths, score_encoded
from mtkit.decode.search import Hypothesis
from mtkit.decode.translate import Translator
from mtkit.document.pipeline import DocumentOptions
from mtkit.document.split import splitter_available
from mtkit.errors import DataError
from mtkit.report.info import ARCHITECTURE
from mtkit.serve.api import (
    Limits,
    RequestError,
    Translation,
    check_api_key,
    documents_apply,
    libre_answer,
    libre_request,
    libre_settings,
    native_answer,
    native_request,
    native_settings,
    parse_form,
    parse_json,
)
from mtkit.serve.batcher import Batcher, BatcherClosed, QueueFull
from mtkit.serve.lines import (
    SourceLine,
    document_lines,
    document_options,
    document_results,
    line_links,
    prepared_lines,
    source_lines,
)
from mtkit.serve.metrics import CONTENT_TYPE, ServeMetrics
from mtkit.serve.schemas import LIBRE_SCHEMA, NATIVE_SCHEMA, SCORE_SCHEMA, body_schema
from mtkit.serve.score_api import ScoreRequest, score_answer, score_request

log = logging.getLogger("mtkit")

TRANSLATION_ENDPOINTS = ("/translate", "/v1/translate")
ENDPOINTS = ("/", "/health", "/languages", "/metrics", "/v1/models", "/v1/score",
             *TRANSLATION_ENDPOINTS)
# the batcher's settings for scoring jobs: batched with each other, never with translations
SCORING = "score"
CLIENT_GONE = 499  # nginx's status for a request whose client closed the connection


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

    def source_lengths(self, lines: list[str]) -> tuple[list[int], int]:
        """(padded source tokens per line as the engine will see it, lines truncated):
        the batcher sizes its steps by these."""
        todo = [i for i, line in enumerate(lines) if line.strip()]
        lengths = [0] * len(lines)
        limit = self.translator.max_source
        truncated = 0
        encoded = self.translator.tokenizer.encode_src([lines[i] for i in todo]) if todo else []
        for index, ids in zip(todo, encoded):
            truncated += len(ids) > limit
            lengths[index] = min(len(ids), limit) + 1  # + EOS
        return lengths, truncated

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


# --------------------------------------------------------------------------- the app


def build_app(service: Service) -> FastAPI:
    app = FastAPI(title="mtkit serve", summary="Machine translation with mtkit's engines.",
                  version=service.models["models"][0]["id"])
    app.add_middleware(RequestCounter, metrics=service.metrics)
    _answer_errors_in_json(app)
    _add_reading_routes(app, service)
    _add_translation_routes(app, service)
    return app


def _add_reading_routes(app: FastAPI, service: Service) -> None:
    """The GET (and HEAD) routes: the page, health, the model, its languages, the
    metrics."""
    page = resources.files("mtkit").joinpath("serve", "page.html").read_text(encoding="utf-8")
    langs = service.translator.engine.recipe.data.langs
    codes = service.translator.tokenizer.languages

    def read(path: str, **route: Any) -> Callable[[Callable], Callable]:
        """A GET route, which answers HEAD too (as GET, without the body: uptime monitors
        ask so); the API docs list GET alone."""
        def add(endpoint: Callable) -> Callable:
            app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False,
                              **{k: v for k, v in route.items() if k == "response_class"})
            return app.get(path, **route)(endpoint)
        return add

    @read("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    @read("/health", summary="200 while the model is loaded and requests are taken")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queue_lines": service.batcher.queued_lines}

    @read("/v1/models", summary="The model: languages, architecture, decode settings")
    async def models() -> dict[str, Any]:
        return service.models

    @read("/languages", summary="LibreTranslate's list of languages")
    async def languages() -> list[dict[str, Any]]:
        if codes:  # a multilingual model: any of its languages into any other
            return [{"code": c, "name": c, "targets": [t for t in codes if t != c]}
                    for c in codes]
        return [{"code": langs.src, "name": langs.src, "targets": [langs.tgt]}]

    @read("/metrics", response_class=PlainTextResponse,
          summary="Prometheus text format: requests, lines, tokens, latency, batches")
    async def metrics() -> Response:
        text = service.metrics.text(service.batcher.queued_lines)
        return Response(text, media_type=CONTENT_TYPE)


def _add_translation_routes(app: FastAPI, service: Service) -> None:
    """The POST routes: LibreTranslate's /translate, the native /v1/translate, /v1/score."""
    langs = service.translator.engine.recipe.data.langs
    codes = service.translator.tokenizer.languages
    splitter = splitter_available()
    if not splitter:
        log.warning("sentencex is not installed: /translate does not split sentences, and "
                    "split requests get 400 (pip install 'mtkit[split]')")

    @app.post("/translate", summary="LibreTranslate-compatible translation",
              openapi_extra=body_schema(LIBRE_SCHEMA))
    async def translate_libre(request: Request) -> Response:
        payload = await _payload(request, service, form=True)
        parsed = libre_request(payload, langs, service.limits, codes)
        settings = libre_settings(service.settings, parsed, service.limits)
        results, _ = await _translate_lines(
            request, service, settings, list(parsed.lines), pair=parsed.pair,
            document=None if parsed.alternatives else document_options(
                parsed.document, settings, service.langs(parsed.pair), splitter, False))
        if results is None:
            return Response(status_code=CLIENT_GONE)
        return JSONResponse(libre_answer(parsed, results))

    @app.post("/v1/translate", summary="Lines in, hypotheses and scores out",
              openapi_extra=body_schema(NATIVE_SCHEMA))
    async def translate_native(request: Request) -> Response:
        payload = await _payload(request, service)
        parsed = native_request(payload, service.limits)
        settings = native_settings(service.settings, parsed, service.limits)
        document = document_options(parsed.document, settings, service.langs(), splitter, True)
        document = document if documents_apply(parsed, settings, document) else None
        results, truncated = await _translate_lines(
            request, service, settings, list(parsed.lines), parsed.prefixes,
            parsed.alignments, document=document)
        if results is None:
            return Response(status_code=CLIENT_GONE)
        return JSONResponse(native_answer(settings, results, parsed.scores, truncated))

    @app.post("/v1/score", summary="Given translations scored: log-probabilities",
              openapi_extra=body_schema(SCORE_SCHEMA))
    async def score(request: Request) -> Response:
        payload = await _payload(request, service)
        parsed = score_request(payload, service.limits)
        pairs, tag = service.encode_pairs(parsed)
        results = await _queued(request, service, SCORING, pairs,
                                pair_lengths([s for s, _ in pairs], [t for _, t in pairs]))
        if results is None:
            return Response(status_code=CLIENT_GONE)
        return JSONResponse(score_answer(results, tag))


def _answer_errors_in_json(app: FastAPI) -> None:
    """Every error answer as {"error": "one line"}, whatever raised it."""

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return JSONResponse({"error": exc.message}, exc.status, headers=headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse({"error": f"{where}: {first.get('msg')}"}, 422)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)


async def _payload(request: Request, service: Service, form: bool = False) -> Any:
    """The body, read within the size limit, as JSON (with `form`, LibreTranslate's
    form-encoded fields too), with the API key checked."""
    limit = service.limits.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body has {declared} bytes: at most {limit} are taken")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise RequestError(413, f"the body has more than {limit} bytes: at most "
                                        f"{limit} are taken")
    except ClientDisconnect:
        raise RequestError(CLIENT_GONE, "the client left before sending the whole body") \
            from None
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if form and content_type == "multipart/form-data":
        raise RequestError(415, "a multipart body is not taken: send JSON, or the fields "
                                "as application/x-www-form-urlencoded")
    # curl -d sends JSON labelled as a form: a body that opens an object is JSON
    if form and content_type == "application/x-www-form-urlencoded" \
            and not bytes(body).lstrip().startswith(b"{"):
        payload = parse_form(bytes(body))
    else:
        payload = parse_json(bytes(body))
    check_api_key(service.api_key, payload, request.headers.get("authorization"))
    return payload


async def _translate_lines(
    request: Request, service: Service, settings: DecodeConfig, lines: list[str],
    prefixes: tuple[str, ...] | None = None, alignments: str | None = None,
    pair: tuple[str | None, str | None] = (None, None), document: DocumentOptions | None = None,
) -> tuple[list[Translation] | None, int]:
    """As `_translate`, lines as they are, or, with `document`, their sentences queued
    and the translations joined back into lines (mtkit.document)."""
    if document is None:
        return await _translate(request, service, settings,
                                source_lines(lines, prefixes, alignments, pair))
    prepared = prepared_lines(lines, document, service.limits.max_queue)
    results, truncated = await _translate(request, service, settings,
                                          document_lines(prepared, alignments, pair))
    if results is None:
        return None, truncated
    return document_results(prepared, results, document, alignments), truncated


async def _translate(request: Request, service: Service, settings: DecodeConfig,
                     lines: list[SourceLine]) -> tuple[list[Translation] | None, int]:
    """(the lines' results, or None when the client left first; lines truncated)."""
    lengths, truncated = service.source_lengths([line.text for line in lines])
    results = await _queued(request, service, settings, lines, lengths)
    if results is not None:
        service.metrics.count_translated(len(lines), truncated, sum(lengths),
                                         sum(r.tokens for r in results))
    return results, truncated


async def _queued(request: Request, service: Service, settings: Any, lines: list[Any],
                  lengths: list[int]) -> list[Any] | None:
    """The lines' results from the batcher, or None when the client left first."""
    try:
        future = service.batcher.submit(settings, lines, lengths, request.client)
    except QueueFull as exc:
        raise RequestError(503, f"the server is busy ({exc}); retry later", retry_after=1) \
            from None
    except BatcherClosed:
        raise RequestError(503, "the server is shutting down", retry_after=1) from None
    return await _unless_client_leaves(request, future)


async def _unless_client_leaves(request: Request, future: Future) -> list[Translation] | None:
    result = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_client_gone(request))
    done, _ = await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    if result in done:
        gone.cancel()
        return result.result()
    result.cancel()  # cancels the queued job; a job being decoded finishes unheard
    return None


async def _client_gone(request: Request) -> None:
    """Returns when the client closes the connection (the body was read already, so the
    next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class RequestCounter:
    """ASGI middleware: every answered request counted by endpoint and status, and the
    latency of translation requests."""

    def __init__(self, app: Any, metrics: ServeMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_and_note(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            path = scope["path"]
            endpoint = path if path in ENDPOINTS or path.startswith("/docs") else "other"
            seconds = time.perf_counter() - start if path in TRANSLATION_ENDPOINTS else None
            self.metrics.count_request(endpoint, status, seconds)
