"""Guided-alignment training's data and loop: word links binarised as piece links that
spell the same words, kept or rebuilt with their file, bad links files refused with one
line naming file and line, and a guided run resumed equal to an uninterrupted one.
(What it does to alignments: test_alignments_trained.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from builders import DATA, prepare, reverse_links, reverse_recipe, reverse_task, weights

from mtkit.config import recipe_from_dict
from mtkit.data.binarize import binarize
from mtkit.data.dataset import ParallelData
from mtkit.data.links import encode_links, parse_links
from mtkit.data.tokenizer import Tokenizer
from mtkit.data.words import source_units, target_units
from mtkit.errors import DataError
from mtkit.train.run import RunPaths
from mtkit.train.trainer import train


def diagonal_links(src: Path, tgt: Path, out: Path) -> Path:
    """Links i-j with j the target word nearest i's relative place, for each line pair."""
    rows = []
    for s, t in zip(src.read_text(encoding="utf-8").splitlines(),
                    tgt.read_text(encoding="utf-8").splitlines(), strict=True):
        n, m = len(s.split()), len(t.split())
        rows.append(" ".join(f"{i}-{min(m - 1, i * m // n)}" for i in range(n)) if n and m
                    else "")
    out.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return out


def test_piece_links_spell_the_word_links(tokenizer: Tokenizer, tmp_path: Path) -> None:
    """Every binarised piece link joins a piece of source word i to a piece of target word
    j of a given link (i, j), and every given link whose words have pieces is there; the
    same data binarised by 2 workers and in process is identical."""
    src, tgt = DATA / "train.es", DATA / "train.en"
    links = diagonal_links(src, tgt, tmp_path / "train.links")
    out = tmp_path / "data"
    binarize(tokenizer, {"train": (src, tgt)}, out, workers=2, alignments={"train": links})
    data = ParallelData(out, "train")
    kept = np.fromfile(out / "train.lines", dtype=np.int64)
    texts = [f.read_text(encoding="utf-8").splitlines() for f in (src, tgt, links)]
    checked = 0
    for i, line in enumerate(kept.tolist()):
        s_text, t_text, l_text = (text[line] for text in texts)
        words = set(parse_links(l_text, len(s_text.split()), len(t_text.split()), "x"))
        s_units = source_units(tokenizer, s_text, data.src(i).tolist(), "word")
        t_units = target_units(tokenizer, t_text, data.tgt(i).tolist())
        found = {(s_units[s], t_units[t]) for s, t in data.links(i).tolist()}
        spelled = {(a, b) for a, b in words if a in s_units and b in t_units}
        assert found == spelled, line
        checked += len(found)
    assert checked > 1000
    binarize(tokenizer, {"train": (src, tgt)}, tmp_path / "one", workers=1,
             alignments={"train": links})
    for suffix in ("links.bin", "links.idx", "src.bin"):
        assert (out / f"train.{suffix}").read_bytes() == (
            tmp_path / "one" / f"train.{suffix}").read_bytes()


