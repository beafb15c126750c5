"""`mtkit score`'s report without the CLI (evaluate/score.py): the metrics checked, the
text and JSON forms. (The command itself: tests/system/test_score.py.)"""

from __future__ import annotations

import json

import pytest

from mtkit.errors import ConfigError
from mtkit.evaluate.score import ScoreRequest, score_report


def test_one_line_per_metric_or_json(tmp_path):
    (tmp_path / "ref").write_text("the cat sat on the mat\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("the cat sat on a mat\n", encoding="utf-8")
    request = ScoreRequest(refs=(tmp_path / "ref",), hyp=tmp_path / "hyp", metrics="bleu,ter")
    lines = score_report(request).splitlines()
    assert [line.split("|")[0] for line in lines] == ["BLEU", "TER"]
    payload = json.loads(score_report(ScoreRequest(**{**request.__dict__, "as_json": True})))
    assert [s["name"] for s in payload] == ["BLEU", "TER"]


def test_an_unknown_metric_is_named():
    with pytest.raises(ConfigError, match="unknown metric 'meteor'"):
        score_report(ScoreRequest(refs=(), metrics="bleu,meteor"))
