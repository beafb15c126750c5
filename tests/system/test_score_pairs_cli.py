"""`mtkit score-pairs` and `POST /v1/score` as a user runs them, with the tiny model the
session trains: one line per pair, the same scores as the Python API, empty lines scored,
an ensemble, and the one-line errors (files of unequal length, a pair too long for the
model). That the scores are the search's: tests/integration/test_score_pairs.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import DATA
from test_serve import Server, start_server, stop

LINES = 12
WORDS = 8  # of each test line: the tiny model has 64 positions, a verse more tokens
LONG = "palabra " * 1000  # more tokens than the tiny model has positions, < --max-chars


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[Path, Path, list[str], list[str]]:
    """(source file, target file, their lines): the starts of test lines, an empty
    source, an empty target, both empty."""
    root = tmp_path_factory.mktemp("pairs")
    sources, targets = ([" ".join(line.split()[:WORDS]) for line in
                         (DATA / name).read_text(encoding="utf-8").splitlines()[:LINES]]
                        for name in ("test.es", "test.en"))
    sources, targets = [*sources, "", "Hola.", ""], [*targets, "Hello.", "", ""]
    src, tgt = root / "pairs.es", root / "pairs.en"
    src.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    tgt.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    return src, tgt, sources, targets


@pytest.fixture(scope="module")
def expected(tiny_run, pairs) -> list[float]:
    """What the Python API gives, as score-pairs rounds it: total, per token, total..."""
    from mtkit.decode.translate import Translator

    scores = Translator.load(tiny_run.model, device="cpu").score(pairs[2], pairs[3])
    return [round(value, 4) for s in scores for value in (s.total, s.per_token)]


def parse(stdout: str) -> list[float]:
    """score-pairs' lines, flat: total, per token, total..."""
    rows = [line.split("\t") for line in stdout.splitlines()]
    assert all(len(row) == 2 for row in rows), stdout
    return [float(value) for row in rows for value in row]


def test_one_line_per_pair_as_the_python_api_scores(tiny_run, pairs, expected, mtkit_cli,
                                                    tmp_path):
    src, tgt, sources, _ = pairs
    done = mtkit_cli(["score-pairs", "-m", tiny_run.run_dir, "--src", src, "--tgt", tgt],
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = parse(done.stdout)
    assert len(found) == 2 * len(sources)
    assert found == pytest.approx(expected, abs=2e-4)
    assert all(value < 0 for value in found)  # empty pairs too: EOS has a probability
    assert f"scored {len(sources)} pairs" in done.stderr
    # to a file; an ensemble of one model twice scores as the model
    out = tmp_path / "scores.txt"
    both = mtkit_cli(["score-pairs", "-m", tiny_run.model, "-m", tiny_run.model, "--src", src,
                      "--tgt", tgt, "-o", out, "--quiet", "--max-tokens", "50"], cwd=tmp_path)
    assert (both.returncode, both.stdout, both.stderr) == (0, "", "")
    assert parse(out.read_text()) == pytest.approx(found, abs=2e-4)
    dash = mtkit_cli(["score-pairs", "-m", tiny_run.model, "--src", src, "--tgt", tgt, "-o", "-",
                      "--quiet"], cwd=tmp_path)  # -o -: stdout, no file named "-"
    assert dash.returncode == 0 and dash.stdout == done.stdout, dash.stderr
    assert not (tmp_path / "-").exists()


def test_files_of_unequal_length_are_one_error_naming_both(tiny_run, pairs, mtkit_inprocess,
                                                          expect_error, tmp_path):
    src, _, sources, targets = pairs
    short = tmp_path / "short.en"
    short.write_text("".join(line + "\n" for line in targets[:3]), encoding="utf-8")
    out = tmp_path / "out.txt"
    found = mtkit_inprocess(["score-pairs", "-m", tiny_run.model, "--src", src, "--tgt", short,
                             "-o", out], tmp_path)
    expect_error(found, f"--src {src} has {len(sources)} lines", f"--tgt {short} 3")
    assert not out.exists()


def test_a_pair_too_long_for_the_model_is_an_error_naming_its_line(tiny_run, mtkit_inprocess,
                                                                   expect_error, tmp_path):
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("Hola.\nAdiós.\n", encoding="utf-8")
    tgt.write_text(f"Hello.\n{LONG}\n", encoding="utf-8")
    found = mtkit_inprocess(["score-pairs", "-m", tiny_run.model, "--src", src, "--tgt", tgt],
                            tmp_path)
    expect_error(found, f"--tgt {tgt} line 2:", "the model takes at most", "--skip-long")
    found = mtkit_inprocess(["score-pairs", "-m", tiny_run.model, "--src", src, "--tgt", tgt,
                             "--skip-long"], tmp_path)
    assert found.returncode == 0, found.stderr
    first, second = found.stdout.splitlines()
    assert second == "-inf\t-inf" and float(first.split("\t")[0]) < 0
    assert "1 over the model's length given -inf" in found.stderr


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("serve-score"), tiny_run.model)
    yield started
    stop(started)


