"""The README's Quick start, steps 2 and 3 (your own data: check, train, translate, score),
run as written in a clean copy of the repository (its tracked files only), on tiny files.

The commands are read from README.md, so a change there is a change to this test. The one
change made to them: `--set` options after `mtkit train` for a tiny model and a few
updates, which README.md says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import DATA, RECIPES
from conftest import CLI_ENV, MTKIT

REPO = RECIPES.parent
TINY = ("--set tokenizer.vocab_size=300 --set model.enc_layers=1 --set model.dec_layers=1 "
        "--set model.d_model=32 --set model.heads=2 --set model.ffn_dim=64 "
        "--set train.max_tokens=1024 --set train.max_steps=6 --set train.warmup_steps=2 "
        "--set train.valid_every=3 --set train.save_every=3 --set decode.beam=2 "
        "--set decode.max_len_b=5")


def clean_copy(to: Path) -> Path:
    """The repository's tracked files (as they stand in the work tree), copied to `to`."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode("utf-8").split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a tracked file someone has just deleted is not copied
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


def quick_start_steps(readme: str, *numbers: int) -> str:
    """The shell blocks of the Quick start's steps `numbers` (`**N. ...**` paragraphs)."""
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for number in numbers:
        step = section.split(f"\n**{number}. ", 1)[1].split("\n**", 1)[0]
        blocks += re.findall(r"```sh\n(.*?)```", step, flags=re.DOTALL)
    assert blocks, f"no shell block in the Quick start's steps {numbers}"
    return "".join(blocks)


def write_tiny_corpus(corpus: Path) -> None:
    """The files step 2 names, corpus/{train,dev,test}.{de,en}: the Bible sample of
    tests/data (Spanish standing in for German)."""
    corpus.mkdir()
    for split in ("train", "dev", "test"):
        for theirs, ours in (("es", "de"), ("en", "en")):
            shutil.copy(DATA / f"{split}.{theirs}", corpus / f"{split}.{ours}")


def test_the_quick_start_runs_as_written_from_a_clean_copy(tmp_path):
    clone = clean_copy(tmp_path / "mtkit")
    write_tiny_corpus(clone / "corpus")
    script = quick_start_steps((clone / "README.md").read_text(encoding="utf-8"), 2, 3)
    assert script.count("mtkit train ") == 2  # the dry run and the training
    script = script.replace("mtkit train ", f"mtkit train {TINY} ")
    # mtkit from this environment's bin (the Quick start activates the venv), and the
    # package from the copy, so that the copy is what runs
    env = {**CLI_ENV, "PATH": f"{MTKIT.parent}{os.pathsep}{CLI_ENV['PATH']}",
           "PYTHONPATH": str(clone)}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    imported = subprocess.run([str(MTKIT.with_name("python")), "-c",
                               "import mtkit; print(mtkit.__file__)"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=True).stdout
    assert Path(imported.strip()).is_relative_to(clone)
    assert "data:" in done.stdout  # the dry run printed the resolved recipe
    scores = json.loads((clone / "runs/de-en/eval/scores.json").read_text(encoding="utf-8"))
    assert scores["results"]
    hypotheses = (clone / "test.hyp.en").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len((clone / "corpus/test.de").read_text().splitlines())
    assert re.search(r"BLEU.*= *\d", done.stdout), done.stdout[-2000:]  # mtkit score


# the recipes whose data is yours, given by --set; every other one trains on data/ as shipped
YOUR_DATA = {"template.yaml", "transformer-base.yaml", "transformer-big.yaml"}
DATA_SETS = [f"--set=data.{key}.{side}=corpus/{split}.{lang}"
             for key, split in (("train", "train"), ("valid", "dev"), ("test", "test"))
             for side, lang in (("src", "de"), ("tgt", "en"))]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    copy = clean_copy(tmp_path_factory.mktemp("clean") / "mtkit")
    write_tiny_corpus(copy / "corpus")
    return copy


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_every_shipped_recipe_checks_out_from_a_clean_copy(name, clone, mtkit_inprocess):
    sets = DATA_SETS if name in YOUR_DATA else []
    result = mtkit_inprocess(["train", f"recipes/{name}", "--dry-run", *sets], clone)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (clone / "runs").exists() or not any((clone / "runs").iterdir())


def test_the_template_without_your_data_says_which_file_is_missing(tmp_path, mtkit_inprocess,
                                                                   expect_error):
    clean_copy(tmp_path)  # no corpus/ here
    result = mtkit_inprocess(["train", "recipes/template.yaml", "--dry-run"], tmp_path)
    expect_error(result, "recipes/template.yaml", "data.train.src", "corpus/train.de")
