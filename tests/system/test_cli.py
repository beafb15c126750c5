"""The `mtkit` command as a user meets it: the pipeline end to end, the subcommands, and
the error contract (exit code 2, one `mtkit: error:` line naming the file or key).

Everything runs the installed `mtkit` script in a subprocess, except the table of error
rows, which calls the same entry point (mtkit.cli:main) in-process to stay fast (a process
spends ~2 s importing torch on the shared test machine); one row is repeated in a real
subprocess to pin the process-level behaviour. `mtkit score`: test_score.py.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from builders import (
    DATA,
    RECIPES,
    bible_recipe,
    metrics_records,
    saved_step,
    tensorboard_steps,
    weights,
)
from conftest import CliResult

import mtkit
from mtkit.config import load_recipe, recipe_from_dict
from mtkit.data.tokenizer import PAD_ID, Tokenizer
from mtkit.model.checkpoint import average_checkpoints
from mtkit.model.transformer import Transformer
from mtkit.train.run import RunPaths

STAGES = ("tokenizer", "binarize", "train", "average", "eval")


def mtimes(directory: Path) -> dict[str, int]:
    """Every output file's mtime; not .lock's, which each job writes its pid and host in."""
    return {
        str(p.relative_to(directory)): p.stat().st_mtime_ns
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def line_count(path: Path) -> int:
    return len(path.read_bytes().decode("utf-8").split("\n")) - 1


# --------------------------------------------------------------------------- 1. the pipeline


def test_train_writes_every_artefact(tiny_run):
    run = tiny_run.run_dir
    assert tiny_run.first.stdout == "", "logs belong on stderr; stdout is for data"

    assert (run / "tokenizer" / "spm.model").stat().st_size > 0

    manifest = json.loads((run / "data" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["lines"] == line_count(DATA / "train.es")
    assert manifest["splits"]["valid"]["lines"] == line_count(DATA / "dev.es")
    for split in ("train", "valid"):
        for side in ("src", "tgt"):
            assert (run / "data" / f"{split}.{side}.bin").stat().st_size > 0
            assert (run / "data" / f"{split}.{side}.idx").stat().st_size > 0

    checkpoints = run / "checkpoints"
    for name in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_10.pt",
                 "checkpoint_20.pt"):
        assert (checkpoints / name).stat().st_size > 0, name
    assert (run / "model.pt").stat().st_size > 0

    hyps = list((run / "eval").glob("*.hyp.en"))
    assert len(hyps) == 1
    assert line_count(hyps[0]) == line_count(DATA / "test.en")

    scores = json.loads((run / "eval" / "scores.json").read_text(encoding="utf-8"))
    [result] = scores["results"]
    assert result["lines"] == line_count(DATA / "test.en")
    assert set(result["scores"]) == {"BLEU", "chrF2"}
    for name, entry in result["scores"].items():
        assert isinstance(entry["score"], float), name
        assert "nrefs:1" in entry["signature"] and "version:" in entry["signature"], name
    assert "tok:13a" in result["scores"]["BLEU"]["signature"]

    records = metrics_records(run)
    assert {r["event"] for r in records} == {"train", "valid"}
    assert max(r["step"] for r in records) == 20

    assert "step 20" in (run / "train.log").read_text(encoding="utf-8")
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for event, tag in (("train", "train/loss"), ("valid", "valid/bleu")):
        assert tensorboard_steps(run, tag) == [r["step"] for r in records if r["event"] == event]


def test_train_ends_with_a_summary(tiny_run):
    """Where model.pt is and what it is, its scores, the curves, how to translate."""
    tail = tiny_run.first.stderr.split("stage wall times")[1]
    scores = json.loads((tiny_run.run_dir / "eval" / "scores.json").read_text())
    bleu = scores["results"][0]["scores"]["BLEU"]["score"]
    chosen = json.loads((tiny_run.run_dir / "model.stamp.json").read_text())["chosen"]
    what = "the average" if chosen == "average" else chosen
    assert f"[done] model: runs/tiny/model.pt ({what})" in tail
    assert f"[done] test.es: BLEU {bleu:.2f} | chrF2" in tail
    assert "[done] curves: runs/tiny/curves.png" in tail
    assert "[done] translate with: mtkit translate -m runs/tiny/model.pt < input.es" in tail


def test_train_reports_every_stage_on_stderr(tiny_run):
    stderr = tiny_run.first.stderr
    for stage in STAGES:
        assert f"[{stage}] running" in stderr, stage
    assert "[eval]" in stderr and "BLEU" in stderr


@pytest.fixture(scope="module")
def second_run(tiny_run, mtkit_cli):
    """The same `mtkit train tiny.yaml` again, with every file's mtime before and after."""
    before = mtimes(tiny_run.run_dir)
    result = mtkit_cli(["train", "tiny.yaml"], cwd=tiny_run.root)
    return result, before, mtimes(tiny_run.run_dir)


def test_second_run_skips_every_stage(second_run):
    result, _, _ = second_run
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    for stage in STAGES:
        assert f"[{stage}] skipped" in result.stderr, stage
    assert "running" not in result.stderr


def test_second_run_touches_no_output(second_run):
    _, before, after = second_run
    assert set(before) == set(after)
    changed = [name for name in before if before[name] != after[name]]
    assert changed == []


def test_second_run_does_not_rewrite_recipe_yaml(second_run):
    _, before, after = second_run
    assert before["recipe.yaml"] == after["recipe.yaml"]