def test_the_server_scores_as_score_pairs(server, pairs, expected):
    _, _, sources, targets = pairs
    status, answer = server.post("/v1/score", {"pairs": [list(p) for p in zip(sources, targets)]})
    assert status == 200, answer
    found = [value for s in answer["scores"] for value in (s["total"], s["per_token"])]
    assert found == pytest.approx(expected, abs=1e-4)
    assert all(s["tokens"] >= 1 for s in answer["scores"]) and answer["tag"] is None
    status, again = server.post("/v1/score", {"source": sources[:2], "target": targets[:2]})
    assert status == 200  # (in a batch of other shapes: equal to fp32 rounding)
    assert [s["total"] for s in again["scores"]] == pytest.approx(found[0:4:2], abs=1e-4)


@pytest.mark.parametrize("body, status, needle", [
    ({"pairs": [["Hola.", "Hello."], ["Hola.", LONG]]}, 422, "pair 1: the target has"),
    ({"pairs": [["Hola.", "Hello."]], "tag": "BT"}, 422, "tag BT"),
    ({"source": ["Hola."], "target": []}, 422, "source has 1 items, target 0"),
    ({"text": ["Hola."]}, 422, "unknown field 'text'"),
])
def test_bad_score_requests_get_a_json_error(server, body, status, needle):
    found, answer = server.post("/v1/score", body)
    assert found == status and needle in answer["error"], answer


def test_a_pipe_is_scored_as_its_file(tmp_path, mtkit_cli):
    """`--tgt <(...)` or /dev/stdin: a pipe can be read once only, so it is not counted
    first (the count used to consume it: '--tgt /dev/stdin 0' lines)."""
    model = DATA / "run-v1" / "runs" / "old" / "model.pt"
    source = DATA / "run-v1" / "data" / "test.src"
    lines = source.read_text(encoding="utf-8").splitlines()
    (tmp_path / "tgt.txt").write_text("".join(line[::-1] + "\n" for line in lines),
                                      encoding="utf-8")
    args = ["score-pairs", "-m", model, "--src", source, "--quiet"]
    by_file = mtkit_cli([*args, "--tgt", "tgt.txt"], cwd=tmp_path)
    for stdin in ("/dev/stdin", "-"):
        by_pipe = mtkit_cli([*args, "--tgt", stdin], cwd=tmp_path,
                            input=(tmp_path / "tgt.txt").read_bytes())
        assert by_pipe.returncode == 0, by_pipe.stderr
        assert by_pipe.stdout == by_file.stdout != ""
    both = mtkit_cli(["score-pairs", "-m", model, "--src", "-", "--tgt", "-"], cwd=tmp_path)
    assert both.returncode == 2 and "only one side" in both.stderr
    short = mtkit_cli([*args, "--tgt", "/dev/stdin"], cwd=tmp_path, input="a\nb\n")
    assert short.returncode == 2 and "Traceback" not in short.stderr
    assert f"--src {source} and --tgt /dev/stdin differ in length" in short.stderr
