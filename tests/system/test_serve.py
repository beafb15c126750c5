"""`mtkit serve` as a user runs it: a real server on a free loopback port with the tiny
model the session trains (tests/conftest.py: tiny_run), checked against `mtkit translate`
on the same lines, from HTTP clients and from a headless browser.

Three servers: `server` (the default settings, shared by most tests), `guarded` (an API
key, small limits and a long collection window, so that requests stay queued long enough
to fill the queue or to leave it) and one per SIGTERM test.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from builders import DATA, prometheus_text
from conftest import CLI_ENV, run_mtkit, start_mtkit

from mtkit.document.split import split_sentences

KEY = "tiny-secret"
ORIGIN = "http://app.example.org"  # the `server` fixture lets its pages call the API
READY = re.compile(r"on http://127\.0\.0\.1:(\d+) ")


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    stderr_lines: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, body: bytes | dict | list | None = None,
                headers: dict[str, str] | None = None, timeout: float = 60
                ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            connection.request(method, path, body=body, headers={
                "Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def post(self, path: str, body, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        status, _, data = self.request("POST", path, body, headers)
        return status, json.loads(data)

    def metrics(self) -> dict:
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        return prometheus_text(data.decode())[1]

    def queued(self) -> int:
        return int(self.metrics()[("mtkit_serve_queue_lines", ())])

    def stderr(self) -> str:
        return "".join(self.stderr_lines)


def start_server(cwd: Path, model: Path, *args: str, env: dict | None = None) -> Server:
    process = start_mtkit(["serve", "-m", model, "--port", "0", "--threads", "1", *args],
                          cwd=cwd, stderr=subprocess.PIPE, text=True, env=env or CLI_ENV)
    lines: list[str] = []
    port: list[int] = []
    ready = threading.Event()

    def read_stderr() -> None:  # drained all along, so the server never blocks on it
        for line in process.stderr:
            lines.append(line)
            if not port and (match := READY.search(line)):
                port.append(int(match[1]))
                ready.set()
        ready.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    ready.wait(120)
    assert port, f"mtkit serve did not start:\n{''.join(lines)}"
    return Server(process, port[0], lines)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(30)


@pytest.fixture(scope="module")
def model(tiny_run) -> Path:
    return tiny_run.model


@pytest.fixture(scope="module")
def server(model, tmp_path_factory) -> Iterator[Server]:
    # a window long enough that concurrent requests of this machine's clients meet
    started = start_server(tmp_path_factory.mktemp("serve"), model, "--batch-window-ms", "30",
                           "--request-regex", "--cors-origin", ORIGIN)
    yield started
    stop(started)


@pytest.fixture(scope="module")
def guarded(model, tmp_path_factory) -> Iterator[Server]:
    """The key from the environment, small limits, and 1.5 s for a request in the queue."""
    started = start_server(
        tmp_path_factory.mktemp("guarded"), model, "--batch-window-ms", "1500",
        "--max-queue", "4", "--max-lines", "3", "--max-chars", "200",
        "--max-body-bytes", "2000", env={**CLI_ENV, "MTKIT_API_KEY": KEY})
    yield started
    stop(started)


# --------------------------------------------------------------------------- the reference


def sample_lines() -> list[str]:
    """Verses cut to 1..12 words: the tiny model's outputs are mostly as long as its length
    cap allows, so lines of different lengths get different translations, and a line's
    answer routed to another request would show."""
    verses = [v for v in (DATA / "test.es").read_text(encoding="utf-8").split("\n") if v]
    cut = [" ".join(verse.split()[: 1 + (i * 5) % 12]) for i, verse in enumerate(verses[:24])]
    long_line = " ".join(verses[:6])  # more tokens than the tiny model's 63: truncated
    return [*cut, "", "   ", long_line, "¡Qué bien!  \t", "Sí"]


LINES = sample_lines()


SPLIT = ("--split",) if importlib.util.find_spec("sentencex") else ()


def translate_cli(model: Path, cwd: Path, lines: list[str], *options: str) -> list[str]:
    result = run_mtkit(["translate", "-m", model, "--quiet", *options], cwd=cwd,
                       input="".join(line + "\n" for line in lines))
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\n")[:-1]


@pytest.fixture(scope="module")
def expected(model, tmp_path_factory) -> dict[str, list[str]]:
    """`mtkit translate`'s output for LINES: default settings, greedy, and the 3-best."""
    cwd = tmp_path_factory.mktemp("reference")
    found = {"default": translate_cli(model, cwd, LINES),
             # LibreTranslate's route splits sentences (when sentencex is installed)
             "split": translate_cli(model, cwd, LINES, *SPLIT),
             "greedy": translate_cli(model, cwd, LINES, "--beam", "1"),
             "nbest3": translate_cli(model, cwd, LINES, "--beam", "3", "--nbest", "3",
                                     "--scores")}
    assert len(found["default"]) == len(LINES)
    assert len(set(found["default"])) > 10, "the lines should not all translate alike"
    assert found["default"] != found["greedy"], "beam 2 and greedy should differ somewhere"
    return found


