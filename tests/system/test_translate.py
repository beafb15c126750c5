"""`mtkit translate`'s line contract, through the installed script, on the tiny model the
session trains once (tests/conftest.py: tiny_run). The Translator and engine in process,
on scripted models: tests/unit/test_translator.py.

Exactly one output line per input line, in input order, always: empty and hostile input,
over-long lines, invalid UTF-8, CRLF, Unicode line separators, n-best TSV, streaming, a
closed stdout and ensembles. Most runs use greedy search (`--beam 1`), so outputs are
deterministic and comparable across runs.
"""

from __future__ import annotations

import math
import os
import re
import select
import stat
import subprocess
import time
from pathlib import Path

import pytest
import torch
from builders import DATA, weights

from mtkit.decode.engine import TorchEngine
from mtkit.decode.int8 import quantize_int8
from mtkit.decode.translate import Translator
from mtkit.model.checkpoint import average_checkpoints, load_checkpoint
from mtkit.train.run import RunPaths


def output_lines(stdout: str) -> list[str]:
    """The lines of an output that must end with '\\n' (no partial last line)."""
    assert stdout == "" or stdout.endswith("\n"), repr(stdout[-80:])
    return stdout.split("\n")[:-1]


def spanish_lines() -> list[str]:
    lines = []
    for name in ("train.es", "dev.es", "test.es"):
        lines += [s for s in (DATA / name).read_text(encoding="utf-8").split("\n") if s]
    return lines


# --------------------------------------------------------------------------- hostile input

LONG_LINE = "x" + (" ".join(spanish_lines()) * 10)[:99_999]
HOSTILE = [
    "En el principio creó Dios los cielos y la tierra.".encode(),  # 0
    b"",  # 1 empty
    b"   \t  ",  # 2 whitespace only
    "Y dijo Dios: Sea la luz; y fué la luz.".encode(),  # 3
    LONG_LINE.encode(),  # 4 100,000 characters
    b"hola \xff\xfe mundo",  # 5 invalid UTF-8
    b"antes\x00del NUL",  # 6 a NUL byte
    b"control \x01\x07\x1b[31m chars\x7f",  # 7 control characters
    "En el principio creó Dios los cielos y la tierra.\r".encode(),  # 8 = 0 with CRLF
    b"\r",  # 9 an empty CRLF line
    "antes\u2028después\u2029y\x85más".encode(),  # 10 Unicode line separators inside a line
    b"\xc3",  # 11 a truncated UTF-8 sequence
    "\u3000 \u00a0".encode(),  # 12 Unicode whitespace only
    "La última línea.".encode(),  # 13
]
EMPTY_OUT = {1, 2, 9, 12}
assert len(LONG_LINE) == 100_000


@pytest.fixture(scope="module")
def model(tiny_run) -> Path:
    return tiny_run.model


