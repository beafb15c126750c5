"""Scores are sacrebleu's own: mtkit.metrics and `mtkit score` against sacrebleu's
command-line tool, each run in a subprocess as a user would."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import DATA, HYPS, REF1, REF2

from mtkit.evaluate.metrics import corpus_scores

SACREBLEU = Path(sys.executable).with_name("sacrebleu")  # sacrebleu's own command


def sacrebleu(*args: str | Path) -> str:
    """What `sacrebleu ARGS` prints on stdout."""
    done = subprocess.run([str(SACREBLEU), *map(str, args)], capture_output=True, text=True,
                          check=True)
    return done.stdout


def sacrebleu_cli(*args: str | Path) -> list[str]:
    return sacrebleu(*args).strip().splitlines()


def sacrebleu_scores(refs: list[Path], hyp: Path) -> list[float]:
    """BLEU and chrF from the sacrebleu command itself, 4 decimals."""
    out = sacrebleu(*refs, "-i", hyp, "-m", "bleu", "chrf", "-b", "-w", "4")
    return [float(x) for x in json.loads(out)]


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# --------------------------------------------------------------------------- mtkit.metrics


@pytest.mark.parametrize("refs", [[REF1], [REF1, REF2]], ids=["one-ref", "two-refs"])
def test_scores_equal_sacrebleu_cli(tmp_path, refs):
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref_files = [write_lines(tmp_path / f"ref{i}.txt", r) for i, r in enumerate(refs)]
    cli = sacrebleu_cli(*ref_files, "-i", hyp, "-m", "bleu", "chrf", "-b", "-w", "4", "-f", "text")
    ours = corpus_scores(HYPS, refs, metrics=("bleu", "chrf"))
    assert [s.name for s in ours] == ["BLEU", "chrF2"]
    assert [f"{s.score:.4f}" for s in ours] == cli
    # the full report line too (signature included), at sacrebleu's API width of 2
    cli_text = sacrebleu_cli(*ref_files, "-i", hyp, "-m", "bleu", "chrf", "-w", "2", "-f", "text")
    assert [s.text for s in ours] == [line.strip() for line in cli_text]
    assert ours[0].signature.startswith(f"nrefs:{len(refs)}|")


def test_ter_and_lowercase_match_cli(tmp_path):
    hyp = write_lines(tmp_path / "hyp.txt", [h.upper() for h in HYPS])
    ref = write_lines(tmp_path / "ref.txt", REF1)
    cli = sacrebleu_cli(ref, "-i", hyp, "-m", "bleu", "ter", "-lc", "-b", "-w", "4", "-f", "text")
    ours = corpus_scores([h.upper() for h in HYPS], [REF1], ("bleu", "ter"), lowercase=True)
    assert [f"{s.score:.4f}" for s in ours] == cli
    assert "case:lc" in ours[0].signature


# --------------------------------------------------------------------------- mtkit score


@pytest.fixture(scope="module")
def half_right(tmp_path_factory) -> Path:
    """A hypothesis file with a middling BLEU: every other reference line, words reversed."""
    path = tmp_path_factory.mktemp("hyp") / "half.en"
    refs = (DATA / "test.en").read_text(encoding="utf-8").split("\n")[:-1]
    out = [r if i % 2 else " ".join(reversed(r.split())) for i, r in enumerate(refs)]
    path.write_text("".join(line + "\n" for line in out), encoding="utf-8")
    return path


def test_score_json_matches_sacrebleu(tiny_run, mtkit_cli):
    hyp = next((tiny_run.run_dir / "eval").glob("*.hyp.en"))
    result = mtkit_cli(["score", "--ref", DATA / "test.en", "--json", "-i", hyp],
                       cwd=tiny_run.root)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == ["BLEU", "chrF2"]
    expected = sacrebleu_scores([DATA / "test.en"], hyp)
    assert [round(r["score"], 4) for r in rows] == pytest.approx(expected, abs=1e-4)
    assert all("nrefs:1" in r["signature"] and "version:" in r["signature"] for r in rows)


def test_score_two_references_match_sacrebleu(tiny_run, half_right, mtkit_cli, tmp_path):
    other = tmp_path / "other.en"  # a second reference that differs from the first
    other.write_text((DATA / "test.en").read_text(encoding="utf-8").replace(" the ", " a "),
                     encoding="utf-8")
    result = mtkit_cli(["score", "--ref", DATA / "test.en", "--ref", other],
                       cwd=tiny_run.root, input=half_right.read_bytes())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("BLEU|nrefs:2") and lines[1].startswith("chrF2|nrefs:2")
    printed = [float(re.search(r" = ([\d.]+)", line).group(1)) for line in lines]
    expected = sacrebleu_scores([DATA / "test.en", other], half_right)
    assert printed == [round(x, 2) for x in expected]
    assert 20 < printed[0] < 90  # a middling score: a meaningful comparison


def test_score_significance_prints_a_p_value(tiny_run, half_right, mtkit_cli):
    hyp = next((tiny_run.run_dir / "eval").glob("*.hyp.en"))
    result = mtkit_cli(["score", "--ref", DATA / "test.en", "-s", hyp, "-s", half_right],
                       cwd=tiny_run.root)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    baseline = [r for r in rows if r[0] == str(hyp)]
    other = [r for r in rows if r[0] == str(half_right)]
    assert len(baseline) == 2 and len(other) == 2
    assert all("baseline" in r[-1] for r in baseline)
    for row in other:
        assert re.search(r"p = 0\.\d{4}", row[-1]), row


# --------------------------------------------------------------------------- every option

MIXED = [h.upper() if i % 2 else h for i, h in enumerate(HYPS)]  # so case matters
OPTION_SETS = {
    # mtkit score's options: the sacrebleu metrics they stand for
    "defaults": ([], {}),
    "-lc": (["-lc"], {"bleu": {"lowercase": True}}),
    "--chrf-lowercase": (["--chrf-lowercase"], {"chrf": {"lowercase": True}}),
    "--ter-case-sensitive": (["--ter-case-sensitive"], {"ter": {"case_sensitive": True}}),
    "--tokenize char": (["--tokenize", "char"], {"bleu": {"tokenize": "char"}}),
    "--tgt-lang zh": (["--tgt-lang", "zh"], {"bleu": {"trg_lang": "zh"}}),
}


@pytest.mark.parametrize("case", list(OPTION_SETS))
@pytest.mark.parametrize("nrefs", [1, 2])
def test_every_option_equals_sacrebleus_api(case, nrefs, tmp_path, mtkit_inprocess):
    from sacrebleu.metrics import BLEU, CHRF, TER

    args, settings = OPTION_SETS[case]
    refs = [REF1, REF2][:nrefs]
    ref_args = [a for i, r in enumerate(refs)
                for a in ("-r", write_lines(tmp_path / f"ref{i}.txt", r))]
    hyp = write_lines(tmp_path / "hyp.txt", MIXED)
    result = mtkit_inprocess(["score", *ref_args, "-i", hyp, "--metrics", "bleu,chrf,ter",
                              "--json", *args], tmp_path)
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)
    metrics = [BLEU(**settings.get("bleu", {})), CHRF(**settings.get("chrf", {})),
               TER(**settings.get("ter", {}))]
    theirs = [(m.corpus_score(MIXED, refs).score, m.get_signature().format()) for m in metrics]
    assert [(row["score"], row["signature"]) for row in ours] == theirs


def test_defaults_equal_sacrebleus_command(tmp_path, mtkit_inprocess):
    """TER is case-insensitive and -lc is BLEU's alone, as in sacrebleu's own command."""
    hyp = write_lines(tmp_path / "hyp.txt", MIXED)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    for extra in ([], ["-lc"]):
        cli = sacrebleu_cli(ref, "-i", hyp, "-m", "bleu", "chrf", "ter", "-w", "2", "-f",
                            "text", *extra)
        result = mtkit_inprocess(["score", "-r", ref, "--metrics", "bleu,chrf,ter", "-i", hyp,
                                  *extra], tmp_path)
        assert result.stdout.splitlines() == [line.strip() for line in cli]


def test_the_old_hyp_spelling_still_works(tmp_path, mtkit_inprocess):
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    new = mtkit_inprocess(["score", "-r", ref, "-i", hyp], tmp_path)
    old = mtkit_inprocess(["score", "-r", ref, "--hyp", hyp], tmp_path)
    assert old.returncode == 0 and old.stdout == new.stdout != ""


@pytest.mark.parametrize("metrics", [",", "", " , "])
def test_no_metric_is_an_error(metrics, tmp_path, mtkit_inprocess, expect_error):
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    result = mtkit_inprocess(["score", "-r", ref, "--metrics", metrics, "-i", hyp], tmp_path)
    expect_error(result, "--metrics", "no metric given")


def test_dash_reads_the_hypotheses_from_stdin(tmp_path, mtkit_cli):
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    by_file = mtkit_cli(["score", "-r", ref, "-i", hyp], cwd=tmp_path)
    by_dash = mtkit_cli(["score", "-r", ref, "-i", "-"], cwd=tmp_path,
                        input=Path(hyp).read_bytes())
    assert by_dash.returncode == 0, by_dash.stderr
    assert by_dash.stdout == by_file.stdout != ""


def test_a_tokenizer_whose_model_cannot_be_downloaded_is_named(tmp_path, monkeypatch,
                                                                mtkit_inprocess, expect_error):
    """flores200 downloads its SentencePiece model on first use: offline, the error names
    the tokenizer and the download, not a bare '<urlopen error ...>'."""
    import urllib.error

    import sacrebleu.tokenizers.tokenizer_spm as spm

    def offline(url: str, path: str) -> None:
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(spm, "SACREBLEU_DIR", str(tmp_path / "sacrebleu"))
    monkeypatch.setattr(spm, "download_file", offline)
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    result = mtkit_inprocess(["score", "-r", ref, "-i", hyp, "--tokenize", "flores200"],
                             tmp_path)
    expect_error(result, "BLEU tokenizer 'flores200' is unavailable",
                 "could not download its SentencePiece model", "Name or service not known")


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None,
                    reason="sacrebleu's Japanese tokenizer is installed")
def test_a_tokenizer_without_its_package_is_named(tmp_path, mtkit_inprocess, expect_error):
    hyp = write_lines(tmp_path / "hyp.txt", HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    result = mtkit_inprocess(["score", "-r", ref, "-i", hyp, "--tokenize", "ja-mecab"],
                             tmp_path)
    error = expect_error(result, "BLEU tokenizer 'ja-mecab' is unavailable",
                         "pip install sacrebleu[ja]")
    assert "None" not in error


def test_stdin_is_read_as_a_file_is(tmp_path, mtkit_cli):
    """A byte-order mark and CRLF endings score the same through `-i FILE` and `< FILE`."""
    ref = write_lines(tmp_path / "ref.txt", REF1)
    hyp = tmp_path / "hyp.txt"
    hyp.write_bytes(b"\xef\xbb\xbf" + "".join(h + "\r\n" for h in HYPS).encode("utf-8"))
    args = ["score", "-r", ref, "--metrics", "bleu,chrf,ter"]
    by_file = mtkit_cli([*args, "-i", hyp], cwd=tmp_path)
    by_stdin = mtkit_cli(args, cwd=tmp_path, input=hyp.read_bytes())
    plain = mtkit_cli([*args, "-i", write_lines(tmp_path / "plain.txt", HYPS)], cwd=tmp_path)
    assert by_stdin.returncode == 0, by_stdin.stderr
    assert by_stdin.stdout == by_file.stdout == plain.stdout != ""


@pytest.mark.parametrize(("options", "needles"), [
    (["-i", "hyp.txt", "-s", "a.txt", "-s", "b.txt"], ["--input hyp.txt", "not with --system"]),
    (["-s", "a.txt"], ["--system", "two or more"]),
    (["-i", "hyp.txt", "--paired-ar"], ["--paired-ar", "--system"]),
    (["-s", "a.txt", "-s", "b.txt", "-s", "a.txt"], ["--system a.txt", "given twice"]),
])
def test_a_comparison_takes_its_systems_only(options, needles, tmp_path, mtkit_inprocess,
                                             expect_error):
    """`-i` beside `-s` was left out of the comparison without a word; one system has
    nothing to be compared with; --paired-ar without systems tested nothing; a file given
    twice showed one row."""
    for name in ("hyp.txt", "a.txt", "b.txt"):
        write_lines(tmp_path / name, HYPS)
    ref = write_lines(tmp_path / "ref.txt", REF1)
    result = mtkit_inprocess(["score", "-r", ref, *options], tmp_path)
    expect_error(result, *needles)
