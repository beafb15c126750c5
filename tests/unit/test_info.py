"""mtkit.info: what a bundle holds, read from small bundles and run directories made here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from builders import raw_recipe, tiny_model

from mtkit.config import recipe_from_dict
from mtkit.errors import CheckpointError, ConfigError
from mtkit.files.textio import file_fingerprint
from mtkit.model.checkpoint import (
    FORMAT_VERSION,
    Bundle,
    Progress,
    Trained,
    TrainState,
    average_checkpoints,
    save_checkpoint,
)
from mtkit.model.transformer import Transformer
from mtkit.report.info import model_info
from mtkit.train.run import RunPaths
from mtkit.version import __version__

D_MODEL, VOCAB = 64, 300  # tiny_model's width; conftest's spm_model vocabulary


def make_bundle(spm: bytes, tie: str = "all", joint: bool = True, seed: int = 0,
                **fields) -> Bundle:
    recipe = recipe_from_dict(raw_recipe("/data/train.es", "/data/train.en",
                                         model=tiny_model(tie_embeddings=tie),
                                         tokenizer={"joint": joint}))
    torch.manual_seed(seed)
    model = Transformer(recipe.model, VOCAB, VOCAB)
    return Bundle(model.state_dict(), recipe, spm, None if joint else spm,
                  {"tokenizer": "ab" * 32}, **fields)


@pytest.fixture(scope="module")
def spm(spm_model: Path) -> bytes:
    return spm_model.read_bytes()


def rows(info) -> dict[str, str]:
    """The text output's `key: value` lines as a mapping (first of a repeated key)."""
    found = (re.match(r"  (\S.*?):\s+(.*)$", line) for line in info.lines())
    pairs = [m.groups() for m in found if m]
    return {key: value for key, value in reversed(pairs)}


def saved(path: Path, bundle: Bundle) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, bundle)
    return path


def test_tied_embeddings_are_counted_once(tmp_path, spm):
    untied = model_info(saved(tmp_path / "none.pt", make_bundle(spm, "none", joint=False)))
    decoder = model_info(saved(tmp_path / "dec.pt", make_bundle(spm, "decoder", joint=False)))
    tied = model_info(saved(tmp_path / "all.pt", make_bundle(spm, "all")))
    table = VOCAB * D_MODEL  # source embedding, target embedding, output projection
    assert untied.parameters - decoder.parameters == table
    assert untied.parameters - tied.parameters == 2 * table
    # an average stores each tied key as its own tensor: the count must not change
    paths = [saved(tmp_path / f"c{i}.pt", make_bundle(spm, seed=i)) for i in range(2)]
    averaged = saved(tmp_path / "avg.pt", average_checkpoints(paths))
    info = model_info(averaged)
    assert info.parameters == tied.parameters
    assert info.averaged_from == [str(p) for p in paths]
    assert info.to_dict()["lineage"]["averaged_from"] == [str(p) for p in paths]
    assert [line.split(":", 1)[1].strip() for line in info.lines()
            if line.startswith("  averaged from:")] == [str(p) for p in paths]


def test_file_vocabulary_and_architecture(tmp_path, spm):
    path = saved(tmp_path / "m.pt", make_bundle(spm, "none", joint=False))
    info = model_info(path)
    assert (info.size, info.mtkit_version, info.format_version) == (
        path.stat().st_size, __version__, FORMAT_VERSION)
    assert info.vocab == (VOCAB, VOCAB) and not info.joint and info.model_type == "unigram"
    assert info.architecture["d_model"] == D_MODEL
    assert info.architecture["tie_embeddings"] == "none"
    assert info.langs == ("src", "tgt") and info.run is None
    data = json.loads(json.dumps(info.to_dict()))  # plain JSON values only
    assert data["vocabulary"] == {"src": VOCAB, "tgt": VOCAB, "joint": False,
                                  "model_type": "unigram", "tags": []}
    assert data["file"]["bytes"] == path.stat().st_size
    assert rows(info)["vocabulary"] == "300 source, 300 target (separate unigram)"
    assert rows(info)["layers"] == "2 encoder, 2 decoder"


def test_training_not_recorded_in_older_bundles(tmp_path, spm):
    info = model_info(saved(tmp_path / "old.pt", make_bundle(spm)))
    assert info.trained is None and not info.resumable
    training = info.to_dict()["training"]
    assert training["updates"] is None and training["tgt_tokens_per_s"] is None
    assert training["data_fingerprints"] == {"tokenizer": "ab" * 32}
    assert rows(info)["updates"] == "not recorded" and "epoch" not in rows(info)


