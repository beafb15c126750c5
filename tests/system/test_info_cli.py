"""`mtkit info` on the tiny run, as a user runs it: text, --json, and its errors."""

from __future__ import annotations

import json
import re

import pytest
from builders import weights

from mtkit.version import __version__


@pytest.fixture(scope="module")
def run(tiny_run, tmp_path_factory):
    return tiny_run.copy_to(tmp_path_factory.mktemp("info"))


def expected_parameters(run) -> int:
    """The trained values of model.pt, read with torch alone: with tie_embeddings 'all' the
    source embedding and the output projection are the target embedding."""
    tied = {"src_embed.weight", "out_proj.weight"}
    return sum(v.numel() for k, v in weights(run.model).items() if k not in tied)


def rows(stdout: str) -> dict[str, str]:
    pairs = [m.groups() for m in re.finditer(r"^  (\S.*?):\s+(.*)$", stdout, re.M)]
    return dict(reversed(pairs))


def test_text_for_the_run_dir_and_its_model(run, mtkit_cli):
    scores = json.loads((run.run_dir / "eval" / "scores.json").read_text())
    bleu = scores["results"][0]["scores"]["BLEU"]
    outputs = [mtkit_cli(["info", target], cwd=run.root)
               for target in ("runs/tiny", "runs/tiny/model.pt")]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        shown = rows(result.stdout)
        assert shown["path"] == "runs/tiny/model.pt"
        assert shown["layers"] == "2 encoder, 2 decoder"
        assert (shown["d_model"], shown["heads"], shown["ffn_dim"]) == ("64", "4", "128")
        assert shown["tie_embeddings"] == "all"
        assert shown["parameters"] == f"{expected_parameters(run):,}"
        assert shown["languages"] == "es -> en"
        assert shown["vocabulary"] == "300 source, 300 target (joint unigram)"
        assert shown["updates"] == "20"
        assert shown["test.es BLEU"] == f"{bleu['score']:.2f}  {bleu['signature']}"
        assert shown["model.pt is"].startswith(json.loads(
            (run.run_dir / "model.stamp.json").read_text())["chosen"])
    assert outputs[0].stdout == outputs[1].stdout


def test_json_has_the_same_figures(run, mtkit_cli):
    result = mtkit_cli(["info", "runs/tiny", "--json"], cwd=run.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["file"]["mtkit_version"] == __version__
    assert data["file"]["bytes"] == run.model.stat().st_size
    assert data["architecture"]["enc_layers"] == 2 and data["architecture"]["d_model"] == 64
    assert data["parameters"] == expected_parameters(run)
    assert data["vocabulary"]["src"] == data["vocabulary"]["tgt"] == 300
    assert data["training"]["updates"] == 20 and data["training"]["resumable"] is False
    assert data["run"]["scores_status"] == "current"
    scores = json.loads((run.run_dir / "eval" / "scores.json").read_text())
    bleu = scores["results"][0]["scores"]["BLEU"]
    found = [s for s in data["run"]["scores"] if s["metric"] == "BLEU"]
    assert [(s["score"], s["signature"]) for s in found] == [(bleu["score"], bleu["signature"])]
    assert data["run"]["best_bleu"]["step"] in (10, 20)


def test_errors_are_one_line(run, mtkit_cli, expect_error):
    (run.root / "notes.txt").write_text("not a model\n")
    expect_error(mtkit_cli(["info", "notes.txt"], cwd=run.root), "notes.txt", "not an mtkit")
    expect_error(mtkit_cli(["info", "runs/missing"], cwd=run.root), "runs/missing", "not found")


def test_a_model_pt_replaced_by_hand_is_not_described_by_the_old_choice(
        tiny_run, tmp_path, mtkit_cli):
    """`mtkit average ... -o RUN_DIR/model.pt` replaces the file model.stamp.json describes:
    info must not go on saying how the pipeline chose (and scored on dev) the old one."""
    run = tiny_run.copy_to(tmp_path)
    first_step = sorted(run.run_dir.glob("checkpoints/checkpoint_[0-9]*.pt"))[0]
    replaced = mtkit_cli(["average", str(first_step), "-o", "runs/tiny/model.pt"],
                         cwd=run.root)
    assert replaced.returncode == 0, replaced.stderr
    result = mtkit_cli(["info", "runs/tiny"], cwd=run.root)
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout)["model.pt is"].startswith("replaced since the average stage")
    data = json.loads(mtkit_cli(["info", "runs/tiny", "--json"], cwd=run.root).stdout)
    assert (data["run"]["choice_status"], data["run"]["chosen"], data["run"]["dev_bleu"]) == (
        "stale", None, {})
    assert data["run"]["scores_status"] == "stale"


def test_the_pipeline_s_own_model_pt_keeps_its_choice(run, mtkit_cli):
    data = json.loads(mtkit_cli(["info", "runs/tiny", "--json"], cwd=run.root).stdout)
    stamp = json.loads((run.run_dir / "model.stamp.json").read_text())
    assert data["run"]["choice_status"] == "current"
    assert data["run"]["chosen"] == stamp["chosen"]
