"""Scores must be sacrebleu's own: compare with its command-line tool on tiny files."""

import subprocess
import sys
from pathlib import Path

import pytest

from mtkit.errors import ConfigError, DataError
from mtkit.metrics import compare_systems, corpus_scores

SACREBLEU = Path(sys.executable).parent / "sacrebleu"

HYPS = [
    "The cat sat on the mat.",
    "Hello world, how are you?",
    "It rains in Spain mainly.",
    "A quick brown fox jumps.",
]
REF1 = [
    "The cat sat on a mat.",
    "Hello there world, how are you?",
    "The rain in Spain falls mainly on the plain.",
    "The quick brown fox jumps over the lazy dog.",
]
REF2 = [
    "A cat was sitting on the mat.",
    "Hi world, how are you?",
    "It rains mainly in Spain.",
    "A fast brown fox jumps.",
]
WORSE = [
    "cat mat",
    "Hello",
    "Spain rain.",
    "fox",
]


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def sacrebleu_cli(*args: str) -> list[str]:
    out = subprocess.run([str(SACREBLEU), *args], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()


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


def test_chinese_target_does_not_use_13a():
    zh = ["我喜欢猫。", "今天天气很好。"]
    (score,) = corpus_scores(zh, [zh], ("bleu",), tgt_lang="zh")
    assert "tok:zh" in score.signature and "13a" not in score.signature
    assert score.score == pytest.approx(100.0)
    (default,) = corpus_scores(zh, [zh], ("bleu",))
    assert "tok:13a" in default.signature


def test_japanese_target_uses_mecab_or_explains_what_is_missing():
    ja = ["猫が好きです。"]
    try:
        (score,) = corpus_scores(ja, [ja], ("bleu",), tgt_lang="ja")
    except ConfigError as exc:  # mecab-python3 / ipadic are optional sacrebleu extras
        assert "sacrebleu[ja]" in str(exc)
    else:
        assert "tok:ja-mecab" in score.signature


def test_line_count_mismatch_names_both_counts():
    with pytest.raises(DataError, match=r"have 4 lines but reference 2 \(b.txt\) has 3"):
        corpus_scores(HYPS, [REF1, REF2[:3]], ref_names=["a.txt", "b.txt"])
    with pytest.raises(DataError, match="no lines"):
        corpus_scores([], [[]])
    with pytest.raises(ConfigError, match="unknown metric"):
        corpus_scores(HYPS, [REF1], ("meteor",))
    with pytest.raises(ConfigError, match="unknown BLEU tokenizer"):
        corpus_scores(HYPS, [REF1], ("bleu",), tokenize="nope")


def test_bootstrap_confidence_interval():
    bleu, chrf = corpus_scores(HYPS, [REF1], n_bootstrap=20)
    assert bleu.ci is not None and bleu.ci >= 0 and bleu.mean is not None
    assert "bs:20" in bleu.signature
    (plain,) = corpus_scores(HYPS, [REF1], ("bleu",))
    assert plain.ci is None and plain.score == pytest.approx(bleu.score)


@pytest.mark.parametrize("method", ["bootstrap", "ar"])
def test_compare_systems_gives_scores_cis_and_p_values(method):
    rows = compare_systems(
        {"base": HYPS, "worse": WORSE},
        [REF1, REF2],
        metrics=("bleu", "chrf"),
        method=method,
        n_samples=50,
    )
    assert [(r["name"], r["metric"]) for r in rows] == [
        ("base", "BLEU"),
        ("base", "chrF2"),
        ("worse", "BLEU"),
        ("worse", "chrF2"),
    ]
    expected = corpus_scores(HYPS, [REF1, REF2]) + corpus_scores(WORSE, [REF1, REF2])
    for row, score in zip(rows, expected, strict=True):
        assert row["score"] == pytest.approx(score.score)
        assert row["ci"] is not None and row["ci"] >= 0
    assert rows[0]["p_value"] is None  # the baseline is not tested against itself
    for row in rows[2:]:
        assert 0.0 <= row["p_value"] <= 1.0


def test_compare_systems_checks_every_system():
    with pytest.raises(DataError, match=r"hypotheses \(short\) have 3 lines"):
        compare_systems({"base": HYPS, "short": HYPS[:3]}, [REF1])
    with pytest.raises(ConfigError, match="significance test"):
        compare_systems({"base": HYPS}, [REF1], method="t-test")
