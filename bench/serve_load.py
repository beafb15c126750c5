"""Benchmark: `mtkit serve` under N concurrent clients, against offline `mtkit translate`.

Makes L lines (Bible test verses cut to mixed lengths), translates them offline with
`mtkit translate` (its own summary gives lines/s without the model load) and keeps that
output as the expected answers; offline runs again right before and right after each
server measurement, and each ratio is to the mean of the two, so that it compares
figures taken side by side on a machine whose speed drifts. For each server mode it starts
`mtkit serve` on a free loopback port and lets N client threads (stdlib http.client, one
keep-alive connection each) send one line per request to POST /translate, each line
once, until all are done or the time bound passes. Every answer is compared with the offline line.

Modes: `batched` (the server's defaults: a 5 ms window, --max-tokens 4096, one model
thread with --threads), `workers` (the same with --workers 2 --threads 1: two model
threads of one CPU thread each, decoding batches side by side), `processes` (--processes
2 --threads 1: two server processes on the port, one CPU thread each) and `unbatched`
(--batch-window-ms 0 --max-tokens 1: one request's line at a time, the same clients).
Records lines/s, p50/p99 latency, mean lines per engine batch (from /metrics; not with
--processes, whose counters are per process), lines/s
relative to offline, the share of the cores' time the server and the clients used, and
the CPU time per line of each busy server thread (from /proc, every server process: the
HTTP threads' are the last);
also the lines/s of the Translator in this process on batches of N lines in arrival
order, the best one model thread can do whose steps hold one line of each of N clients,
the same on batches of N lines sorted by length (offline's order: the batch size alone,
without the mixed lengths), and of two threads each decoding batches of N/2 lines (as
two workers would).
Loopback only; bounded in requests and in time.

    python bench/serve_load.py [--model runs/demo/model.pt] [--clients 64] [--lines 1000]
                               [--modes batched processes] [--rounds 3]
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import unittest.mock
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, decoding_parser, record  # noqa: E402

from mtkit.runtime.devices import usable_cores  # noqa: E402

MTKIT = Path(sys.executable).with_name("mtkit")
MODES = {"batched": [], "workers": ["--workers", "2", "--threads", "1"],
         "processes": ["--processes", "2", "--threads", "1"],
         "unbatched": ["--batch-window-ms", "0", "--max-tokens", "1"]}


def make_lines(n: int) -> list[str]:
    rng = random.Random(0)
    verses = (BIBLE / "test.es").read_text(encoding="utf-8").splitlines()
    lines = []
    while len(lines) < n:
        words = rng.choice(verses).split()
        if words:
            lines.append(" ".join(words[: rng.randint(1, len(words))]))
    return lines


def offline(model: Path, lines: list[str], threads: int, extra: list[str]
            ) -> tuple[list[str], float]:
    """(translate's output lines, its lines/s as its summary line reports it)."""
    done = subprocess.run([str(MTKIT), "translate", "-m", str(model), "--threads", str(threads),
                           *extra],
                          input="".join(line + "\n" for line in lines).encode(),
                          capture_output=True, check=True)
    summary = re.search(r"translated (\d+) sentences, \d+ tokens in [\d.]+s \(([\d.]+) "
                        r"sentences/s\)", done.stderr.decode())
    assert summary and int(summary[1]) == len(lines), done.stderr.decode()
    return done.stdout.decode().split("\n")[:-1], float(summary[2])


def in_process(model: Path, lines: list[str], threads: int, batch: int,
               beam: int | None, workers: int = 1, length_groups: bool = True,
               by_length: bool = False) -> float:
    """lines/s of Translator.search on `batch` lines at a time, in arrival order: what a
    server whose every step holds one line of each of `batch` clients can reach at best,
    with no HTTP at all (offline sorts a whole buffer by length first). With `workers`,
    that many threads of threads/workers CPU threads each take the batches in turn,
    as `mtkit serve --workers` does. `length_groups=False` encodes each batch as one
    padded batch, as mtkit did before `search.encode_by_length`. `by_length=True` sorts
    all the lines by source length first, as offline translate does, and then cuts the
    same `batch`-line batches: what separates the cost of small batches from the cost of
    lengths mixed in one batch, which is what a server's batches of one line per client
    carry."""
    from mtkit.decode import search
    from mtkit.decode.translate import Translator

    if not length_groups:
        with unittest.mock.patch.object(search, "PAD_SLACK_TOKENS", math.inf):
            return in_process(model, lines, threads, batch, beam, workers, by_length=by_length)

    loaded = Translator.load(model, device="cpu", threads=max(1, threads // workers),
                             beam=beam)
    if by_length:
        lengths = [len(ids) for ids in loaded.tokenizer.encode_src(lines)]
        lines = [line for _, line in sorted(zip(lengths, lines), key=lambda pair: pair[0])]
    loaded.search(lines[:batch])  # warm-up
    batches = iter(range(0, len(lines), batch))
    lock = threading.Lock()

    def worker() -> None:
        translator = Translator(loaded.engine, loaded.settings, loaded.max_tokens)
        while True:
            with lock:
                first = next(batches, None)
            if first is None:
                return
            translator.search(lines[first : first + batch])

    # this thread and workers - 1 more, as in the server
    more = [threading.Thread(target=worker) for _ in range(workers - 1)]
    start = time.perf_counter()
    for thread in more:
        thread.start()
    worker()
    for thread in more:
        thread.join()
    return round(len(lines) / (time.perf_counter() - start), 1)


def start_server(model: Path, threads: int, extra: list[str]) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen(
        [str(MTKIT), "serve", "-m", str(model), "--port", "0", "--threads", str(threads),
         *extra], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in server.stderr:
        if match := re.search(r"on http://127\.0\.0\.1:(\d+) ", line):
            threading.Thread(target=server.stderr.read, daemon=True).start()  # keep draining
            return server, int(match[1])
    raise SystemExit(f"mtkit serve did not start (exit {server.wait()})")


def batch_totals(port: int) -> tuple[float, float]:
    """(engine batches, lines in them) so far, from /metrics."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    found = dict(re.findall(r"^mtkit_serve_batch_lines_(count|sum) (\S+)$", text, re.M))
    return float(found["count"]), float(found["sum"])


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time a process (or one of its threads) has used so far (Linux
    /proc)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (Linux /proc): `serve --processes` serves from
    children."""
    found = [pid]
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            for child in children:
                found += process_tree(int(child))
    return found


def threads_cpu_seconds(pid: int) -> dict[int, float]:
    """cpu_seconds of each thread of a process and its descendants, by thread id (a
    thread that ends while they are read is left out)."""
    found = {}
    for process in process_tree(pid):
        with contextlib.suppress(FileNotFoundError):
            for tid in os.listdir(f"/proc/{process}/task"):
                with contextlib.suppress(FileNotFoundError):
                    found[int(tid)] = cpu_seconds(process, int(tid))
    return found


def load(port: int, lines: list[str], expected: list[str], clients: int,
         seconds: float, server_pid: int, one_process: bool = True) -> dict:
    """Every line once, from `clients` threads, until done or `seconds` have passed; with
    the CPU time the server and the clients (this process) used meanwhile, since on one
    machine the clients take cores the server would use. The clock starts once every
    client has connected: a long-running service keeps its connections, and opening 64
    at once is not translation work (it split the first batches in two). The mean batch
    size comes from /metrics, so only from a server of `one_process`: with `--processes`
    each scrape reads the counters of whichever process takes the connection."""
    next_line, lock = iter(range(len(lines))), threading.Lock()
    latencies: list[float] = []
    problems: list[str] = []
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        connection.connect()
        ready.wait()  # every client connected: the clock starts with all of them sending
        while time.monotonic() < deadline:
            with lock:
                index = next(next_line, None)
            if index is None:
                break
            body = json.dumps({"q": lines[index], "source": "auto", "target": "en"})
            start = time.perf_counter()
            try:
                connection.request("POST", "/translate", body=body,
                                   headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                status, answer = response.status, json.loads(response.read())
            except (OSError, http.client.HTTPException) as exc:  # counted, not fatal
                connection.close()
                status, answer = 0, {"error": f"{type(exc).__name__}: {exc}"}
            took = time.perf_counter() - start
            with lock:
                latencies.append(took)
                if status != 200 or answer["translatedText"] != expected[index]:
                    problems.append(f"line {index}: {status} {answer}")
        connection.close()

    batches_before, lines_before = batch_totals(port)
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    server_threads, clients_cpu = threads_cpu_seconds(server_pid), time.process_time()
    deadline = time.monotonic() + seconds
    start = time.perf_counter()
    ready.wait()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    server_threads = {tid: seconds - server_threads.get(tid, 0.0)
                      for tid, seconds in threads_cpu_seconds(server_pid).items()}
    server_cpu, clients_cpu = sum(server_threads.values()), time.process_time() - clients_cpu
    batches, batched_lines = (after - before for after, before in
                              zip(batch_totals(port), (batches_before, lines_before)))
    latencies.sort()
    return {
        "lines_done": len(latencies), "seconds": round(wall, 2),
        "lines_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1),
        "mean_batch_lines": round(batched_lines / max(batches, 1), 2) if one_process else None,
        "mismatches": len(problems), "first_mismatches": problems[:3],
        # the cores' time in use by each side, as a share of the wall time of all cores
        "server_cpu_share": round(server_cpu / (wall * usable_cores()), 2),
        # CPU ms per answered line of each server thread busy 1% of the time or more
        # (in every server process), largest first: the model threads and torch's
        # intra-op threads, then the HTTP threads (uvicorn's event loop, which reads,
        # parses and answers every request)
        "server_threads_cpu_ms_per_line": sorted(
            (round(1000 * seconds / max(len(latencies), 1), 3)
             for seconds in server_threads.values() if seconds >= 0.01 * wall), reverse=True),
        "clients_cpu_share": round(clients_cpu / (wall * usable_cores()), 2),
    }


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.set_defaults(model=Path("runs/demo/model.pt"))
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120, help="time bound per mode")
    parser.add_argument("--modes", nargs="*", choices=sorted(MODES), default=list(MODES),
                        help="none: only the in-process figures")
    parser.add_argument("--beam", type=int, default=None, help="[default: the recipe's]")
    parser.add_argument("--server-args", default="", help="more `mtkit serve` options, "
                        "e.g. '--batch-window-ms 10' (after each mode's own)")
    parser.add_argument("--rounds", type=int, default=1, help="the modes in turn, this "
                        "many times; each measurement's offline rate is taken just before it")
    args = parser.parse_args()
    if not args.model.is_file():
        raise SystemExit(f"{args.model}: no model; run `make demo` first, or give --model")
    lines = make_lines(args.lines)
    beam = ["--beam", str(args.beam)] if args.beam else []
    expected, _ = offline(args.model, lines, args.threads, beam)
    common = {"model": str(args.model), "clients": args.clients, "lines": args.lines,
              "threads": args.threads, "beam": args.beam, "server_args": args.server_args,
              "in_process_batches_lines_per_s": in_process(args.model, lines, args.threads,
                                                           args.clients, args.beam),
              # the same batch size, lengths sorted as offline sorts them
              "in_process_sorted_batches_lines_per_s": in_process(
                  args.model, lines, args.threads, args.clients, args.beam, by_length=True),
              "in_process_one_padded_batch_lines_per_s": in_process(
                  args.model, lines, args.threads, args.clients, args.beam,
                  length_groups=False),
              # two workers, each with half the clients' lines per batch
              "in_process_2_workers_lines_per_s": in_process(
                  args.model, lines, args.threads, args.clients // 2, args.beam, workers=2)}
    if not args.modes:
        record("serve_load", {"mode": "in_process", **common}, "bench/serve_load.py")
    failed = False
    for round_number, mode in ((r, m) for r in range(1, args.rounds + 1) for m in args.modes):
        # The machine's speed drifts: each mode is compared with offline measured right
        # before and right after it (their mean).
        _, offline_rate = offline(args.model, lines, args.threads, beam)
        server, port = start_server(args.model, args.threads,
                                    [*MODES[mode], *beam, *shlex.split(args.server_args)])
        try:
            one_process = "--processes" not in MODES[mode]
            load(port, lines[:50], expected[:50], 8, 60, server.pid)  # warm-up
            found = load(port, lines, expected, args.clients, args.seconds, server.pid,
                         one_process)
        finally:
            server.send_signal(signal.SIGTERM)
            exit_code = server.wait(60)
        _, offline_after = offline(args.model, lines, args.threads, beam)
        found["vs_offline"] = round(2 * found["lines_per_s"] / (offline_rate + offline_after), 2)
        record("serve_load", {"mode": mode, "round": round_number, **common,
                              "offline_lines_per_s": offline_rate,
                              "offline_after_lines_per_s": offline_after, **found,
                              "server_exit": exit_code}, "bench/serve_load.py")
        failed |= bool(found["mismatches"]) or exit_code != 0
    if failed:
        raise SystemExit("some answers differed from mtkit translate's, or a server failed")


if __name__ == "__main__":
    main()
