"""The web app of `mtkit serve` (FastAPI): routes over one `Service` (service.py).

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
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from mtkit.config import DecodeConfig
from mtkit.decode.scoring import pair_lengths
from mtkit.document.pipeline import DocumentOptions
from mtkit.document.split import splitter_available
from mtkit.serve.api import (
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
)
from mtkit.serve.batcher import BatcherClosed, QueueFull
from mtkit.serve.bodies import parse_form, parse_json
from mtkit.serve.lines import (
    SourceLine,
    document_lines,
    document_options,
    document_results,
    prepared_lines,
    source_lines,
)
from mtkit.serve.metrics import CONTENT_TYPE, ServeMetrics
from mtkit.serve.schemas import LIBRE_SCHEMA, NATIVE_SCHEMA, SCORE_SCHEMA, body_schema
from mtkit.serve.score_api import score_answer, score_request
from mtkit.serve.service import SCORING, Service

log = logging.getLogger("mtkit")

TRANSLATION_ENDPOINTS = ("/translate", "/v1/translate")
ENDPOINTS = ("/", "/health", "/languages", "/metrics", "/v1/models", "/v1/score",
             *TRANSLATION_ENDPOINTS)
CLIENT_GONE = 499  # nginx's status for a request whose client closed the connection


# --------------------------------------------------------------------------- the app


def build_app(service: Service) -> FastAPI:
    app = FastAPI(title="mtkit serve", summary="Machine translation with mtkit's engines.",
                  version=service.models["models"][0]["id"])
    app.add_middleware(RequestCounter, metrics=service.metrics)
    if service.cors_origins:  # pages elsewhere that call the API (a browser asks first)
        app.add_middleware(CORSMiddleware, allow_origins=list(service.cors_origins),
                           allow_methods=["GET", "HEAD", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
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
    lengths, truncated = service.source_lengths([line.text for line in lines],
                                                [line.prefix for line in lines])
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
