"""Scores must be sacrebleu's own (compared with sacrebleu's command-line tool in
tests/system/test_score.py): tokenisation by target language, errors, confidence
intervals and significance tests, in process."""

import pytest
from builders import HYPS, REF1, REF2

from mtkit.errors import ConfigError, DataError
from mtkit.evaluate.metrics import compare_systems, corpus_scores

WORSE = [
    "cat mat",
    "Hello",
    "Spain rain.",
    "fox",
]


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