def nbest_rows(rows: list[str]) -> list[list[tuple[str, float]]]:
    """translate --nbest TSV as, per line, its (text, score) hypotheses best first."""
    per_line: list[list[tuple[str, float]]] = [[] for _ in LINES]
    for row in rows:
        index, score, text = row.split("\t", 2)
        per_line[int(index)].append((text, float(score)))
    return per_line


def libre(q, **more) -> dict:
    return {"q": q, "source": "es", "target": "en", "format": "text", **more}


# --------------------------------------------------------------------------- answers


def test_libretranslate_answers_equal_translate(server, expected):
    status, answer = server.post("/translate", libre(LINES))
    assert status == 200, answer
    assert answer == {"translatedText": expected["split"]}
    status, answer = server.post("/translate", libre(LINES[3]))
    assert (status, answer) == (200, {"translatedText": expected["split"][3]})
    # one text of several lines is translated line by line, its line breaks kept
    status, answer = server.post("/translate", libre("\r\n".join(LINES[:5]) + "\n",
                                                     source="auto"))
    assert answer == {"translatedText": "\n".join(expected["split"][:5]) + "\n"}


def test_native_answers_with_nbest_and_scores_equal_translate(server, expected):
    status, answer = server.post("/v1/translate", {"text": LINES, "beam": 3, "nbest": 3,
                                                   "scores": True})
    assert status == 200, answer
    assert (answer["beam"], answer["nbest"], answer["truncated"]) == (3, 3, 1)
    reference = nbest_rows(expected["nbest3"])
    for line, hyps in zip(answer["translations"], reference):
        assert [(h["text"], round(h["score"], 4)) for h in line["hypotheses"]] == hyps
        assert line["text"] == hyps[0][0]
    status, answer = server.post("/v1/translate", {"text": LINES})
    assert [line["text"] for line in answer["translations"]] == expected["default"]
    assert all(list(h) == ["text"] for line in answer["translations"]
               for h in line["hypotheses"])  # scores only when asked for
    assert answer["truncated"] == 1


def test_a_prefix_cut_to_the_model_counts_as_truncated(server, model, tmp_path):
    """A prefix longer than the model's positions is cut as `translate --prefix` cuts it,
    and counted in `truncated` as translate's summary counts it (an empty line's is not:
    the line stays empty)."""
    long_prefix = " ".join(["the"] * 80)  # more pieces than the tiny model's 63
    body = {"text": ["Hola.", "", "Hola."], "prefix": [long_prefix, long_prefix, ""]}
    status, answer = server.post("/v1/translate", body)
    assert status == 200, answer
    (tmp_path / "in.txt").write_text("Hola.\n\nHola.\n", encoding="utf-8")
    (tmp_path / "prefix.txt").write_text(f"{long_prefix}\n{long_prefix}\n\n", encoding="utf-8")
    result = run_mtkit(["translate", "-m", model, "-i", "in.txt", "--prefix", "prefix.txt",
                        "--threads", "1"], tmp_path)
    assert "1 input truncated" in result.stderr, result.stderr
    assert [line["text"] for line in answer["translations"]] == result.stdout.splitlines()
    assert answer["truncated"] == 1


def test_alignments_answer_as_translate(server, model, tmp_path):
    """/v1/translate's alignments are `mtkit translate --alignments`'s links, n-best and
    subword too; lines of a request without them share the batch and get none."""
    rows = translate_cli(model, tmp_path, LINES, "--beam", "3", "--nbest", "2",
                         "--alignments")
    subword = translate_cli(model, tmp_path, LINES, "--alignments", "--alignment-unit",
                            "subword")
    body = {"text": LINES, "beam": 3, "nbest": 2, "alignments": True}
    plain = {"text": LINES, "beam": 3, "nbest": 2}
    with ThreadPoolExecutor(2) as pool:
        (status, answer), (_, without) = pool.map(lambda b: server.post("/v1/translate", b),
                                                  (body, plain))
    assert status == 200, answer
    expected_links: list[list[str]] = [[] for _ in LINES]
    for row in rows:
        index, _, _, links = row.split("\t")
        expected_links[int(index)].append(links)
    found = [[" ".join(f"{i}-{j}" for i, j in h["alignment"]) for h in line["hypotheses"]]
             for line in answer["translations"]]
    assert found == expected_links
    assert all("alignment" not in h for line in without["translations"]
               for h in line["hypotheses"])
    status, answer = server.post("/v1/translate", {"text": LINES, "alignments": True,
                                                   "alignment_unit": "subword"})
    assert [" ".join(f"{i}-{j}" for i, j in line["hypotheses"][0]["alignment"])
            for line in answer["translations"]] == [row.split("\t")[1] for row in subword]


PLACEHOLDER_LINES = ["Abre %s archivos de {name}.", "Vea https://example.org/a.html y $(ARG1)",
                     "El ID-42 pide %d. Y dijo Dios: Sea la luz.", "%PRODUCTNAME", "", "nada"]