def test_a_split_is_kept_with_its_links_and_rebuilt_when_they_change(
        tokenizer: Tokenizer, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    src, tgt = DATA / "train.es", DATA / "train.en"
    links = diagonal_links(src, tgt, tmp_path / "train.links")
    out = tmp_path / "data"
    binarize(tokenizer, {"train": (src, tgt)}, out, workers=1, alignments={"train": links})
    binarize(tokenizer, {"train": (src, tgt)}, out, workers=1, alignments={"train": links})
    assert "unchanged, kept" in capfd.readouterr().err
    assert ParallelData(out, "train").links(0).size > 0
    links.write_text("0-0\n" * len(src.read_text(encoding="utf-8").splitlines()))
    binarize(tokenizer, {"train": (src, tgt)}, out, workers=1, alignments={"train": links})
    assert "unchanged" not in capfd.readouterr().err
    data = ParallelData(out, "train")
    first = int(np.fromfile(out / "train.lines", dtype=np.int64)[0])
    s_text, t_text = (f.read_text(encoding="utf-8").splitlines()[first] for f in (src, tgt))
    s_units = source_units(tokenizer, s_text, data.src(0).tolist(), "word")
    t_units = target_units(tokenizer, t_text, data.tgt(0).tolist())
    assert {(s_units[s], t_units[t]) for s, t in data.links(0).tolist()} == {(0, 0)}
    binarize(tokenizer, {"train": (src, tgt)}, out, workers=1)
    assert not ParallelData(out, "train").has_links
    assert ParallelData(out, "train").links(0).shape == (0, 2)


@pytest.mark.parametrize("src, tgt, link, words", [
    ("Esther´s casa grande", "Esther´s big house", "1-2", ("casa", "house")),
    ("dijo´ \x01 casa", "said´ \x01 house", "2-2", ("casa", "house")),
])
def test_links_join_the_pieces_of_the_lines_own_words(tokenizer: Tokenizer, src: str, tgt: str,
                                                      link: str, words: tuple[str, str]) -> None:
    """An aligner counts the words of the line as written; SentencePiece's normaliser
    splits "Esther´s" in two (NFKC: ´ is a space and an accent) and drops a word of
    control characters, yet link i-j joins the pieces of those words, no others."""
    (src_ids,), (tgt_ids,) = tokenizer.encode_src([src]), tokenizer.encode_tgt([tgt])
    values, counts = encode_links(tokenizer, ([src], [tgt], [link]), ([src_ids], [tgt_ids]),
                                  ("train.links", 1))
    pairs = values.reshape(-1, 2).tolist()
    assert counts.tolist() == [values.size] and pairs
    (source,) = tokenizer.decode_src([[src_ids[s] for s in sorted({s for s, _ in pairs})]])
    (target,) = tokenizer.decode_tgt([[tgt_ids[t] for t in sorted({t for _, t in pairs})]])
    assert (source, target) == words


@pytest.mark.parametrize("line, needle", [
    ("0-0 1:2", "train.links:3: '1:2' is not a link; write i-j pairs"),
    ("0-0 0-99", "train.links:3: link 0-99: the pair has"),
    (None, "train.links has 299"),
])
def test_bad_links_are_refused_naming_the_line(tokenizer: Tokenizer, tmp_path: Path,
                                               line: str | None, needle: str) -> None:
    src, tgt = DATA / "train.es", DATA / "train.en"
    links = diagonal_links(src, tgt, tmp_path / "train.links")
    rows = links.read_text(encoding="utf-8").splitlines()
    rows = rows[:2] + [line] + rows[3:] if line is not None else rows[:-1]
    links.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "data"
    with pytest.raises(DataError) as info:
        binarize(tokenizer, {"train": (src, tgt)}, out, workers=2, alignments={"train": links})
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not out.exists()


def test_a_guided_run_resumes_bit_identically(tmp_path: Path) -> None:
    """N updates in one go == N/2, a fresh process state, then N/2 more, with the
    guided-alignment loss in every update (dropout on, so the batch seeds matter)."""
    files = reverse_task(tmp_path / "data", n_train=400)
    raw = reverse_recipe(files, max_steps=12)
    raw["data"]["train"]["alignments"] = str(reverse_links(files["train"][0],
                                                           tmp_path / "data" / "train.links"))
    raw["train"].update({"save_every": 6, "max_tokens": 256, "log_every": 3})
    raw["model"].update({"dropout": 0.2, "attn_dropout": 0.1})
    whole = recipe_from_dict(raw, name="whole")
    raw["train"]["max_steps"] = 6
    half = recipe_from_dict(raw, name="whole")
    runs = {}
    for name, recipes in (("whole", [whole]), ("split", [half, whole])):
        run = tmp_path / name
        tokenizer, fingerprints = prepare(whole, run)
        for recipe in recipes:
            torch.manual_seed(1234)  # a resumed run must not depend on the process's RNG
            train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
        runs[name] = weights(RunPaths(run).last)
    assert runs["whole"].keys() == runs["split"].keys()
    for key in runs["whole"]:
        assert torch.equal(runs["whole"][key], runs["split"][key]), key