def test_training_recorded(tmp_path, spm):
    state = TrainState({}, Progress(step=7), {})
    bundle = make_bundle(spm, trained=Trained(1200, 3, 3725.0, 745_000), train_state=state)
    info = model_info(saved(tmp_path / "m.pt", bundle))
    assert info.resumable and info.trained.updates == 1200
    assert info.to_dict()["training"]["tgt_tokens_per_s"] == 200.0
    shown = rows(info)
    assert (shown["updates"], shown["training time"], shown["target tokens/s"]) == (
        "1,200", "1h 02m 05s", "200")
    assert shown["resumable"].startswith("yes")


def write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def fake_run(root: Path, spm: bytes, fingerprint: str | None = None) -> RunPaths:
    """A run directory as the pipeline leaves it; scores.json of `fingerprint` (default:
    of model.pt as written)."""
    paths = RunPaths(root / "run")
    saved(paths.model, make_bundle(spm, trained=Trained(20, 1, 2.0, 400)))
    saved(paths.last, make_bundle(spm, seed=1, trained=Trained(20, 1, 2.0, 400)))
    paths.recipe_name.write_text("tiny\n")
    write_json(paths.model_stamp, {"sources": [], "chosen": "average",
                                   "dev_bleu": {"average": 12.5, "checkpoint_best.pt": 11.0}})
    bleu = {"score": 10.25, "signature": "nrefs:1|case:mixed|tok:13a"}
    write_json(paths.eval / "scores.json", {
        "stamp": {"model": fingerprint or file_fingerprint(paths.model)},
        "decode": {"beam": 5, "lenpen": 1.0, "stop": "early"},
        "results": [{"src": "/data/test.es", "scores": {"BLEU": bleu}}]})
    records = [{"event": "train", "step": 5}, {"event": "valid", "step": 10, "bleu": 9.0},
               {"event": "valid", "step": 20, "bleu": 8.0}]
    paths.metrics.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"cut')
    return paths


def test_run_directory_scores_and_choice(tmp_path, spm):
    paths = fake_run(tmp_path, spm)
    for given in (paths.run_dir, paths.model):  # RUN_DIR, or its model.pt: same report
        run = model_info(given).run
        assert run is not None and run.model_file == "model.pt" and run.chosen == "average"
        assert run.scores_status == "current"
        assert [(s.metric, s.score, s.signature) for s in run.scores] == [
            ("BLEU", 10.25, "nrefs:1|case:mixed|tok:13a")]
        assert (run.validations, run.last_bleu, run.best_bleu) == (2, (20, 8.0), (10, 9.0))
    shown = rows(model_info(paths.run_dir))
    assert shown["model.pt is"] == "average (dev BLEU: average 12.50, checkpoint_best.pt 11.00)"
    assert shown["test.es BLEU"] == "10.25  nrefs:1|case:mixed|tok:13a"
    assert shown["best dev BLEU"] == "9.00 at step 10"
    data = model_info(paths.run_dir).to_dict()["run"]
    assert data["best_bleu"] == {"step": 10, "bleu": 9.0}
    assert data["scores"][0]["score"] == 10.25


def test_test_sets_sharing_a_file_name_are_told_apart_as_eval_names_them(tmp_path, spm):
    """wmt19/test.es and wmt20/test.es: eval/ and the training log call them test.es.0 and
    test.es.1; info named both `test.es`, two rows of one name."""
    paths = fake_run(tmp_path, spm)
    report = json.loads((paths.eval / "scores.json").read_text())
    scores = [{"BLEU": {"score": value, "signature": "nrefs:1"}} for value in (10.25, 20.5)]
    report["results"] = [{"src": f"/data/{year}/test.es", "scores": s}
                         for year, s in zip(("wmt19", "wmt20"), scores)]
    write_json(paths.eval / "scores.json", report)
    shown = rows(model_info(paths.run_dir))
    assert (shown["test.es.0 BLEU"], shown["test.es.1 BLEU"]) == (
        "10.25  nrefs:1", "20.50  nrefs:1")
    assert "test.es BLEU" not in shown
    data = model_info(paths.run_dir).to_dict()["run"]["scores"]
    assert [(s["test"], s["name"]) for s in data] == [
        ("/data/wmt19/test.es", "test.es.0"), ("/data/wmt20/test.es", "test.es.1")]


