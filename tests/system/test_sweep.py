"""recipes/sweep.sh, the screening sweep of recipes/README.md, on the tiny Bible sample."""

from __future__ import annotations

import json
import subprocess

from builders import RECIPES, bible_recipe


def sweep(tmp_path, mtkit_script, *rows: str) -> subprocess.CompletedProcess:
    mtkit, env = mtkit_script
    base = bible_recipe(tmp_path, train={"max_steps": 6, "valid_every": 3, "save_every": 3,
                                                   "log_every": 1})
    env = {**env, "BASE": str(base), "WORK": str(tmp_path / "sweep"), "BUDGET": "5m",
           "THREADS": "1", "MTKIT": str(mtkit)}
    return subprocess.run(["bash", str(RECIPES / "sweep.sh"), *rows], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_each_row_trains_with_its_overrides_and_the_table_reports_it(tmp_path, mtkit_script):
    done = sweep(tmp_path, mtkit_script, "base", "", "short", "--set train.max_steps=3")
    assert done.returncode == 0, done.stderr[-3000:]
    work = tmp_path / "sweep"
    for row, steps in (("base", 6), ("short", 3)):
        recipe = (work / row / "recipe.yaml").read_text(encoding="utf-8")
        assert "max_time: 300.0" in recipe
        scores = json.loads((work / row / "eval/scores.json").read_text(encoding="utf-8"))
        bleu = scores["results"][0]["scores"]["BLEU"]["score"]
        table_row = next(line for line in done.stdout.splitlines()
                         if line.startswith(f"| {row} |"))
        cells = [cell.strip() for cell in table_row.strip("|").split("|")]
        assert cells[1] == str(steps)
        assert cells[7] == f"{bleu:.2f}"

    again = sweep(tmp_path, mtkit_script, "base", "")  # finished: nothing is trained again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[train] skipped" in again.stderr
    assert "| base | 6 |" in again.stdout


def test_rows_come_in_pairs(tmp_path, mtkit_script):
    done = sweep(tmp_path, mtkit_script, "base")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "usage: bash recipes/sweep.sh NAME OVERRIDES [NAME OVERRIDES ...]")
