"""`mtkit serve --processes N`: N server processes on one port, each with its own model.

Why processes and not only threads (`--workers`): a decode step is a few hundred small
torch operators, with Python between them that holds the GIL, so two model threads in
one process wait on each other, and a second intra-op thread barely shares the small
operators of a step's last, nearly empty positions. Processes share neither (the
measured difference: docs/benchmarks.md).

How: the parent binds N sockets to the port with SO_REUSEPORT, so that the kernel
spreads connections among them, and starts N children (multiprocessing's spawn: a
fresh interpreter, nothing inherited from torch's threads). Each child runs the whole
one-process server (server.py) on its socket: it loads the model, then listens, then
says so through a pipe; the parent logs the address once every child has. A bound
socket refuses connections until it listens, so, as with one process, the port opens
only once the model is loaded. SIGTERM or SIGINT to the parent is passed on as SIGTERM
to every child (each answers its requests in flight and exits 0); a child that fails
to start, or dies while serving, stops the others, and the parent exits with its error.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from mtkit.errors import ConfigError, MtkitError

log = logging.getLogger("mtkit")
STOP_SECONDS = 60  # how long children may take to answer their requests after a stop


def bind_group(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets bound to one address with SO_REUSEPORT, not yet listening (port 0:
    the first takes a free port, the others join it)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--processes needs SO_REUSEPORT (Linux); use --workers instead")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            # SO_REUSEADDR as create_server sets it for one process: a port whose last
            # server just stopped (connections in TIME_WAIT, for a minute) binds again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise cannot_listen(host, port, exc) from None
    return sockets


def cannot_listen(host: str, port: int, exc: OSError) -> ConfigError:
    """The one-line error for an address the server cannot take."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno is not None and exc.errno < 0:  # getaddrinfo's code: the name did not
        try:  # resolve (create_server passes on only the code); asking again gives the words
            socket.getaddrinfo(host, port)
        except socket.gaierror as again:
            why = f"cannot resolve the name: {again.strerror}"
    return ConfigError(f"--host {host} --port {port}: cannot listen there ({why})")


class ChildFailed(MtkitError):
    """A server process failed to start or died; it said why, or its exit code does."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def run_group(sockets: list[socket.socket], child: Callable[..., None], args: tuple,
              on_ready: Callable[[str], None]) -> None:
    """Run child(*args, sock, report, log_level) in one spawned process per socket until
    they all exit; on_ready(what) once each has reported ("ready", what it serves) on its
    pipe. A child reports ("error", message, exit_code) instead when it cannot start."""
    spawn = multiprocessing.get_context("spawn")
    children: list[Any] = []
    reports: dict[Connection, int] = {}
    with _forward_stops(children) as stopping:
        for number, sock in enumerate(sockets, 1):
            ours, theirs = spawn.Pipe(duplex=False)
            process = spawn.Process(target=child, name=f"mtkit-serve-{number}",
                                    args=(*args, sock, theirs, log.getEffectiveLevel()))
            process.start()
            theirs.close()
            sock.close()  # the child has its own copy
            children.append(process)
            reports[ours] = number
        try:
            served = _wait_until_ready(children, reports, stopping)
            if not stopping:
                on_ready(served)
            _wait_while_serving(children, stopping)
        except BaseException:
            _stop(children)
            raise


def _wait_until_ready(children: list[Any], reports: dict[Connection, int],
                      stopping: list[int]) -> str:
    """What the children serve, once every one has said it is ready (or a stop came)."""
    served = ""
    sentinels = {process.sentinel: number for number, process in enumerate(children, 1)}
    while reports and not stopping:
        for ready in wait([*reports, *sentinels]):
            if ready in sentinels:
                number = sentinels[ready]
                if number in reports.values() or stopping:
                    continue  # its pipe says why (read below), or it was told to stop
                children[number - 1].join()
                raise ChildFailed(f"serve process {number} exited with code "
                                  f"{children[number - 1].exitcode} while the others started")
            number = reports.pop(ready)
            try:
                report = ready.recv()
            except EOFError:  # it ended before it could say
                process = children[number - 1]
                process.join()
                if stopping:
                    continue
                raise ChildFailed(f"serve process {number} exited with code "
                                  f"{process.exitcode} while starting") from None
            if report[0] == "error":
                raise ChildFailed(report[1], report[2])
            served = report[1]
    return served


def _wait_while_serving(children: list[Any], stopping: list[int]) -> None:
    """Until every child has exited: fine after a stop; before one, a child that ends
    is a failure, and the others are stopped."""
    left = {process.sentinel: process for process in children}
    while left:
        for ended in wait(list(left)):
            process = left.pop(ended)
            process.join()
            stopped_early = process.exitcode == -signal.SIGTERM and stopping
            if process.exitcode != 0 and not stopped_early:
                raise ChildFailed(f"{process.name} exited with code {process.exitcode}; "
                                  "the other server processes were stopped")
            if not stopping:
                raise ChildFailed(f"{process.name} stopped serving; the other server "
                                  "processes were stopped")


def _stop(children: list[Any]) -> None:
    for process in children:
        if process.exitcode is None:
            os.kill(process.pid, signal.SIGTERM)
    for process in children:
        process.join(STOP_SECONDS)
        if process.exitcode is None:
            process.kill()
            process.join()


@contextlib.contextmanager
def _forward_stops(children: list[Any]) -> Iterator[list[int]]:
    """SIGTERM or SIGINT to the parent: SIGTERM to every child; the list it yields holds
    the signals received."""
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if not received:
            log.info("%s: stopping the server processes", signal.Signals(signum).name)
        received.append(signum)
        for process in children:
            if process.exitcode is None and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