def test_until_binarize_stops_after_binarize(tmp_path, mtkit_cli):
    bible_recipe(tmp_path)
    result = mtkit_cli(["train", "tiny.yaml", "--until", "binarize"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "runs" / "tiny"
    assert (run / "tokenizer" / "spm.model").is_file()
    assert (run / "data" / "manifest.json").is_file()
    assert not list(run.glob("checkpoints/*.pt"))
    assert not (run / "model.pt").exists() and not (run / "eval").exists()
    assert "[train]" not in result.stderr
    assert "stopping after stage binarize" in result.stderr


def test_dry_run_prints_the_resolved_recipe(tmp_path, mtkit_cli):
    path = bible_recipe(tmp_path)
    result = mtkit_cli(["train", "tiny.yaml", "--dry-run", "--set", "train.max_steps=30"],
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed == load_recipe(path, ["train.max_steps=30"]).to_dict()
    # independent of load_recipe: every key the recipe sets is there, with the override
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["train"]["max_steps"] = 30
    for section, values in raw.items():
        if section == "data":
            continue
        for key, value in values.items():
            assert printed[section][key] == value, f"{section}.{key}"
    # one corpus reads as a list of one, with the defaults filled in
    assert printed["data"]["train"] == [{**raw["data"]["train"], "weight": 1.0, "tag": None,
                                       "alignments": None}]
    assert printed["model"]["activation"] == "relu"  # defaults are filled in
    assert not (tmp_path / "runs").exists(), "--dry-run must not create the run directory"


def test_set_max_steps_resumes_the_finished_run(tiny_run, tmp_path, mtkit_cli):
    run = tiny_run.copy_to(tmp_path)
    result = mtkit_cli(["train", "tiny.yaml", "--set", "train.max_steps=30"], cwd=run.root)
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stderr and "at step 20" in result.stderr
    assert saved_step(run.run_dir / "checkpoints" / "checkpoint_last.pt") == 30
    assert (run.run_dir / "checkpoints" / "checkpoint_30.pt").is_file()
    steps = [r["step"] for r in metrics_records(run.run_dir)]
    assert steps == sorted(steps) and steps[-1] == 30


def test_decode_settings_are_chosen_on_dev(tiny_run, tmp_path, mtkit_cli):
    run = tiny_run.copy_to(tmp_path)
    result = mtkit_cli(["train", "tiny.yaml", "--set", "decode.tune_beam=[1, 3]",
                        "--set", "decode.tune_lenpen=[0.5, 1.5]"], cwd=run.root)
    assert result.returncode == 0, result.stderr
    assert "[average] skipped" in result.stderr and "[eval] running" in result.stderr
    scores = json.loads((run.run_dir / "eval" / "scores.json").read_text(encoding="utf-8"))
    grid = scores["dev_grid"]
    assert [(row["beam"], row["lenpen"]) for row in grid] == [(1, 0.5), (1, 1.5), (3, 0.5),
                                                               (3, 1.5)]
    best = max(grid, key=lambda row: row["dev_bleu"])
    assert scores["decode"] == {"beam": best["beam"], "lenpen": best["lenpen"], "stop": "early"}

    # the test set was decoded with the chosen setting
    [hyp] = (run.run_dir / "eval").glob("*.hyp.en")
    again = mtkit_cli(["translate", "-m", run.model, "--beam", str(best["beam"]),
                       "--lenpen", str(best["lenpen"]), "--max-len-a", "1.0", "--max-len-b",
                       "5", "--max-tokens", "1024", "--input", DATA / "test.es"], cwd=run.root)
    assert again.returncode == 0, again.stderr
    assert again.stdout == hyp.read_text(encoding="utf-8")


def test_test_sets_of_one_file_name_keep_their_own_translations(tiny_run, tmp_path,
                                                                mtkit_inprocess):
    """wmt19/test.es and wmt20/test.es: each gets its own file in eval/, named by its
    index in data.test (one name each would leave only the second's translations)."""
    run = tiny_run.copy_to(tmp_path)
    sources = (DATA / "test.es").read_text(encoding="utf-8").splitlines(keepends=True)
    refs = (DATA / "test.en").read_text(encoding="utf-8").splitlines(keepends=True)
    tests = []
    for year, lines in (("wmt19", slice(0, 10)), ("wmt20", slice(10, 17))):
        (run.root / year).mkdir()
        (run.root / year / "test.es").write_text("".join(sources[lines]), encoding="utf-8")
        (run.root / year / "test.en").write_text("".join(refs[lines]), encoding="utf-8")
        tests.append(f"{{src: {year}/test.es, tgt: {year}/test.en}}")
    done = mtkit_inprocess(["train", "tiny.yaml", "--set", f"data.test=[{', '.join(tests)}]"],
                           run.root)
    assert done.returncode == 0, done.stderr
    results = json.loads((run.run_dir / "eval" / "scores.json").read_text())["results"]
    assert [Path(r["hyp"]).name for r in results] == ["test.es.0.hyp.en", "test.es.1.hyp.en"]
    assert [line_count(run.root / r["hyp"]) for r in results] == [10, 7]
    assert "[done] test.es.0: BLEU" in done.stderr and "[done] test.es.1: BLEU" in done.stderr


def test_another_target_language_scores_the_test_sets_again(tiny_run, tmp_path,
                                                            mtkit_inprocess):
    """data.langs.tgt picks sacrebleu's BLEU tokenizer: scores of another one are stale."""
    run = tiny_run.copy_to(tmp_path)
    done = mtkit_inprocess(["train", "tiny.yaml", "--set", "data.langs.tgt=zh"], run.root)
    assert "[eval] running" in done.stderr, done.stderr
    [result] = json.loads((run.run_dir / "eval" / "scores.json").read_text())["results"]
    assert "tok:zh" in result["scores"]["BLEU"]["signature"]
    assert (run.run_dir / "eval" / "test.es.hyp.zh").is_file()


def test_pipeline_averages_the_best_k(tmp_path, mtkit_cli):
    bible_recipe(tmp_path, train={"average": "best-2", "best_metric": "loss",
                                  "valid_every": 5, "save_every": 5})
    done = mtkit_cli(["train", "tiny.yaml", "--until", "average"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "tiny"
    losses = {r["step"]: r["loss"] for r in metrics_records(run, "valid")}
    best_two = sorted(sorted(losses, key=losses.get)[:2])
    kept = RunPaths(run).top_checkpoints()
    assert [p.name for p in kept] == [f"best_{s}.pt" for s in best_two]
    stamp = json.loads((run / "model.stamp.json").read_text())
    assert [name for name, _ in stamp["sources"]] == [p.name for p in kept] + [
        "checkpoint_best.pt"]
    assert "average of best 2" in done.stderr

    done = mtkit_cli(["average", "--best", str(run), "-o", "avg.pt"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    averaged = weights(tmp_path / "avg.pt")
    reference = average_checkpoints(kept).weights
    assert all(torch.equal(averaged[k], reference[k]) for k in reference)


def test_the_weight_average_is_a_candidate_for_model_pt(tmp_path, mtkit_cli):
    bible_recipe(tmp_path, train={"ema": 0.9, "average": "last-2"})
    done = mtkit_cli(["train", "tiny.yaml", "--until", "average"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "choosing model.pt among average, ema, checkpoint_best.pt (the average of last 2)" \
        in done.stderr
    run = tmp_path / "runs" / "tiny"
    stamp = json.loads((run / "model.stamp.json").read_text())
    assert [name for name, _ in stamp["sources"]] == [
        "checkpoint_10.pt", "checkpoint_20.pt", "checkpoint_ema.pt", "checkpoint_best.pt"]
    scores = stamp["dev_bleu"]
    assert list(scores) == ["average", "ema", "checkpoint_best.pt"]
    assert stamp["chosen"] == max(scores, key=scores.get)
    if stamp["chosen"] == "ema":
        model, ema = weights(run / "model.pt"), weights(run / "checkpoints" / "checkpoint_ema.pt")
        assert all(torch.equal(model[k], ema[k]) for k in ema)


# --------------------------------------------------------------------------- 2. help, version


def test_help_lists_every_command(tmp_path, mtkit_cli):
    result = mtkit_cli(["--help"], cwd=tmp_path)
    assert result.returncode == 0
    for command in ("spm-train", "binarize", "train", "average", "translate", "score", "serve",
                    "export", "info", "plot", "import"):
        assert re.search(rf"^\s+{command}\s", result.stdout, re.M), command


def test_version(tmp_path, mtkit_cli):
    result = mtkit_cli(["--version"], cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"mtkit {mtkit.__version__}"


# --------------------------------------------------------------------------- 3. subcommands


def test_spm_train_then_binarize_from_flags(tmp_path, mtkit_cli):
    result = mtkit_cli(
        ["spm-train", "--input", DATA / "train.es", "--input", DATA / "train.en",
         "--model-prefix", "tok/P", "--vocab-size", "300"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert (tmp_path / "tok" / "P.model").stat().st_size > 0

    result = mtkit_cli(
        ["binarize", "--tokenizer", "tok/P.model", "--src", DATA / "train.es",
         "--tgt", DATA / "train.en", "--out", "bin"],  # the old spelling of -o: still read
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "bin" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["lines"] == line_count(DATA / "train.es")
    assert (tmp_path / "bin" / "train.src.bin").is_file()


def test_spm_train_and_binarize_of_a_recipe_are_the_pipeline_stages(tmp_path, mtkit_inprocess):
    """Run on their own, the first two stages leave what mtkit train then skips."""
    bible_recipe(tmp_path)
    for command in ("spm-train", "binarize"):
        done = mtkit_inprocess([command, "tiny.yaml"], tmp_path)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs/tiny/data/manifest.json").is_file()
    done = mtkit_inprocess(["train", "tiny.yaml", "--until", "binarize"], tmp_path)
    assert "[tokenizer] skipped" in done.stderr and "[binarize] skipped" in done.stderr


def test_spm_train_of_a_recipe_leaves_a_run_it_does_not_fit_alone(tiny_run, tmp_path,
                                                                 mtkit_inprocess, expect_error):
    """Another vocabulary in a run with checkpoints is refused, as mtkit train refuses it:
    the tokenizer those checkpoints were trained with stays."""
    run = tiny_run.copy_to(tmp_path)
    before = mtimes(run.run_dir)
    done = mtkit_inprocess(["spm-train", "tiny.yaml", "--set", "tokenizer.vocab_size=200"],
                           run.root)
    expect_error(done, "runs/tiny", "the tokenizer changed", "tokenizer.vocab_size")
    assert mtimes(run.run_dir) == before


# --------------------------------------------------------------------------- 4. error rows


def write_recipe(directory: Path, name: str = "tiny.yaml", **changes) -> Path:
    """tiny.yaml with `section__key=value` changes (`section=...` replaces a section)."""
    raw = yaml.safe_load(bible_recipe(directory).read_text(encoding="utf-8"))
    for dotted, value in changes.items():
        node = raw
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    path = directory / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def setup_duplicate_section(d, run):
    with open(write_recipe(d), "a", encoding="utf-8") as recipe:
        recipe.write("model: {d_model: 32}\n")  # YAML alone would keep this one, unseen
    return ["train", "tiny.yaml", "--dry-run"]


def with_train_files(directory: Path, src: Path, tgt: Path) -> None:
    write_recipe(directory, data__train={"src": str(src), "tgt": str(tgt)})


def setup_yaml_syntax(d, run):
    (d / "tiny.yaml").write_text("data:\n  train:\n    src: a.es\n   tgt: a.en\n")
    return ["train", "tiny.yaml"]


def setup_parallel_mismatch(d, run):
    (d / "short.en").write_text("".join(f"line {i}\n" for i in range(100)))
    with_train_files(d, DATA / "train.es", d / "short.en")
    return ["train", "tiny.yaml"]


def setup_empty_corpus(d, run):
    (d / "empty.es").write_bytes(b"")
    (d / "empty.en").write_bytes(b"")
    with_train_files(d, d / "empty.es", d / "empty.en")
    return ["train", "tiny.yaml"]


def setup_blank_corpus(d, run):
    (d / "blank.es").write_bytes(b"\n\n\n")
    (d / "blank.en").write_bytes(b"\n\n\n")
    with_train_files(d, d / "blank.es", d / "blank.en")
    return ["train", "tiny.yaml"]


def setup_invalid_utf8(d, run):
    (d / "bad.es").write_bytes((DATA / "train.es").read_bytes() + b"hola \xff mundo\n")
    (d / "bad.en").write_bytes((DATA / "train.en").read_bytes() + b"hello world\n")
    with_train_files(d, d / "bad.es", d / "bad.en")
    return ["train", "tiny.yaml"]


def with_test_set(d, src: Path, tgt_bytes: bytes) -> list[str]:
    """tiny.yaml with a test set of `src` and a target of `tgt_bytes`: checked under
    --dry-run, before any stage runs."""
    (d / "ref.en").write_bytes(tgt_bytes)
    write_recipe(d, data__test=[{"src": str(src), "tgt": str(d / "ref.en")}])
    return ["train", "tiny.yaml", "--dry-run"]


def setup_test_set_mismatch(d, run):
    lines = (DATA / "test.en").read_bytes().splitlines(keepends=True)
    return with_test_set(d, DATA / "test.es", b"".join(lines[:-1]))


def setup_empty_test_set(d, run):
    (d / "empty.es").write_bytes(b"")
    return with_test_set(d, d / "empty.es", b"")


def setup_test_set_invalid_utf8(d, run):
    return with_test_set(d, DATA / "test.es", (DATA / "test.en").read_bytes()[:-1] + b"\xff\n")


def setup_truncated_model(d, run):
    (d / "trunc.pt").write_bytes(run.model.read_bytes()[:1000])
    return ["translate", "-m", "trunc.pt"]


def setup_foreign_model(d, run):
    torch.save({"weights": torch.zeros(3)}, d / "foreign.pt")
    return ["translate", "-m", "foreign.pt"]


def setup_text_model(d, run):
    (d / "text.pt").write_text("this is not a model\n")
    return ["translate", "-m", "text.pt"]


def setup_future_model(d, run):
    bundle = torch.load(run.model, weights_only=True)
    bundle["format_version"] += 1
    torch.save(bundle, d / "future.pt")  # a raw dict: what a newer mtkit would write
    return ["translate", "-m", "future.pt"]


def setup_score_mismatch(d, run):
    (d / "hyp.en").write_text("one\ntwo\n")
    (d / "ref.en").write_text("one\ntwo\nthree\n")
    return ["score", "--ref", "ref.en", "-i", "hyp.en"]


def setup_average_incompatible(d, run):
    """model.pt of the tiny run and a d_model=32 model of the same recipe and vocabulary."""
    bundle = torch.load(run.model, weights_only=True)
    bundle["recipe"]["model"]["d_model"] = 32
    cfg = recipe_from_dict(bundle["recipe"]).model
    tok = Tokenizer.from_bytes(bundle["spm_src"], bundle["spm_tgt"])
    bundle["model"] = Transformer(cfg, tok.src_vocab_size, tok.tgt_vocab_size, PAD_ID).state_dict()
    torch.save(bundle, d / "narrow.pt")
    return ["average", run.model, "narrow.pt", "-o", "avg.pt"]


def setup_fake_export(d, run):
    (d / "ex").mkdir()
    (d / "ex" / "mtkit.json").write_text("{}")  # what marks an export directory
    return ["translate", "-m", "ex", "--engine", "torch"]


ROWS = {
    # name: (setup(dir, tiny_run) -> argv, needles the one error line must contain)
    "missing recipe": (lambda d, run: ["train", "nope.yaml"], ["nope.yaml", "not found"]),
    "yaml syntax error": (setup_yaml_syntax, ["tiny.yaml:4:4", "YAML"]),
    "duplicate section": (setup_duplicate_section, ["tiny.yaml:", "duplicate key 'model'",
                                                    "give each key once"]),
    "unknown key": (
        lambda d, run: ["train", write_recipe(d, tokenizer={"vocab_sise": 300}).name],
        ["tiny.yaml", "tokenizer.vocab_sise", "did you mean 'vocab_size'"],
    ),
    "wrong type": (
        lambda d, run: ["train", write_recipe(d, train__max_steps="lots").name],
        ["tiny.yaml", "train.max_steps", "integer", "lots"],
    ),
    "out of range": (
        lambda d, run: ["train", write_recipe(d, model__dropout=1.5).name],
        ["tiny.yaml", "model.dropout", "1.5", "range"],
    ),
    "d_model not divisible by heads": (
        lambda d, run: ["train", write_recipe(d, model__heads=3).name],
        ["tiny.yaml", "model.d_model", "model.heads"],
    ),
    "missing data file": (
        lambda d, run: ["train", write_recipe(d, data__valid__src=str(d / "nope.es")).name],
        ["tiny.yaml", "data.valid.src", "nope.es"],
    ),
    "parallel files differ in length": (
        setup_parallel_mismatch, ["train.es", "short.en", "300", "100"]
    ),
    "empty training corpus": (setup_empty_corpus, ["empty.es", "no non-empty lines"]),
    "corpus of empty lines": (setup_blank_corpus, ["blank.es", "no non-empty lines"]),
    "invalid UTF-8 in training data": (setup_invalid_utf8, ["bad.es:301", "UTF-8"]),
    "test set files differ in length": (
        setup_test_set_mismatch, ["tiny.yaml", "data.test[0]", "test.es has 60 lines",
                                  "ref.en has 59"]
    ),
    "empty test set": (setup_empty_test_set, ["data.test[0]", "empty.es", "ref.en", "empty"]),
    "invalid UTF-8 in a test set": (setup_test_set_invalid_utf8, ["ref.en:60", "UTF-8"]),
    "vocab size too large": (
        lambda d, run: ["train", write_recipe(d, tokenizer__vocab_size=50000).name],
        ["tokenizer.vocab_size", "50000"],
    ),
    "--set unknown key": (
        lambda d, run: ["train", bible_recipe(d).name, "--set", "train.max_stepz=5"],
        ["train.max_stepz", "did you mean 'max_steps'"],
    ),
    "--set unparsable value": (
        lambda d, run: ["train", bible_recipe(d).name, "--set", "train.lr=[0.1"],
        ["train.lr", "[0.1"],
    ),
    "--set value of the wrong type": (
        lambda d, run: ["train", bible_recipe(d).name, "--set", "train.lr=fast"],
        ["train.lr", "fast"],
    ),
    "translate: missing model": (
        lambda d, run: ["translate", "-m", "nope.pt"], ["nope.pt", "not found"]
    ),
    "translate: missing --input file": (
        lambda d, run: ["translate", "-m", run.model, "--input", "nope.es"], ["nope.es"]
    ),
    "translate: truncated model": (setup_truncated_model, ["trunc.pt"]),
    "translate: foreign torch file": (setup_foreign_model, ["foreign.pt", "not an mtkit"]),
    "translate: text file as model": (setup_text_model, ["text.pt"]),
    "translate: model from a newer mtkit": (setup_future_model, ["future.pt", "upgrade"]),
    "score: line counts differ": (setup_score_mismatch, ["2 lines", "ref.en", "has 3"]),
    "average: incompatible checkpoints": (
        setup_average_incompatible, ["narrow.pt", "architecture"]
    ),
    "average: a directory among the checkpoints": (
        lambda d, run: (d / "adir").mkdir() or ["average", run.model, "adir", "-o", "avg.pt"],
        ["adir: is a directory, expected a model file"],
    ),
    "translate: an export with --engine torch": (
        setup_fake_export, ["ex: is a CTranslate2 export directory", "--engine auto"]
    ),
    "translate: a FIFO as model": (
        lambda d, run: os.mkfifo(d / "fifo") or ["translate", "-m", "fifo"],
        ["fifo: is not a regular file"],
    ),
    "attention: --beam 0": (
        lambda d, run: ["attention", "-m", run.model, "-o", "a.png", "--beam", "0"],
        ["--beam 0: 0 is out of range"],
    ),
    "export: --quantize int4": (
        lambda d, run: ["export", "-m", run.model, "-o", "ex", "--quantize", "int4"],
        ["--quantize int4: expected one of"],
    ),
    "plot: a model file as run directory": (
        lambda d, run: ["plot", run.model, "-o", "p.png"], ["model.pt: is a file", "run directory"]
    ),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_error_row(row, tiny_run, tmp_path, mtkit_inprocess, expect_error):
    setup, needles = ROWS[row]
    argv = setup(tmp_path, tiny_run)
    expect_error(mtkit_inprocess(argv, tmp_path), *needles)
    if row.startswith("average"):
        assert not (tmp_path / "avg.pt").exists()


def test_error_row_in_a_real_process(tiny_run, tmp_path, mtkit_cli, expect_error):
    """The same contract from the installed script in its own process."""
    (tmp_path / "trunc.pt").write_bytes(tiny_run.model.read_bytes()[:1000])
    result = mtkit_cli(["translate", "-m", "trunc.pt"], cwd=tmp_path, input="hola\n")
    expect_error(result, "trunc.pt")


def test_translate_input_directory(tiny_run, tmp_path, mtkit_inprocess, expect_error):
    (tmp_path / "indir").mkdir()
    result = mtkit_inprocess(["translate", "-m", tiny_run.model, "--input", "indir"], tmp_path)
    expect_error(result, "indir")


def test_dry_run_validates_the_data_files(tmp_path, mtkit_inprocess, expect_error):
    """--dry-run checks the recipe as a run would, data files included."""
    shutil.copy(RECIPES / "transformer-base.yaml", tmp_path)
    sets = ["--set", "data.train.src=corpus/train.de", "--set", "data.train.tgt=corpus/train.en"]
    missing = mtkit_inprocess(["train", "transformer-base.yaml", "--dry-run", *sets], tmp_path)
    expect_error(missing, "data.train.src", "not found")
    (tmp_path / "corpus").mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            (tmp_path / "corpus" / f"{split}.{lang}").write_text("hallo\n")
    result = mtkit_inprocess(["train", "transformer-base.yaml", "--dry-run", *sets], tmp_path)
    assert result.returncode == 0, result.stderr
    src = yaml.safe_load(result.stdout)["data"]["train"][0]["src"]
    assert src == str(tmp_path / "corpus" / "train.de")  # --set paths: relative to the cwd


def test_whitespace_only_corpus_gets_a_plain_message(tmp_path, mtkit_inprocess, expect_error):
    (tmp_path / "blank.es").write_bytes(b"  \n\t\n \n")
    (tmp_path / "blank.en").write_bytes(b" \n \n\n")
    with_train_files(tmp_path, tmp_path / "blank.es", tmp_path / "blank.en")
    message = expect_error(mtkit_inprocess(["train", "tiny.yaml"], tmp_path), "blank.es")
    assert "INTERNAL" not in message and ".cc(" not in message, message


def test_score_empty_hypothesis_file_is_named(tmp_path, mtkit_inprocess, expect_error):
    (tmp_path / "hyp.en").write_bytes(b"")
    (tmp_path / "ref.en").write_text("one\n")
    expect_error(mtkit_inprocess(["score", "--ref", "ref.en", "-i", "hyp.en"], tmp_path),
                 "hyp.en")


def test_score_empty_hypothesis_file(tmp_path, mtkit_inprocess, expect_error):
    (tmp_path / "hyp.en").write_bytes(b"")
    (tmp_path / "ref.en").write_text("one\n")
    result = mtkit_inprocess(["score", "--ref", "ref.en", "-i", "hyp.en"], tmp_path)
    expect_error(result, "hypotheses", "no lines")


STREAM_ROWS = {
    # (command, shell redirection): needles of the one error line
    ("translate", "<&-"): ["standard input is closed"],
    ("score", "<&-"): ["standard input is closed"],
    ("translate", ">&-"): ["standard output is closed"],
    ("score-pairs", ">&-"): ["standard output is closed"],
    ("info", ">&-"): ["standard output is closed"],
    ("translate", "> full"): ["standard output: No space left on device"],
    ("score-pairs", "> full"): ["standard output: No space left on device"],
    ("info", "> full"): ["standard output: No space left on device"],
    ("score", "> full"): ["standard output: No space left on device"],
}


@pytest.mark.parametrize("row", list(STREAM_ROWS), ids=" ".join)
def test_a_closed_or_full_standard_stream_is_one_line(row, tiny_run, tmp_path, mtkit_script,
                                                     expect_error):
    """stdin or stdout closed by the shell, or stdout on a full disk (a copy of /dev/full):
    one line and exit 2 from every command, however it reads or writes them."""
    command, redirect = row
    if redirect == "> full":
        try:
            os.mknod(tmp_path / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except PermissionError:
            pytest.skip("making a device node needs root")
    (tmp_path / "a.es").write_text("hola\n")
    (tmp_path / "a.en").write_text("hello\n")
    argv = {"translate": ["translate", "-m", tiny_run.model, "--beam", "1"],
            "score": ["score", "--ref", "a.en"] + ([] if redirect == "<&-" else ["-i", "a.en"]),
            "score-pairs": ["score-pairs", "-m", tiny_run.model, "--src", "a.es", "--tgt", "a.en"],
            "info": ["info", tiny_run.model]}[command]
    exe, env = mtkit_script
    feed = "" if redirect == "<&-" else "echo hola | "
    done = subprocess.run(["bash", "-c", f"{feed}{shlex.join(map(str, [exe, *argv]))} {redirect}"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=300)
    result = CliResult(done.returncode, done.stdout.decode(), done.stderr.decode())
    expect_error(result, *STREAM_ROWS[row])


def test_a_full_disk_under_a_checkpoint_is_one_line(tiny_run, tmp_path, mtkit_script,
                                                   expect_error):
    """A checkpoint that does not fit on the disk (a file-size limit stands for a full
    disk: a write past it fails with EFBIG, as one past a full disk fails with ENOSPC):
    torch.save reports the failed write as a RuntimeError of its zip writer, which must
    still be the one-line output error, with the previous file intact and no temporary
    file left."""
    (tmp_path / "avg.pt").write_bytes(b"the previous average")
    limit = 64 * 1024  # bytes; the tiny model is several times larger

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    exe, env = mtkit_script
    done = subprocess.run([str(exe), "average", str(tiny_run.model), str(tiny_run.model),
                           "-o", "avg.pt"], cwd=tmp_path, env=env, capture_output=True,
                          timeout=300, preexec_fn=small_disk)
    result = CliResult(done.returncode, done.stdout.decode(), done.stderr.decode())
    expect_error(result, "avg.pt: cannot write", "File too large", "intact")
    assert (tmp_path / "avg.pt").read_bytes() == b"the previous average"
    assert [p.name for p in tmp_path.iterdir()] == ["avg.pt"]


def test_metrics_on_a_full_disk_are_named(tiny_run, tmp_path, mtkit_inprocess, expect_error):
    """metrics.jsonl on a full disk (a link to /dev/full): the error names the file, as
    every output error does (an append's OSError has no file name of its own)."""
    run = tiny_run.copy_to(tmp_path)
    metrics = run.run_dir / "metrics.jsonl"
    metrics.unlink()
    metrics.symlink_to("/dev/full")
    result = mtkit_inprocess(["train", "tiny.yaml", "--set", "train.max_steps=30"], run.root)
    expect_error(result, "runs/tiny/metrics.jsonl: cannot write (No space left on device)")


def test_train_log_on_a_full_disk_is_one_warning(tiny_run, tmp_path, mtkit_inprocess):
    """train.log (a copy of the log lines) on a full disk: said once, and the run goes on
    with its log on stderr, instead of a traceback per line and an error at the end."""
    run = tiny_run.copy_to(tmp_path)
    train_log = run.run_dir / "train.log"
    train_log.unlink()
    train_log.symlink_to("/dev/full")
    result = mtkit_inprocess(["train", "tiny.yaml", "--set", "train.max_steps=30"], run.root)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "train.log" in line]
    assert len(said) == 1 and "cannot write (No space left on device)" in said[0], said
    assert saved_step(run.run_dir / "checkpoints" / "checkpoint_last.pt") == 30


def setup_run_dir_file(d, run):
    (d / "afile").write_text("not a directory\n")
    return ["train", bible_recipe(d).name, "--run-dir", "afile"]


USAGE_ROWS = {
    # argv: needles of the one error line (a usage mistake: click's message, one line)
    ("translate", "--bem", "3"): ["translate:", "--bem", "--beam", "mtkit translate --help"],
    ("translate",): ["translate:", "--model", "mtkit translate --help"],
    ("translate", "-m"): ["translate:", "-m", "requires an argument"],
    ("translate", "-m", "m.pt", "--beam", "wide"): ["translate:", "--beam"],
    ("score", "-m", "bleu"): ["score:", "-m", "use --metrics"],
    ("nope",): ["nope", "mtkit --help"],
    ("binarize", "--out", "a", "-o", "b"): ["--out", "--output"],
    ("translate", "-m", "m.pt", "--threads", "100000"): ["translate:", "--threads", "1024"],
    ("score-pairs", "-m", "m.pt", "--threads", "-1"): ["score-pairs:", "--threads"],
    ("serve", "-m", "m.pt", "--threads", "5000"): ["serve:", "--threads", "1024"],
    ("average", "--last", "-1", "runs/x", "-o", "x.pt"): ["average:", "--last", "1"],
    ("average", "--last", "0", "runs/x", "-o", "x.pt"): ["average:", "--last", "1"],
    ("translate", "-m", "m.pt", "--max-tokens", "0"): ["translate:", "--max-tokens", "1"],
    ("score-pairs", "-m", "m.pt", "--src", "a", "--tgt", "b", "--max-tokens", "-5"):
        ["score-pairs:", "--max-tokens", "1"],
    ("serve", "-m", "m.pt", "--max-tokens", "0"): ["serve:", "--max-tokens", "1"],
}


@pytest.mark.parametrize("argv", list(USAGE_ROWS), ids=" ".join)
def test_a_usage_mistake_is_one_line(argv, tmp_path, mtkit_inprocess, expect_error):
    expect_error(mtkit_inprocess(list(argv), tmp_path), *USAGE_ROWS[argv])


SPM_FLAGS = ("spm-train", "-i", str(DATA / "dev.en"), "--model-prefix", "spm")
BINARIZE_FLAGS = ("binarize", "--tokenizer", "spm.model", "--src", str(DATA / "dev.es"), "--tgt",
                  str(DATA / "dev.en"), "-o", "bin")
OPTION_ROWS = {
    # argv: needles of the one error line (an option's value checked as its recipe key is)
    (*SPM_FLAGS, "--vocab-size", "-5"): ["--vocab-size -5", "expected between 8 and"],
    (*SPM_FLAGS, "--character-coverage", "2"): ["--character-coverage 2.0",
                                                "expected between 0.98 and 1.0"],
    (*SPM_FLAGS, "--character-coverage", "0.95"): ["--character-coverage 0.95", "0.98"],
    (*SPM_FLAGS, "--model-type", "word"): ["--model-type word", "unigram, bpe"],
    (*SPM_FLAGS, "--input-sentence-size", "-1"): ["--input-sentence-size -1", "at least 0"],
    # what SentencePiece refuses names the flags too, not the recipe's keys
    (*SPM_FLAGS, "--vocab-size", "5000"): ["vocab_size 5000 is too large", "(--vocab-size)"],
    (*SPM_FLAGS, "--vocab-size", "8"): ["(--vocab-size), or a lower --character-coverage"],
    (*SPM_FLAGS, "--vocab-size", "300", "--input-sentence-size", "5"): [
        "(--vocab-size), or sample more lines (5 of 60 lines, --input-sentence-size)"],
    (*BINARIZE_FLAGS, "--max-len", "0"): ["--max-len 0", "expected at least 1"],
    (*BINARIZE_FLAGS, "--max-ratio", "0.5"): ["--max-ratio 0.5", "expected at least 1.0"],
    (*BINARIZE_FLAGS, "--workers", "-1"): ["binarize:", "--workers", "greater than or equal to 0"],
    ("train", "tiny.yaml", "--nproc", "-1"): ["train:", "--nproc", "greater than or equal to 0"],
}


@pytest.mark.parametrize("argv", list(OPTION_ROWS), ids=" ".join)
def test_an_option_out_of_range_is_one_line(argv, tmp_path, mtkit_inprocess, expect_error):
    expect_error(mtkit_inprocess(list(argv), tmp_path), *OPTION_ROWS[argv])
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


def test_a_run_dir_that_is_a_file_is_one_line(tmp_path, mtkit_inprocess, expect_error):
    argv = setup_run_dir_file(tmp_path, None)
    expect_error(mtkit_inprocess(argv, tmp_path), "--run-dir afile", "is a file")
    # what only the file system finds (a directory under a file): one line as well
    for command in ("train", "spm-train"):
        argv = [command, bible_recipe(tmp_path).name, "--run-dir", "afile/sub"]
        expect_error(mtkit_inprocess(argv, tmp_path), "afile/sub", "Not a directory")
    assert (tmp_path / "afile").read_text() == "not a directory\n"


def test_translate_takes_a_run_directory(tiny_run, tmp_path, mtkit_cli, expect_error):
    lines = "En el principio era el Verbo.\nY dijo Dios.\n"
    by_dir = mtkit_cli(["translate", "-m", tiny_run.run_dir, "--quiet"], cwd=tmp_path,
                       input=lines)
    by_file = mtkit_cli(["translate", "-m", tiny_run.model, "--quiet"], cwd=tmp_path,
                        input=lines)
    assert by_dir.returncode == 0, by_dir.stderr
    assert by_dir.stdout == by_file.stdout and len(by_dir.stdout.splitlines()) == 2
    (tmp_path / "empty-run").mkdir()
    expect_error(mtkit_cli(["translate", "-m", "empty-run"], cwd=tmp_path, input=lines),
                 "empty-run", "model.pt")


def test_run_dir_of_another_recipe_is_refused(tiny_run, tmp_path, mtkit_inprocess,
                                              expect_error):
    run = tiny_run.copy_to(tmp_path)
    shutil.copy(run.recipe, run.root / "other.yaml")
    before = mtimes(run.run_dir)
    result = mtkit_inprocess(["train", "other.yaml", "--run-dir", "runs/tiny"], run.root)
    expect_error(result, "runs/tiny", "'tiny'", "'other'")
    assert mtimes(run.run_dir) == before


@pytest.fixture
def changed_model_section(tiny_run, tmp_path, mtkit_inprocess):
    run = tiny_run.copy_to(tmp_path)
    before = mtimes(run.run_dir)
    recipe_yaml = (run.run_dir / "recipe.yaml").read_text(encoding="utf-8")
    result = mtkit_inprocess(["train", "tiny.yaml", "--set", "model.ffn_dim=64"], run.root)
    return run, result, before, recipe_yaml


def test_changed_model_section_is_refused(changed_model_section, expect_error):
    run, result, before, _ = changed_model_section
    expect_error(result, "model.ffn_dim", "--restart")
    after = mtimes(run.run_dir)
    assert {k: v for k, v in after.items() if k != "recipe.yaml"} == {
        k: v for k, v in before.items() if k != "recipe.yaml"
    }


def test_changed_model_section_leaves_recipe_yaml_alone(changed_model_section):
    run, _, _, recipe_yaml = changed_model_section
    assert (run.run_dir / "recipe.yaml").read_text(encoding="utf-8") == recipe_yaml


@pytest.mark.parametrize("change, named", [
    (["--set", "tokenizer.vocab_size=280"], "the tokenizer changed since this run started "
                                            "(tokenizer.vocab_size)"),
    (["--set", "data.train.tgt=train.en"], "the training data changed since this run started "
                                           "(data.train.tgt)"),
])
def test_changed_tokenizer_or_text_is_refused_before_any_stage(tiny_run, tmp_path, change,
                                                               named, mtkit_inprocess,
                                                               expect_error):
    """The check against the run's checkpoints comes before the tokenizer and binarize
    stages: a run they rewrote would no longer match its checkpoints."""
    run = tiny_run.copy_to(tmp_path)
    text = (DATA / "train.en").read_text(encoding="utf-8").splitlines(keepends=True)
    (run.root / "train.en").write_text("".join(text[:-1]) + "Amen.\n", encoding="utf-8")
    before = mtimes(run.run_dir)
    result = mtkit_inprocess(["train", "tiny.yaml", *change], run.root)
    expect_error(result, "runs/tiny: ", named, "--restart")
    assert "[tokenizer]" not in result.stderr and "[binarize]" not in result.stderr
    assert mtimes(run.run_dir) == before


def test_stamps_damaged_into_other_json_are_redone(tiny_run, tmp_path, mtkit_inprocess):
    """A stamp or scores.json that decodes to something other than an object (hand-edited,
    or another tool's file) is damaged like a cut one: its stage runs again (it was an
    AttributeError traceback)."""
    run = tiny_run.copy_to(tmp_path)
    for name in ("tokenizer/stamp.json", "model.stamp.json", "eval/scores.json"):
        (run.run_dir / name).write_text("[]\n", encoding="utf-8")
    result = mtkit_inprocess(["train", "tiny.yaml"], run.root)
    assert result.returncode == 0, result.stderr
    for stage in ("tokenizer", "average", "eval"):
        assert f"[{stage}] running" in result.stderr
    assert "[train] skipped" in result.stderr  # the same tokenizer again: the run is whole
    assert json.loads((run.run_dir / "eval" / "scores.json").read_text())["results"]


def test_a_moved_length_filter_is_said_when_a_run_goes_on(tiny_run, tmp_path, mtkit_inprocess):
    """data.max_len changed under a run with checkpoints: binarize runs again, and the log
    says the run no longer continues as an uninterrupted one would."""
    run = tiny_run.copy_to(tmp_path)
    result = mtkit_inprocess(["train", "tiny.yaml", "--set", "data.max_len=40", "--until",
                              "binarize"], run.root)
    assert result.returncode == 0, result.stderr
    assert "[binarize] running" in result.stderr
    assert "data.max_len or data.max_ratio changed since this run started" in result.stderr
    again = mtkit_inprocess(["train", "tiny.yaml", "--set", "data.max_len=40", "--until",
                             "binarize"], run.root)
    assert "changed since" not in again.stderr  # said once, when it happens