def test_stale_scores_are_not_shown(tmp_path, spm):
    paths = fake_run(tmp_path, spm, fingerprint="0" * 40)  # of an earlier model.pt
    info = model_info(paths.run_dir)
    assert info.run.scores_status == "stale" and info.run.scores == []
    assert "10.25" not in "\n".join(info.lines())
    assert rows(info)["test scores"].startswith("stale")
    (paths.eval / "scores.json").unlink()
    assert model_info(paths.model).run.scores_status == "absent"


DAMAGED = {
    # file of the run -> contents that are JSON but not what mtkit wrote
    "eval/scores.json": ['[1, 2]', '{"stamp": "x"}', '{"stamp": {"model": "FP"}, "results": [{}]}',
                         '{"stamp": {"model": "FP"}, "results": [{"src": "t.es", "scores": '
                         '{"BLEU": {"score": "high", "signature": 1}}}]}'],
    "model.stamp.json": ['"average"', '{"chosen": 5, "dev_bleu": [1]}',
                         '{"chosen": "average", "dev_bleu": {"average": "x"}}'],
    "metrics.jsonl": ['{"event": "valid", "bleu": 1}', '{"event": "valid", "step": 3, "bleu": "x"}',
                      '{"event": "valid", "step": "3", "bleu": 1}'],
}


@pytest.mark.parametrize("name, text", [(n, t) for n, texts in DAMAGED.items() for t in texts])
def test_a_damaged_run_file_is_reported_not_a_crash(tmp_path, spm, name, text):
    """A run's side files hand-edited or damaged into other JSON: `mtkit info` still
    reports the model, leaving out (or calling damaged) what it cannot read."""
    paths = fake_run(tmp_path, spm)
    text = text.replace("FP", file_fingerprint(paths.model))
    path = paths.run_dir / name
    if name == "metrics.jsonl":
        path.write_text(path.read_text(encoding="utf-8") + "\n" + text + "\n", encoding="utf-8")
    else:
        path.write_text(text, encoding="utf-8")
    info = model_info(paths.run_dir)
    shown = rows(info)
    json.dumps(info.to_dict())  # the --json report too
    if name == "eval/scores.json":
        assert info.run.scores_status == "damaged" and info.run.scores == []
        assert shown["test scores"] == "damaged (eval/scores.json unreadable)"
    if name == "model.stamp.json":
        assert "model.pt is" not in shown or "x" not in shown["model.pt is"]
    if name == "metrics.jsonl":
        assert (info.run.last_bleu, info.run.best_bleu) == ((20, 8.0), (10, 9.0))


def test_unfinished_run_falls_back_to_checkpoint_last(tmp_path, spm):
    paths = fake_run(tmp_path, spm)
    paths.model.unlink()
    info = model_info(paths.run_dir)
    assert info.path == paths.last and info.resumable is False
    assert info.run.model_file == "checkpoints/checkpoint_last.pt"
    assert info.run.chosen is None and info.run.scores_status == "stale"
    assert "no model.pt yet" in "\n".join(info.lines())


def test_only_a_runs_model_pt_gets_the_run_section(tmp_path, spm):
    paths = fake_run(tmp_path, spm)
    assert model_info(paths.last).run is None  # a checkpoint given by name: just the file


def test_errors(tmp_path, spm):
    with pytest.raises(CheckpointError, match="missing: not found"):
        model_info(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not an mtkit run directory"):
        model_info(tmp_path / "empty")
    paths = RunPaths(tmp_path / "started")
    paths.checkpoints.mkdir(parents=True)
    paths.recipe_name.write_text("tiny\n")
    with pytest.raises(ConfigError, match="no model yet"):
        model_info(paths.run_dir)
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match="not a PyTorch zip file"):
        model_info(text)
    foreign = tmp_path / "foreign.pt"
    torch.save({"w": torch.ones(1)}, foreign)
    with pytest.raises(CheckpointError, match="no mtkit format marker"):
        model_info(foreign)
    newer = make_bundle(spm).to_dict()
    newer["format_version"] = FORMAT_VERSION + 1
    torch.save(newer, tmp_path / "newer.pt")
    with pytest.raises(CheckpointError, match="newer mtkit"):
        model_info(tmp_path / "newer.pt")


def test_decode_settings_are_shown(tmp_path, spm):
    info = model_info(saved(tmp_path / "m.pt", make_bundle(spm)))
    decode = info.to_dict()["decode"]
    assert set(decode) == {"beam", "lenpen", "stop", "nbest", "max_len_a", "max_len_b"}
    assert rows(info)["beam"] == str(decode["beam"])
    assert rows(info)["stop"] == decode["stop"]
