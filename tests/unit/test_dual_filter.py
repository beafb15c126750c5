"""recipes/dual_filter.py: the noise it makes is what it says, and the filter keeps the
pairs with the lowest dual conditional cross-entropy."""

from __future__ import annotations

import importlib.util

import pytest
from builders import RECIPES

spec = importlib.util.spec_from_file_location("dual_filter", RECIPES / "dual_filter.py")
dual_filter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dual_filter)

SRC = [f"fuente {i} con palabras varias aqui" for i in range(30)]
TGT = [f"target {i} with several words here" for i in range(30)]


def test_the_corruption_is_the_share_and_kinds_it_reports():
    src, tgt, noise = dual_filter.corrupt(SRC, TGT, share=0.3, seed=1)
    assert src == SRC and len(tgt) == len(TGT)
    kinds = [n for n in noise if n != "clean"]
    assert len(kinds) == 9 and {kinds.count(k) for k in dual_filter.KINDS} == {3}
    for i, kind in enumerate(noise):
        if kind == "clean":
            assert tgt[i] == TGT[i]
        elif kind == "copied":
            assert tgt[i] == SRC[i]
        elif kind == "truncated":
            assert tgt[i] == "target " + str(i)  # the first third of six words
        else:
            assert tgt[i] in TGT and tgt[i] != TGT[i]
    assert dual_filter.corrupt(SRC, TGT, 0.3, seed=1) == (src, tgt, noise)


def test_the_score_wants_both_directions_likely_and_agreeing():
    forward = ["-10\t-1.0", "-20\t-2.0", "-5\t-0.5", "-1\t-0.1"]
    backward = ["-10\t-1.0", "-20\t-2.0", "-40\t-4.0", "-1\t-0.1"]
    scores = dual_filter.dual_scores(forward, backward)
    assert scores == pytest.approx([1.0, 2.0, 3.5 + 2.25, 0.1])
    assert dual_filter.select(scores, keep=0.5) == [0, 3]  # the best two, in corpus order
    # a pair one model could not read (score-pairs --skip-long) ranks last
    unread = dual_filter.dual_scores(forward + ["-inf\t-inf"], backward + ["-1\t-0.1"])
    assert unread[-1] == float("inf") and dual_filter.select(unread, keep=0.8) == [0, 1, 2, 3]


def test_select_writes_the_kept_pairs_and_reports_the_noise(tmp_path, capsys):
    files = {"src": SRC[:4], "tgt": TGT[:4], "noise": ["clean", "copied", "clean", "clean"],
             "fwd": ["-1\t-0.1", "-9\t-0.9", "-2\t-0.2", "-3\t-0.3"],
             "bwd": ["-1\t-0.1", "-9\t-0.9", "-2\t-0.2", "-3\t-0.3"]}
    for name, lines in files.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    p = [str(tmp_path / n) for n in ("src", "tgt", "fwd", "bwd")]
    out = str(tmp_path / "out")
    assert dual_filter.main(["select", *p, out, "--keep", "0.75", "--noise",
                             str(tmp_path / "noise")]) == 0
    assert (tmp_path / "out.src").read_text(encoding="utf-8").splitlines() == [
        SRC[0], SRC[2], SRC[3]]
    printed = capsys.readouterr().out
    assert "copied: 0 of 1 kept" in printed and "kept 3 of 4 pairs" in printed
    (tmp_path / "bwd").write_text("-1\t-0.1\n", encoding="utf-8")
    assert dual_filter.main(["select", *p, out]) == 2
    assert "1 backward scores" in capsys.readouterr().err


@pytest.mark.parametrize("inside", ["\u2028", "\u0085", "\x0c", "\r", "\x1c"])
def test_lines_end_only_at_newlines_as_mtkit_reads_them(tmp_path, inside):
    """A line separator inside a line (U+2028, NEL, a form feed, a lone CR) is text to
    wc -l, score-pairs and mtkit train: splitting there shifted every later pair."""
    src = [SRC[0], f"fuente {inside} partida", SRC[2]]
    tgt = [TGT[0], TGT[1], f"target {inside} cut"]
    for name, lines in (("src", src), ("tgt", tgt)):
        (tmp_path / name).write_bytes("".join(f"{line}\r\n" for line in lines).encode())
    out = str(tmp_path / "noisy")
    assert dual_filter.main(["corrupt", str(tmp_path / "src"), str(tmp_path / "tgt"), out,
                             "--share", "0"]) == 0
    assert (tmp_path / "noisy.src").read_bytes().split(b"\n")[:-1] == [
        line.encode() for line in src]
    assert (tmp_path / "noisy.tgt").read_bytes().split(b"\n")[:-1] == [
        line.encode() for line in tgt]