def test_split_and_placeholders_answer_as_translate(server, model, tmp_path):
    """The native fields as translate's flags, LibreTranslate's route as translate
    --split; every placeholder kept by default."""
    lines = [*LINES, *PLACEHOLDER_LINES]
    for fields, options in (({}, ()), ({"split": True}, SPLIT),
                            ({"protect": False}, ("--no-protect",)),
                            ({"protect_rules": ["number"], "protect_regex": ["ID-[0-9]+"]},
                             ("--protect", "number", "--protect-regex", "ID-[0-9]+")),
                            ({"alignments": True}, ("--alignments",))):
        if fields.get("split") and not SPLIT:
            continue
        reference = translate_cli(model, tmp_path, lines, *options)
        status, answer = server.post("/v1/translate", {"text": lines, **fields})
        assert status == 200, answer
        found = [line["text"] for line in answer["translations"]]
        if "alignments" in fields:
            found = [line["text"] + "\t" + " ".join(
                f"{i}-{j}" for i, j in line["hypotheses"][0]["alignment"])
                for line in answer["translations"]]
        assert found == reference, fields
    protected = translate_cli(model, tmp_path, PLACEHOLDER_LINES)
    for source, output in zip(PLACEHOLDER_LINES, protected):
        for placeholder in ("%s", "{name}", "https://example.org/a.html", "$(ARG1)", "%d",
                            "%PRODUCTNAME"):
            assert output.count(placeholder) == source.count(placeholder)
    status, answer = server.post("/translate", libre(PLACEHOLDER_LINES))
    assert answer == {"translatedText": translate_cli(model, tmp_path, PLACEHOLDER_LINES,
                                                      *SPLIT)}


HTML_LINES = ['<p>Y dijo Dios: <b>Sea la luz</b>.</p><p>Y fué <a href="#">la luz</a>.</p>',
              "<ul><li>En el <i>principio</i><li>creó Dios</ul><!-- c -->", "", "<p>a < b",
              '<p>Sea <code>x &lt; y</code> la <span translate="no">luz</span>.</p>']
HTML_PAGE = ("<!DOCTYPE html>\n<html><head><title>Génesis</title></head>\n<body>\n"
             + "\n".join(HTML_LINES) + "\n<pre>\n  kept\n</pre>\n</body></html>\n")