@pytest.fixture(scope="module")
def hostile(model, mtkit_cli, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("hostile")
    result = mtkit_cli(["translate", "-m", model, "--beam", "1"], cwd=cwd,
                       input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    return result


def test_one_output_line_per_input_line(hostile):
    assert len(output_lines(hostile.stdout)) == len(HOSTILE)


def test_empty_and_whitespace_lines_give_empty_lines(hostile):
    out = output_lines(hostile.stdout)
    assert [out[i] for i in sorted(EMPTY_OUT)] == [""] * len(EMPTY_OUT)
    # (the tiny model may also translate a real line to nothing; the --scores test below
    # tells the two apart)


def test_long_line_is_truncated_with_a_warning(hostile):
    assert re.search(r"input line 5: \d+ tokens, truncated", hostile.stderr), hostile.stderr
    assert "1 input truncated" in hostile.stderr


def test_invalid_utf8_nul_and_control_characters(hostile):
    # one line out per line in: test_one_output_line_per_input_line; translated, not
    # skipped: test_scores_and_quiet
    assert re.search(r"2 input lines had invalid UTF-8", hostile.stderr), hostile.stderr


def test_crlf_line_translates_like_lf(hostile):
    out = output_lines(hostile.stdout)
    assert out[8] == out[0]
    assert "\r" not in hostile.stdout


def test_unicode_line_separators_do_not_split_lines(hostile):
    """U+2028, U+2029 and U+0085 (line 10) stay inside their line: every later line keeps
    its position (lines 10 and 13 are translated again in test_input_and_output_files_with_crlf)."""
    assert len(output_lines(hostile.stdout)) == len(HOSTILE)


def test_summary_line_on_stderr(hostile):
    assert re.search(rf"^translated {len(HOSTILE)} sentences", hostile.stderr, re.M)
    assert "translated" not in hostile.stdout


# --------------------------------------------------------------------------- order


def thousand_lines() -> list[str]:
    """1,000 lines of 1 to 45 words (some over the model's 63 tokens), some empty."""
    source = spanish_lines()
    lines = []
    for i in range(1000):
        if i % 11 == 0:
            lines.append("")
        elif i % 17 == 0:
            lines.append("  \t ")
        else:
            words = source[(i * 13) % len(source)].split()
            lines.append(" ".join(words[: 1 + (i * 7) % 45]))
    return lines


@pytest.fixture(scope="module")
def thousand(model, mtkit_cli, tmp_path_factory):
    lines = thousand_lines()
    result = mtkit_cli(["translate", "-m", model, "--beam", "1"],
                       cwd=tmp_path_factory.mktemp("thousand"),
                       input="".join(line + "\n" for line in lines))
    assert result.returncode == 0, result.stderr
    return lines, output_lines(result.stdout), result


def test_thousand_lines_come_back_as_thousand(thousand):
    lines, out, result = thousand
    assert len(out) == 1000
    assert all(out[i] == "" for i, line in enumerate(lines) if not line.strip())
    assert "translated 1000 sentences" in result.stderr


def test_batched_output_equals_one_by_one(thousand, model):
    """Each line translated alone (Python API) gives the line the batched CLI run gave at
    the same position: the batches were restored to input order."""
    lines, out, _ = thousand
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        translator = Translator.load(model, device="cpu", beam=1)
        sample = [i for i in range(0, 1000, 19) if lines[i].strip()] + [998, 999]
        alone = {i: translator.translate([lines[i]])[0] for i in sample}
    finally:
        torch.set_num_threads(threads)
    assert {i: out[i] for i in sample} == alone
    assert len({alone[i] for i in sample}) > 10, "the sample should not be all alike"


# --------------------------------------------------------------------------- output formats


def test_nbest_tsv(model, mtkit_cli, tmp_path):
    inputs = [HOSTILE[0], b"", HOSTILE[3], HOSTILE[13]]
    result = mtkit_cli(["translate", "-m", model, "--nbest", "3", "--beam", "3"], cwd=tmp_path,
                       input=b"".join(line + b"\n" for line in inputs))
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in output_lines(result.stdout)]
    assert all(len(row) == 3 for row in rows), rows
    by_index: dict[int, list[tuple[float, str]]] = {}
    for index, score, text in rows:
        by_index.setdefault(int(index), []).append((float(score), text))
    assert sorted(by_index) == [0, 1, 2, 3]
    assert [int(row[0]) for row in rows] == sorted(int(row[0]) for row in rows)
    assert by_index[1] == [(0.0, "")]  # an empty line: one row, empty hypothesis
    for index in (0, 2, 3):
        hyps = by_index[index]
        assert len(hyps) == 3, hyps
        scores = [score for score, _ in hyps]
        assert all(math.isfinite(s) for s in scores)
        assert scores == sorted(scores, reverse=True), scores


def test_scores_and_quiet(model, mtkit_cli, tmp_path, hostile):
    """`--scores` appends TAB + score; empty input lines score 0 (the model never ran),
    every other line, however hostile, was translated (a finite negative log-prob)."""
    result = mtkit_cli(["translate", "-m", model, "--beam", "1", "--scores", "--quiet"],
                       cwd=tmp_path, input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    assert "translated" not in result.stderr
    plain = output_lines(hostile.stdout)
    rows = output_lines(result.stdout)
    assert len(rows) == len(HOSTILE)
    for i, row in enumerate(rows):
        text, tab, score = row.rpartition("\t")
        assert tab and text == plain[i], (i, row)
        if i in EMPTY_OUT:
            assert float(score) == 0.0, (i, row)
        else:
            assert math.isfinite(float(score)) and float(score) < 0, (i, row)


def test_exact_stop_never_scores_below_early(model, mtkit_cli, tmp_path):
    """The rules run the same search; exact only stops later, so per sentence its best
    score is at least early's and top's. A bad --stop is a one-line error."""
    source = "".join(line + "\n" for line in spanish_lines()[:40])
    scores = {}
    for stop in ("early", "exact", "top"):
        result = mtkit_cli(["translate", "-m", model, "--beam", "4", "--lenpen", "1.5",
                            "--stop", stop, "--scores", "--quiet"], cwd=tmp_path, input=source)
        assert result.returncode == 0, result.stderr
        scores[stop] = [float(row.rpartition("\t")[2]) for row in output_lines(result.stdout)]
    assert len(scores["exact"]) == 40
    for other in ("early", "top"):
        assert all(x >= e - 1e-5 for x, e in zip(scores["exact"], scores[other], strict=True))
    result = mtkit_cli(["translate", "-m", model, "--stop", "never"], cwd=tmp_path, input="")
    assert result.returncode != 0 and "--stop never" in result.stderr
    assert "Traceback" not in result.stderr


def test_input_and_output_files_with_crlf(model, mtkit_cli, tmp_path, hostile):
    """--input/--output, stdout stays empty; the input file has CRLF line ends and a last
    line without one, and gives the lines the same text gave with LF."""
    lines = [HOSTILE[0], HOSTILE[3], b"", HOSTILE[10], HOSTILE[13]]
    (tmp_path / "in.es").write_bytes(b"\r\n".join(lines))
    result = mtkit_cli(["translate", "-m", model, "--beam", "1", "--input", "in.es",
                        "--output", "out.en"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "translated 5 sentences" in result.stderr
    out = output_lines(hostile.stdout)
    written = (tmp_path / "out.en").read_text(encoding="utf-8")
    assert output_lines(written) == [out[0], out[3], "", out[10], out[13]]


def test_output_through_a_symlink_and_onto_a_device(model, mtkit_cli, tmp_path, expect_error):
    """-o follows a symlink (the file it names is replaced, the link stays) and writes
    through a device; a full one (a copy of /dev/full) is a one-line error."""
    (tmp_path / "real.en").write_text("previous\n")
    (tmp_path / "link.en").symlink_to("real.en")
    result = mtkit_cli(["translate", "-m", model, "--beam", "1", "-o", "link.en"],
                       cwd=tmp_path, input=b"hola\n")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "link.en").is_symlink()
    assert (tmp_path / "real.en").read_text(encoding="utf-8") != "previous\n"
    try:
        os.mknod(tmp_path / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    result = mtkit_cli(["translate", "-m", model, "--beam", "1", "-o", "full"], cwd=tmp_path,
                       input=b"hola\n")
    expect_error(result, "full", "No space left on device")
    assert stat.S_ISCHR((tmp_path / "full").stat().st_mode)


def test_dash_means_stdin_and_stdout(model, mtkit_cli, tmp_path, hostile):
    """-i - and -o -, as most Unix tools read them: no file named "-" is read or written."""
    result = mtkit_cli(["translate", "-m", model, "--beam", "1", "-i", "-", "-o", "-"],
                       cwd=tmp_path, input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    assert result.stdout == hostile.stdout
    assert not (tmp_path / "-").exists()


def test_ensemble_of_one_model_twice_equals_the_model(model, mtkit_cli, tmp_path, hostile):
    result = mtkit_cli(["translate", "-m", model, "-m", model, "--beam", "1"], cwd=tmp_path,
                       input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    assert result.stdout == hostile.stdout


# --------------------------------------------------------------------------- average


def test_average_last_more_than_kept_says_how_many(tiny_run, tmp_path, mtkit_cli):
    """--last 10 of a run that kept 2 step checkpoints averages those 2, and says so: the
    file is not the 10-checkpoint average asked for."""
    kept = RunPaths(tiny_run.run_dir).step_checkpoints()
    result = mtkit_cli(["average", "--last", "10", tiny_run.run_dir, "-o", "avg.pt"],
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (f"average --last 10: {tiny_run.run_dir} has {len(kept)} step checkpoints; "
            f"averaging those {len(kept)}") in result.stderr
    assert load_checkpoint(tmp_path / "avg.pt").averaged_from == [str(p) for p in kept]


def test_average_last_two_then_translate(tiny_run, tmp_path, mtkit_cli):
    result = mtkit_cli(["average", "--last", "2", tiny_run.run_dir, "-o", "avg.pt"],
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    averaged = weights(tmp_path / "avg.pt")
    last_two = RunPaths(tiny_run.run_dir).step_checkpoints()[-2:]
    reference = average_checkpoints(last_two).weights
    assert averaged.keys() == reference.keys()
    assert all(torch.equal(averaged[k], reference[k]) for k in averaged)

    result = mtkit_cli(["translate", "-m", "avg.pt", "--beam", "1", "--quiet"], cwd=tmp_path,
                       input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == len(HOSTILE)


# --------------------------------------------------------------------------- streaming, pipes


def read_line_within(stream, seconds: float) -> bytes | None:
    """One line from a pipe, or None if it does not arrive in time."""
    deadline = time.monotonic() + seconds
    data = b""
    fd = stream.fileno()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1)
        if not chunk:
            return data or None
        data += chunk
    return data


def test_interactive_use_answers_each_line(model, tmp_path, mtkit_script, hostile):
    """One line written, stdin left open: its translation comes back at once."""
    exe, env = mtkit_script
    proc = subprocess.Popen(
        [str(exe), "translate", "-m", str(model), "--beam", "1"],
        cwd=tmp_path, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        proc.stdin.write(HOSTILE[0] + b"\n")
        proc.stdin.flush()
        first = read_line_within(proc.stdout, 60)
        assert first is not None, "no answer while stdin stayed open"
        assert first.decode("utf-8") == output_lines(hostile.stdout)[0] + "\n"
        proc.stdin.write(b"\n")  # a second line, answered as well
        proc.stdin.flush()
        assert read_line_within(proc.stdout, 60) == b"\n"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.fixture(scope="module")
def closed_stdout(model, tmp_path_factory, mtkit_script):
    """`yes 'hola' | head -3000 | mtkit translate ... | head -1`, and mtkit's exit code."""
    exe, env = mtkit_script
    cwd = tmp_path_factory.mktemp("pipe")
    script = (f"yes 'hola' | head -3000 | '{exe}' translate -m '{model}' --beam 1 "
              "2> err.txt | head -1; echo ${PIPESTATUS[2]} > status.txt")
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          timeout=300)
    return (done.stdout.decode(), (cwd / "err.txt").read_text(errors="replace"),
            int((cwd / "status.txt").read_text()))


def test_closed_stdout_ends_quietly(closed_stdout):
    stdout, stderr, _ = closed_stdout
    assert len(output_lines(stdout)) == 1
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr
    assert "Error" not in stderr, stderr


def test_closed_stdout_exit_code_is_141(closed_stdout):
    _, _, status = closed_stdout
    assert status == 141


# --------------------------------------------------------------------------- int8


def test_int8_quantisation_keeps_the_line_contract_and_the_model(model, mtkit_cli, tmp_path):
    result = mtkit_cli(["translate", "-m", model, "--beam", "2", "--quantize", "int8"],
                       cwd=tmp_path, input=b"".join(line + b"\n" for line in HOSTILE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == len(HOSTILE)

    engine = TorchEngine.load([model])
    models, tokenizer = engine.models, engine.tokenizer
    quantized = quantize_int8(models[0])
    assert not isinstance(quantized.out_proj, torch.nn.Linear)  # the linears were replaced
    src = torch.tensor([tokenizer.encode_src(["Y dijo Dios: Sea la luz."])[0] + [3]])
    tgt = torch.tensor([[2] + tokenizer.encode_tgt(["And God said, Let there be light."])[0]])
    with torch.inference_mode():
        full = models[0](src, tgt).log_softmax(-1)
        approx = quantized(src, tgt).log_softmax(-1)
    assert (full.argmax(-1) == approx.argmax(-1)).float().mean() >= 0.8
    assert (full - approx).abs().max() < 1.0  # int8 weights: close, not equal


# --------------------------------------------------------------------------- compiled steps


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_the_compiled_search_translates_as_plain_python(model, mtkit_script, tmp_path,
                                                        quantize):
    """On the CPU the decode step and the search's bookkeeping run compiled by TorchScript
    (docs/architecture.md); under torch's PYTORCH_JIT=0 they run as the Python they are
    written in. The same n-best lists and scores, to the last printed digit."""
    script, env = mtkit_script
    lines = "".join(line + "\n" for line in spanish_lines()[:12])
    args = [script, "translate", "-m", model, "--beam", "4", "--nbest", "2", "--scores",
            "--quantize", quantize, "--threads", "1"]
    outputs = []
    for jit in ("1", "0"):
        done = subprocess.run(args, cwd=tmp_path, input=lines.encode(), capture_output=True,
                              env={**env, "PYTORCH_JIT": jit}, timeout=300)
        assert done.returncode == 0, done.stderr.decode()
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 24
