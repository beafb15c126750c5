"""`mtkit serve`: the model behind HTTP (needs the extra: pip install 'mtkit[serve]').

`serve(options)` checks the options, loads the model (as `mtkit translate` does), binds
the port, and runs the app (app.py) under uvicorn in a thread, while the main thread
(and with `workers` > 1 that many model threads in all) decodes the batcher's steps
(batcher.py). On SIGTERM or SIGINT the listening socket closes (new connections
are refused), requests in flight are answered, the batcher finishes its queue, and the
process exits 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mtkit.decode.choices import DecodeChoices
from mtkit.decode.stats import counted
from mtkit.document.split import require_splitter
from mtkit.errors import ConfigError
from mtkit.runtime.devices import threads_each
from mtkit.serve.api import Limits

if TYPE_CHECKING:
    from mtkit.serve.batcher import Batcher
    from mtkit.serve.service import Service

log = logging.getLogger("mtkit")
GRACE_SECONDS = 30  # how long requests in flight may take to finish after SIGTERM
BACKLOG = 1024  # connections the kernel holds for the server to accept


@dataclass(frozen=True)
class ServeOptions:
    models: tuple[Path, ...]
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (the log line says which)
    decode: DecodeChoices = DecodeChoices()  # as translate's
    tag: str | None = None  # a corpus tag to start every line with
    src_lang: str | None = None  # a multilingual model's pair for requests that name none
    tgt_lang: str | None = None  # (None: the model's default)
    quantize: str = "none"
    device: str = "auto"
    threads: int = 0  # torch threads of each worker; 0: the cores shared among the workers
    workers: int = 1  # model threads, each decoding a batch of its own
    processes: int = 1  # server processes on the port, each with its own model and workers
    engine: str = "auto"
    max_tokens: int = 4096  # source tokens per batch, padding included
    batch_window_ms: float = 5.0
    limits: Limits = field(default_factory=Limits)
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()  # web origins whose pages may call the API; "*": any


def web_server() -> ModuleType:
    """uvicorn, once it and FastAPI are found; else the one-line error that says how to
    install them."""
    try:
        import fastapi  # noqa: F401 - serve/app.py's, imported here to check it is there
        import uvicorn
    except ImportError:
        raise ConfigError("mtkit serve needs FastAPI and uvicorn; install the extra: "
                          "pip install 'mtkit[serve]'") from None
    return uvicorn


def check_options(options: ServeOptions) -> None:
    limits = options.limits
    numbers = {"--port": (options.port, 0, 65535), "--max-tokens": (options.max_tokens, 1, None),
               "--batch-window-ms": (options.batch_window_ms, 0, 10_000),
               "--max-body-bytes": (limits.max_body_bytes, 1, None),
               "--max-lines": (limits.max_lines, 1, None),
               "--max-chars": (limits.max_chars, 1, None),
               "--max-queue": (limits.max_queue, 1, None),
               "--max-beam": (limits.max_beam, 1, 1000),
               "--workers": (options.workers, 1, 64),
               "--processes": (options.processes, 1, 64)}
    for flag, (value, low, high) in numbers.items():
        if value < low or (high is not None and value > high):
            expected = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{flag} {value}: out of range; expected {expected}")
    if limits.max_lines > limits.max_queue:
        raise ConfigError(f"--max-lines {limits.max_lines} exceeds --max-queue "
                          f"{limits.max_queue}: such a request could never be queued")
    if options.api_key is not None and not options.api_key.strip():
        raise ConfigError("--api-key (or MTKIT_API_KEY): empty; give a key, or leave both "
                          "out to serve without one")
    for origin in options.cors_origins:  # a browser sends scheme://host[:port], no path
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise ConfigError(f"--cors-origin {origin}: expected * or an origin such as "
                              "https://app.example.org (scheme and host, no path)")
    if options.decode.split:
        require_splitter()  # rather than a 400 for every request that keeps the default


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as exc:
        from mtkit.serve.processes import cannot_listen

        raise cannot_listen(host, port, exc) from None


def serve(options: ServeOptions) -> None:
    web_server()
    check_options(options)
    if options.processes == 1:
        serve_here(options, listen(options.host, options.port))
        return
    from mtkit.serve.processes import bind_group, run_group

    sockets = bind_group(options.host, options.port, options.processes)
    address = _address(sockets[0])
    run_group(sockets, serve_child, (options,),
              on_ready=lambda served: log.info("serving %s on %s (page /, API docs /docs), "
                                               "%d processes", served, address,
                                               options.processes))


def serve_child(options: ServeOptions, sock: socket.socket, report: Any, log_level: int) -> None:
    """One process of `--processes N` (processes.py): the whole server on `sock`,
    which it starts to listen on once the model is loaded."""
    from mtkit.errors import MtkitError
    from mtkit.runtime.logs import log_to_stderr

    log_to_stderr(log_level)
    try:
        serve_here(options, sock, report)
    except MtkitError as exc:
        report.send(("error", str(exc), exc.exit_code))
        raise SystemExit(exc.exit_code) from None


def serve_here(options: ServeOptions, sock: socket.socket, report: Any = None) -> None:
    """The server in this process, on a listening socket; or, with `report` (a pipe to
    the parent of a process group), on a bound one that it starts to listen on once the
    model is loaded, saying ("ready", what it serves) then."""
    uvicorn = web_server()
    from mtkit.serve.app import build_app

    threads = _threads_per_worker(options)
    service = _service(options, threads)
    config = uvicorn.Config(build_app(service), log_config=None, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=GRACE_SECONDS)
    server = uvicorn.Server(config)
    _forward_uvicorn_logs()
    if options.workers > 1 and report is None:  # before the line that says the server is up
        log.info("%d model workers, %s each", options.workers, counted(threads, "thread"))
    src, tgt = service.translator.langs
    served = f"{' + '.join(map(str, options.models))} ({src} -> {tgt})"
    if report is None:
        log.info("serving %s on %s (page /, API docs /docs)", served, _address(sock))
    else:
        sock.listen(BACKLOG)
        report.send(("ready", served))
    _run_until_stopped(server, sock, service.batcher, options.workers)
    log.info("stopped: %d lines translated", service.metrics.lines)


def _threads_per_worker(options: ServeOptions) -> int:
    """--threads, or for 0 with several model threads (workers, processes) the cores
    shared out among them."""
    model_threads = options.workers * options.processes
    if options.threads == 0 and model_threads > 1:
        return threads_each(model_threads)
    return options.threads


def _service(options: ServeOptions, threads: int) -> Service:
    """The model loaded (as `mtkit translate` loads it), metered, behind a batcher."""
    from mtkit.decode.choices import OPTION_NAMES
    from mtkit.decode.translate import Translator
    from mtkit.serve.batcher import Batcher
    from mtkit.serve.metrics import ServeMetrics
    from mtkit.serve.service import MeteredEngine, Service, decoder, models_answer

    loaded = Translator.load(
        options.models, device=options.device, threads=threads,
        quantize=options.quantize, engine=options.engine, max_tokens=options.max_tokens,
        option_names=OPTION_NAMES, tag=options.tag, src_lang=options.src_lang,
        tgt_lang=options.tgt_lang, **dataclasses.asdict(options.decode),
    )  # a language the model lacks, or any for a model of one pair: an error
    metrics = ServeMetrics()
    translator = Translator(MeteredEngine(loaded.engine, metrics), loaded.settings,
                            options.max_tokens, options.tag, *loaded.chosen_langs)
    models = models_answer(loaded, [str(p) for p in options.models], options.limits,
                           options.api_key, options.batch_window_ms)
    batcher = Batcher(decoder(translator), window=options.batch_window_ms / 1000,
                      max_tokens=options.max_tokens,
                      max_queue_lines=options.limits.max_queue)
    return Service(translator, translator.settings, batcher, metrics, options.limits,
                   options.api_key, models, options.cors_origins)


def _run_until_stopped(server: Any, sock: socket.socket, batcher: Batcher,
                       workers: int) -> None:
    """HTTP in a thread of its own; the model in this (the main) thread and in the other
    workers' threads, until a signal stops the server and the batcher has drained."""
    failed: list[BaseException] = []

    def serve_http() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            failed.append(exc)
        finally:
            batcher.close()  # the model's loop ends once the last request is answered

    # the model runs in the main thread because torch's CPU threads run slower for a
    # thread started later
    http = threading.Thread(target=serve_http, name="mtkit-http", daemon=True)
    others = [threading.Thread(target=batcher.run, name=f"mtkit-model-{n}", daemon=True)
              for n in range(1, workers)]
    with _signals_stop(server):
        http.start()
        for worker in others:
            worker.start()
        batcher.run()
        for worker in others:
            worker.join()
    http.join()
    sock.close()
    if failed:
        raise failed[0]


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextlib.contextmanager
def _signals_stop(server: Any) -> Iterator[None]:
    """SIGTERM or SIGINT: a graceful stop (uvicorn closes the socket, answers the requests
    in flight, returns), a success; a second SIGINT stops without waiting."""

    def stop(signum: int, frame: object) -> None:
        if server.should_exit and signum == signal.SIGINT:
            server.force_exit = True
        server.should_exit = True
        log.info("%s: refusing new connections, answering the requests in flight",
                 signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forward_uvicorn_logs() -> None:
    """uvicorn's warnings and errors go to mtkit's stderr handler, in its format."""
    mtkit_log = logging.getLogger("mtkit")
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = mtkit_log.handlers
        logger.setLevel(logging.WARNING)
        logger.propagate = False