def test_html_answers_as_translate(server, model, tmp_path):
    """format html: LibreTranslate's texts (each one fragment, lines and all) and the
    native API's lines answer as `translate --format html` (--whole-file for a page)."""
    reference = translate_cli(model, tmp_path, HTML_LINES, "--format", "html")
    status, answer = server.post("/v1/translate", {"text": HTML_LINES, "format": "html"})
    assert status == 200, answer
    assert [line["text"] for line in answer["translations"]] == reference
    assert reference[0].startswith("<p>") and "<b>" in reference[0] and reference[2] == ""
    (tmp_path / "page.html").write_text(HTML_PAGE, encoding="utf-8")
    whole = run_mtkit(["translate", "-m", model, "--quiet", "--format", "html",
                       "--whole-file", "--input", "page.html", *SPLIT], cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    split = translate_cli(model, tmp_path, HTML_LINES, "--format", "html", *SPLIT)
    status, answer = server.post("/translate", libre([*HTML_LINES, HTML_PAGE],
                                                     format="html"))
    assert (status, answer) == (200, {"translatedText": [*split, whole.stdout]})
    status, answer = server.post("/translate", libre(HTML_LINES[0], format="html"))
    assert answer == {"translatedText": split[0]}


def test_alternatives_are_the_nbest_of_translate(server, expected):
    status, answer = server.post("/translate", libre(LINES[:24], alternatives=2))
    assert status == 200, answer
    reference = nbest_rows(expected["nbest3"])[:24]  # 2 alternatives: the 3 best, beam 3
    assert answer["translatedText"] == [hyps[0][0] for hyps in reference]
    for alternatives, hyps in zip(answer["alternatives"], reference):
        distinct = []
        for text, _ in hyps[1:]:
            if text != hyps[0][0] and text not in distinct:
                distinct.append(text)
        assert alternatives == distinct
    status, answer = server.post("/translate", libre(LINES[0], alternatives=1))
    assert isinstance(answer["translatedText"], str) and isinstance(answer["alternatives"], list)


def batch_counts(server: Server) -> tuple[float, float]:
    values = server.metrics()
    return (values[("mtkit_serve_batch_lines_count", ())],
            values[("mtkit_serve_batch_lines_sum", ())])


def model_lines(line: str, libre: bool) -> int:
    """The lines the model decodes for one line of a request: none for an empty one, a
    line per sentence where LibreTranslate's route splits."""
    if not line.strip():
        return 0
    return len(split_sentences(line, "es")) if libre and SPLIT else 1


def test_concurrent_requests_are_batched_and_each_answer_equals_translate(server, expected):
    """8 clients at once, one line per request, half of them greedy: every answer is the
    line `mtkit translate` gives with the same settings, and the engine saw batches of
    several requests' lines (never mixing beam 2 with greedy, or the answers would not
    all match)."""
    clients, rounds = 8, 4
    batches_before, lines_before = batch_counts(server)
    failures = mixed_clients(server, expected, clients, rounds)
    assert not failures, "\n".join(failures)
    batches, lines = (after - before for after, before in
                      zip(batch_counts(server), (batches_before, lines_before)))
    decoded = sum(model_lines(LINES[(n * rounds + s) % len(LINES)], libre=n % 2 == 0)
                  for n in range(clients) for s in range(rounds))
    assert lines == decoded
    assert lines / batches > 1.5, f"{lines} lines in {batches} batches: not batched"


def test_prefixes_and_samples_answer_as_translate(server, model, tmp_path):
    """/v1/translate's prefix, sampling, temperature and seed give what `mtkit translate`
    gives with --prefix and the same options, also for requests decoded side by side:
    each request's lines are numbered within it, so its samples are its own."""
    prefixes = [("", "and", "the lord said")[i % 3] for i in range(len(LINES))]
    (tmp_path / "prefix.txt").write_text("".join(p + "\n" for p in prefixes), encoding="utf-8")
    options = ("--sampling", "topk:5", "--temperature", "1.5", "--seed", "3", "--nbest", "2")
    reference = nbest_rows(translate_cli(model, tmp_path, LINES, "--prefix", "prefix.txt",
                                         "--scores", *options))
    body = {"text": LINES, "prefix": prefixes, "sampling": "topk:5", "temperature": 1.5,
            "seed": 3, "nbest": 2, "scores": True}
    answers: list[tuple[int, dict]] = []
    threads = [threading.Thread(target=lambda b=b: answers.append(server.post(
        "/v1/translate", b))) for b in (body, body, {"text": LINES[:4]})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sampled = [answer for status, answer in answers if answer.get("sampling")]
    assert [status for status, _ in answers] == [200] * 3 and len(sampled) == 2
    for answer in sampled:
        assert (answer["sampling"], answer["seed"], answer["nbest"]) == ("topk:5", 3, 2)
        for line, hyps in zip(answer["translations"], reference, strict=True):
            assert [h["text"] for h in line["hypotheses"]] == [text for text, _ in hyps]
            # (scores: within the rounding of other batches' float sums)
            assert ([h["score"] for h in line["hypotheses"]]
                    == pytest.approx([score for _, score in hyps], abs=1e-3))
    starts = [line["text"] for line in sampled[0]["translations"]]
    assert all(text.startswith(p) for text, p in zip(starts, prefixes) if text), starts
    status, answer = server.post("/v1/translate", {"text": ["a"], "sampling": "topp:0"})
    assert status == 422 and answer["error"].startswith("sampling topp:0: "), answer


@pytest.mark.parametrize("engine", ["ensemble", "int8", "ctranslate2"])
def test_an_ensemble_int8_and_an_export_answer_as_translate_does(engine, model, tmp_path,
                                                                 expected):
    """The engine options as translate takes them: two checkpoints (an ensemble),
    `--quantize int8`, or a CTranslate2 export; each served line equals `mtkit translate`'s
    with the same options."""
    served, options = model, []  # what follows `-m`, and the options after it
    if engine == "ensemble":
        options = ["-m", model.parent / "checkpoints" / "checkpoint_10.pt"]
    elif engine == "int8":
        options = ["--quantize", "int8"]
    else:
        pytest.importorskip("ctranslate2")
        done = run_mtkit(["export", "-m", model, "-o", "exported"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        served = tmp_path / "exported"
    wanted = translate_cli(served, tmp_path, LINES, *options, *SPLIT)
    if engine == "ensemble":  # (int8 gives the tiny model's fp32 lines)
        assert wanted != expected["default"], "the second model should change some line"
    started = start_server(tmp_path, served, *options)
    try:
        assert started.post("/translate", libre(LINES)) == (200, {"translatedText": wanted})
    finally:
        stop(started)
    assert started.process.returncode == 0


def test_every_decode_option_of_translate_and_a_run_directory(model, tmp_path):
    """serve takes translate's decode options (-m RUN_DIR too) and answers as translate
    does with them."""
    options = ("--beam", "3", "--lenpen", "0.6", "--stop", "exact", "--max-len-a", "0",
               "--max-len-b", "4")
    reference = translate_cli(model, tmp_path, LINES, *options)
    server = start_server(tmp_path, model.parent, *options)  # the run directory
    try:
        status, answer = server.post("/v1/translate", {"text": LINES})
        assert status == 200, answer
        assert [line["text"] for line in answer["translations"]] == reference
        assert answer["beam"] == 3
    finally:
        stop(server)


def test_the_document_flags_of_translate_set_the_servers_defaults(model, tmp_path):
    """serve --split, --protect, --protect-regex, --no-protect: a request that names none
    of split/protect answers as translate with the same flags."""
    lines = [*LINES, *PLACEHOLDER_LINES]
    default = translate_cli(model, tmp_path, lines)
    for options in ((*SPLIT, "--protect", "number", "--protect-regex", "ID-[0-9]+"),
                    ("--no-protect",)):
        reference = translate_cli(model, tmp_path, lines, *options)
        assert reference != default, options  # the flags change what a request gets
        server = start_server(tmp_path, model, *options)
        try:
            status, answer = server.post("/v1/translate", {"text": lines})
            assert status == 200, answer
            assert [line["text"] for line in answer["translations"]] == reference, options
        finally:
            stop(server)


def test_two_workers_answer_as_translate_and_stop_cleanly(model, tmp_path, expected):
    """--workers 2: two model threads decode steps side by side (tests/unit's batcher
    tests show they do); every answer is still translate's, and SIGTERM still exits 0."""
    server = start_server(tmp_path, model, "--workers", "2", "--batch-window-ms", "30")
    try:
        assert "2 model workers, 1 thread each" in server.stderr()
        failures = mixed_clients(server, expected, clients=8, rounds=4)
        assert not failures, "\n".join(failures)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        assert "Traceback" not in server.stderr()
    finally:
        stop(server)


def test_two_processes_answer_as_translate_and_stop_cleanly(model, tmp_path, expected):
    """--processes 2: two server processes share the port (SO_REUSEPORT); every answer is
    translate's whichever process takes the connection, and SIGTERM to the parent stops
    both, which answer what they hold and exit 0, so the parent does too."""
    server = start_server(tmp_path, model, "--processes", "2", "--batch-window-ms", "30")
    try:
        assert "2 processes" in server.stderr()
        failures = mixed_clients(server, expected, clients=8, rounds=4)
        assert not failures, "\n".join(failures)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(60) == 0
        log = server.stderr()
        assert log.count("refusing new connections") == 2 and "Traceback" not in log
    finally:
        stop(server)


def test_a_process_that_cannot_start_is_a_one_line_error(tmp_path, mtkit_inprocess,
                                                          expect_error):
    """A model that does not load fails in the children; the parent says why, once."""
    missing = tmp_path / "missing.pt"
    expect_error(mtkit_inprocess(["serve", "-m", str(missing), "--port", "0",
                                  "--processes", "2"], tmp_path), str(missing))


def mixed_clients(server: Server, expected: dict, clients: int, rounds: int) -> list[str]:
    """`clients` threads at once, `rounds` one-line requests each, odd clients greedy
    through /v1/translate, even ones LibreTranslate's way with the server's settings:
    the answers that differ from `mtkit translate`'s."""
    start = threading.Barrier(clients)
    failures: list[str] = []

    def client(number: int) -> None:
        greedy = number % 2 == 1
        start.wait()
        for step in range(rounds):
            index = (number * rounds + step) % len(LINES)
            if greedy:
                status, answer = server.post("/v1/translate",
                                             {"text": [LINES[index]], "beam": 1})
                got = answer["translations"][0]["text"] if status == 200 else answer
                want = expected["greedy"][index]
            else:
                status, answer = server.post("/translate", libre(LINES[index]))
                got = answer.get("translatedText", answer)
                want = expected["split"][index]
            if (status, got) != (200, want):
                failures.append(f"client {number}, line {index}: {status} {got!r} != {want!r}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return failures


# --------------------------------------------------------------------------- the other routes


def test_health_models_languages(server, model):
    status, _, body = server.request("GET", "/health")
    assert (status, json.loads(body)["status"]) == (200, "ok")
    status, _, body = server.request("GET", "/v1/models")
    info = json.loads(body)
    [entry] = info["models"]
    assert (entry["source"], entry["target"], entry["engine"]) == ("es", "en", "torch")
    assert entry["architecture"]["d_model"] == 64 and entry["architecture"]["enc_layers"] == 2
    assert entry["decode"]["beam"] == 2  # the recipe's, as translate uses
    assert entry["max_source_tokens"] == 63
    assert entry["recipe"]["model"]["max_positions"] == 64 and "data" not in entry["recipe"]
    assert info["api_key_required"] is False
    assert info["limits"]["max_lines"] == 1000
    status, _, body = server.request("GET", "/languages")
    assert json.loads(body) == [{"code": "es", "name": "es", "targets": ["en"]}]


def test_metrics_are_prometheus_text(server):
    server.post("/translate", libre(LINES[:3]))
    status, headers, body = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    types, values = prometheus_text(body.decode())
    assert types["mtkit_serve_request_duration_seconds"] == "histogram"
    assert types["mtkit_serve_queue_lines"] == "gauge"
    ok = values[("mtkit_serve_requests_total", (("endpoint", "/translate"), ("status", "200")))]
    latency = values[("mtkit_serve_request_duration_seconds_count",
                      (("endpoint", "/translate"),))]
    assert ok >= 1 and latency >= ok
    assert values[("mtkit_serve_lines_total", ())] >= 3
    assert values[("mtkit_serve_source_tokens_total", ())] > 0
    assert values[("mtkit_serve_queue_lines", ())] == 0


def test_the_page_and_the_docs_are_served(server):
    status, headers, body = server.request("GET", "/")
    page = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert 'id="translate"' in page and 'fetch("/translate"' in page
    # nothing is fetched from elsewhere: no absolute URL and no protocol-relative one
    assert not re.search(r"(https?:)?//[a-z0-9]", page.replace("// ", "")), "external URL"
    status, _, body = server.request("GET", "/openapi.json")
    paths = json.loads(body)["paths"]
    assert {"/translate", "/v1/translate", "/health", "/v1/models", "/metrics"} <= set(paths)
    assert "q" in json.dumps(paths["/translate"]["post"]["requestBody"])
    assert server.request("GET", "/docs")[0] == 200


# --------------------------------------------------------------------------- bad input


def assert_error(status: int, headers: dict, body: bytes, expected_status: int,
                 needle: str) -> None:
    text = body.decode()
    assert status == expected_status, text
    assert "Traceback" not in text and "\n" not in text.strip()
    message = json.loads(text)["error"]
    assert needle in message, message


@pytest.mark.parametrize("path, body, status, needle", [
    ("/translate", b"{not json", 400, "invalid JSON"),
    ("/translate", b"", 400, "invalid JSON"),
    ("/v1/translate", b"\xff\xfe", 400, "not UTF-8"),
    ("/v1/translate", b'{"text": ["a"], "lenpen": NaN}', 400, "NaN is not a JSON number"),
    ("/translate", b"[" * 50_000 + b"]" * 50_000, 400, "nested too deeply"),
    ("/translate", b'"just a string"', 422, "the body must be a JSON object"),
    ("/translate", b'{"source": "es", "target": "en"}', 422, "q: required"),
    ("/translate", b'{"q": 42, "source": "es", "target": "en"}', 422, "q: expected"),
    ("/translate", b'{"q": "a", "source": "es"}', 422, "target: required"),
    ("/translate", b'{"q": "a", "source": "de", "target": "en"}', 400, "not supported"),
    ("/translate", b'{"q": "a", "source": "es", "target": "en", "format": "xml"}', 400,
     "format xml: expected text or html"),
    ("/v1/translate", b'{"text": ["a"], "format": "htm"}', 400, "did you mean html?"),
    ("/v1/translate", b'{"text": ["a"], "format": "html", "scores": true}', 422,
     "format html: not with scores"),
    ("/v1/translate", b'{"text": "a"}', 422, "text: expected a list of strings"),
    ("/v1/translate", b'{"text": ["a"], "protect_regex": ["(x"]}', 422,
     "protect_regex '(x': not a valid regular expression"),
    ("/v1/translate", b'{"text": ["a"], "split": true, "beam": 2, "nbest": 2}', 422,
     "split: not with nbest > 1"),
    ("/v1/translate", b'{"text": ["a", 1]}', 422, "text[1]: expected a string"),
    ("/v1/translate", b'{"text": ["a"], "beam": 0}', 422, "beam 0: 0 is out of range"),
    ("/v1/translate", b'{"text": ["a"], "beam": 100}', 422, "allows at most 16"),
    ("/v1/translate", b'{"text": ["a"], "nbest": 5}', 422, "nbest (5) must not exceed beam"),
    ("/v1/translate", b'{"text": ["a"], "lenpen": "x"}', 422, "lenpen x: expected a number"),
    ("/v1/translate", b'{"txt": ["a"]}', 422, "did you mean 'text'?"),
    # half a surrogate pair, in a text or in a field an error would name
    ("/translate", b'{"q": "Hola \\ud800", "source": "es", "target": "en"}', 400,
     "\\ud800 is half of a surrogate pair"),
    ("/v1/translate", b'{"text": ["a"], "format": "\\udfff"}', 400, "half of a surrogate"),
    ("/v1/score", b'{"pairs": [["Hola \\ud800", "x"]]}', 400, "half of a surrogate"),
])
def test_bad_requests_get_a_one_line_error(server, path, body, status, needle):
    assert_error(*server.request("POST", path, body), status, needle)


def test_libretranslate_clients_may_send_a_form(server, expected):
    """LibreTranslate's clients send form-encoded fields: the answer JSON would get."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    fields = urllib.parse.urlencode({"q": LINES[1], "source": "es", "target": "en",
                                     "format": ""}).encode()
    answer = {"translatedText": expected["split"][1]}
    status, _, body = server.request("POST", "/translate", fields, form)
    assert (status, json.loads(body)) == (200, answer)
    # curl -d labels a JSON body as a form: it is still read as JSON
    status, _, body = server.request("POST", "/translate", json.dumps(libre(LINES[1])).encode(),
                                     form)
    assert (status, json.loads(body)) == (200, answer)
    assert_error(*server.request("POST", "/translate", b"--b\r\n\r\n--b--\r\n",
                                 {"Content-Type": "multipart/form-data; boundary=b"}),
                 415, "a multipart body is not taken")


def test_pages_of_an_allowed_origin_may_call_the_api(server, guarded, expected):
    """--cors-origin: a browser's preflight and the call itself get the CORS headers; a
    server without the option sends none, and pages of other origins get none."""
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    status, headers, _ = server.request("OPTIONS", "/translate", None, preflight)
    assert status == 200 and headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, body = server.request("POST", "/translate", libre(LINES[1]),
                                           {"Origin": ORIGIN})
    assert (status, json.loads(body)) == (200, {"translatedText": expected["split"][1]})
    assert headers["access-control-allow-origin"] == ORIGIN
    _, headers, _ = server.request("POST", "/translate", libre(LINES[1]),
                                   {"Origin": "http://elsewhere.example.org"})
    assert "access-control-allow-origin" not in {k.lower() for k in headers}
    _, headers, _ = guarded.request("GET", "/health", None, {"Origin": ORIGIN})
    assert "access-control-allow-origin" not in {k.lower() for k in headers}


def test_head_answers_as_get_without_a_body(server):
    for path in ("/", "/health", "/v1/models", "/languages", "/metrics"):
        status, _, body = server.request("HEAD", path)
        assert (status, body) == (200, b""), path


def test_a_client_that_leaves_while_sending_is_counted_as_gone(server):
    def gone() -> float:
        return server.metrics().get(("mtkit_serve_requests_total", (
            ("endpoint", "/v1/translate"), ("status", "499"))), 0)

    before = gone()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        client.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                       b"Content-Type: application/json\r\n\r\n{\"text\": [\"Hola")
    deadline = time.monotonic() + 20
    while gone() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone() == before + 1
    assert "ClientDisconnect" not in server.stderr()


def test_unknown_routes_and_methods_answer_json_errors(server):
    assert_error(*server.request("GET", "/nowhere"), 404, "Not Found")
    assert_error(*server.request("GET", "/translate"), 405, "Method Not Allowed")
    assert_error(*server.request("POST", "/health", b"{}"), 405, "Method Not Allowed")


def test_the_server_survives_all_of_it(server, expected):
    """After every bad request above, it still answers, and no answer was a 500."""
    status, answer = server.post("/translate", libre(LINES[1]))
    assert (status, answer) == (200, {"translatedText": expected["split"][1]})
    statuses = {labels[1][1] for (name, labels) in server.metrics()
                if name == "mtkit_serve_requests_total"}
    assert "500" not in statuses, statuses
    assert "Traceback" not in server.stderr()


def test_limits_on_size(guarded):
    key = {"Authorization": f"Bearer {KEY}"}
    big = json.dumps(libre("a" * 3000)).encode()
    assert_error(*guarded.request("POST", "/translate", big), 413, "at most 2000 are taken")
    # a chunked body declares no length: it is counted as it comes
    connection = http.client.HTTPConnection("127.0.0.1", guarded.port, timeout=30)
    connection.request("POST", "/translate", body=iter([big[:1500], big[1500:]]),
                       headers={"Content-Type": "application/json"}, encode_chunked=True)
    response = connection.getresponse()
    assert_error(response.status, {}, response.read(), 413, "more than 2000 bytes")
    connection.close()
    assert_error(*guarded.request("POST", "/translate", libre("a\nb\nc\nd"), key), 413,
                 "4 lines: a request may have at most 3")
    assert_error(*guarded.request("POST", "/v1/translate", {"text": ["x" * 201]}, key), 413,
                 "line 1 has 201 characters: a line may have at most 200")


def test_request_regexes_only_where_the_server_takes_them(guarded):
    """A pattern can be written to hold the server for minutes: by default a request's are
    refused (the `server` fixture takes them: --request-regex)."""
    body = {"text": ["El ID-42"], "protect_regex": ["ID-[0-9]+"]}
    assert_error(*guarded.request("POST", "/v1/translate", body,
                                  {"Authorization": f"Bearer {KEY}"}),
                 403, "this server takes no regular expressions in requests")


def test_api_key(guarded, expected):
    assert_error(*guarded.request("POST", "/translate", libre(LINES[0])), 401, "no API key")
    assert_error(*guarded.request("POST", "/translate", libre(LINES[0], api_key="nope")),
                 401, "a wrong API key")
    assert_error(*guarded.request("POST", "/v1/translate", {"text": ["a"]},
                                  {"Authorization": "Bearer nope"}), 401, "wrong API key")
    # the two ways of giving it, at once (both wait out the same window)
    answers: dict[str, tuple] = {}
    body_key = threading.Thread(target=lambda: answers.update(
        body=guarded.post("/translate", libre(LINES[0], api_key=KEY))))
    bearer = threading.Thread(target=lambda: answers.update(
        bearer=guarded.post("/v1/translate", {"text": [LINES[0]]},
                            {"Authorization": f"Bearer {KEY}"})))
    body_key.start(), bearer.start()
    body_key.join(60), bearer.join(60)
    assert answers["body"] == (200, {"translatedText": expected["split"][0]})
    assert answers["bearer"][0] == 200
    assert answers["bearer"][1]["translations"][0]["text"] == expected["default"][0]  # no split
    # reading needs no key: the page, health, models and metrics
    status, _, body = guarded.request("GET", "/v1/models")
    assert status == 200 and json.loads(body)["api_key_required"] is True


def wait_until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_full_queue_answers_503_with_retry_after(guarded, expected):
    first: list = []
    waiting = threading.Thread(target=lambda: first.append(
        guarded.post("/translate", libre(LINES[:3], api_key=KEY))))
    waiting.start()
    wait_until(lambda: guarded.queued() == 3)  # it waits out the 1.5 s window in the queue
    status, headers, body = guarded.request("POST", "/translate", libre(LINES[3:5], api_key=KEY))
    assert_error(status, headers, body, 503, "3 lines are waiting, the queue holds 4")
    assert headers["retry-after"] == "1"
    waiting.join(60)
    assert first == [(200, {"translatedText": expected["split"][:3]})]


def test_a_keep_alive_client_that_comes_back_does_not_wait_out_the_window(guarded, expected):
    """A client is its connection: once the one client a step answered sends its next
    request on the same connection, that request is decoded at once; a request on a new
    connection waits out the 1.5 s window."""
    connection = http.client.HTTPConnection("127.0.0.1", guarded.port, timeout=60)
    took = []
    try:
        for i in (0, 1):
            start = time.monotonic()
            connection.request("POST", "/translate", body=json.dumps(libre(LINES[i], api_key=KEY)),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = (response.status, json.loads(response.read()))
            took.append(time.monotonic() - start)
            assert answer == (200, {"translatedText": expected["split"][i]})
    finally:
        connection.close()
    assert took[0] >= 1.5 and took[1] < 0.75, took


def test_a_client_that_leaves_takes_its_lines_out_of_the_queue(guarded, expected):
    gone = ("mtkit_serve_requests_total", (("endpoint", "/translate"), ("status", "499")))
    decoded = ("mtkit_serve_batch_lines_sum", ())
    before = guarded.metrics()
    body = json.dumps(libre(LINES[5:7], api_key=KEY)).encode()
    client = socket.create_connection(("127.0.0.1", guarded.port))
    client.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_until(lambda: guarded.queued() == 2)
    queued_at = time.monotonic()
    client.close()
    wait_until(lambda: guarded.queued() == 0)
    wait_until(lambda: guarded.metrics().get(gone, 0) == before.get(gone, 0) + 1)
    # the others are not held up: a request now is answered at the end of its own window
    status, answer = guarded.post("/translate", libre(LINES[8], api_key=KEY))
    assert (status, answer) == (200, {"translatedText": expected["split"][8]})
    assert time.monotonic() - queued_at > 1.5  # so the left request's window is over too
    # and its two lines never reached the model: only the one line since did
    assert guarded.metrics()[decoded] == before[decoded] + 1


def test_a_port_in_use_is_a_one_line_error(model, tmp_path, mtkit_inprocess, expect_error):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = mtkit_inprocess(["serve", "-m", model, "--port", str(port)], tmp_path)
    expect_error(result, f"--host 127.0.0.1 --port {port}: cannot listen there "
                         "(Address already in use)")
    # a name that does not resolve: said in words, not as getaddrinfo's code
    result = mtkit_inprocess(["serve", "-m", model, "--host", "nosuchhost.invalid"], tmp_path)
    line = expect_error(result, "--host nosuchhost.invalid", "cannot listen there")
    assert "Unknown error" not in line


# --------------------------------------------------------------------------- SIGTERM


def test_sigterm_answers_the_request_in_flight_refuses_new_ones_and_exits_0(
        model, tmp_path, expected):
    server = start_server(tmp_path, model, "--batch-window-ms", "3000")
    try:
        answers: list = []
        in_flight = threading.Thread(target=lambda: answers.append(
            server.post("/translate", libre(LINES[:2]))))
        in_flight.start()
        wait_until(lambda: server.queued() == 2)  # queued for the 3 s window
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # uvicorn closes its socket on its next tick (0.1 s)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5)
        in_flight.join(60)
        assert answers == [(200, {"translatedText": expected["split"][:2]})]
        assert server.process.wait(30) == 0
        assert "SIGTERM" in server.stderr() and "Traceback" not in server.stderr()
    finally:
        stop(server)


# --------------------------------------------------------------------------- a browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                    "(pip install -e '.[dev]')")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.is_file():
            pytest.skip(f"no {path}: apt-get install chromium chromium-driver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def test_the_page_translates_in_a_browser(server, browser, expected, model, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"http://127.0.0.1:{server.port}/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda b: "es → en" in b.find_element(By.ID, "model").text)
    browser.find_element(By.ID, "source").send_keys(LINES[2])
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda b: re.fullmatch(r"\d+ ms", b.find_element(By.ID, "latency").text))
    shown = browser.find_element(By.ID, "output").get_property("textContent")
    assert shown == expected["split"][2]
    assert "error" not in browser.find_element(By.ID, "output").get_attribute("class")
    # ticked, the box sends HTML: the answer shows as source, tags kept
    browser.find_element(By.ID, "source").clear()
    browser.find_element(By.ID, "source").send_keys(HTML_LINES[0])
    browser.find_element(By.ID, "html").click()
    browser.find_element(By.ID, "translate").click()
    reference = translate_cli(model, tmp_path, HTML_LINES[:1], "--format", "html", *SPLIT)
    wait.until(lambda b: b.find_element(By.ID, "output").get_property("textContent")
               == reference[0])
