"""recipes/bible_pairs.py: the shared Bible corpus's splits and filters, on a small verse
table of the shape tools/extract.py writes."""

from __future__ import annotations

import importlib.util

import pytest
from builders import RECIPES

spec = importlib.util.spec_from_file_location("bible_pairs", RECIPES / "bible_pairs.py")
bible_pairs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bible_pairs)

ROWS = [  # book, chapter, verse, Spanish, English (KJV), English (WEB)
    ("Gen", 1, 1, "En el principio", "In the beginning", "In the beginning,"),
    ("Gen", 1, 2, "", "And the earth", "The earth"),  # empty: dropped
    ("Num", 13, 1, "Y habló Jehová", "And the LORD spake", "Yahweh spoke"),  # misnumbered
    ("Ruth", 1, 1, "Y aconteció", "Now it came to pass", "In the days"),  # dev
    ("Heb", 1, 1, "Dios, habiendo hablado", "God, who at sundry times", "God, having"),  # test
    ("John", 1, 1, "En el principio era", "In the beginning was", "In the beginning was"),
    ("Gen", 1, 3, "Y dijo Dios: Sea la luz: y fué la luz, como", "Light", "Let there be"),
]


def split(tmp_path, *args: str) -> None:
    table = tmp_path / "verses.tsv"
    if not table.exists():
        table.write_text("".join("\t".join(map(str, row)) + "\n" for row in ROWS),
                         encoding="utf-8")
    bible_pairs.main([str(table), str(tmp_path / "out"), *args])


def lines(tmp_path, name: str) -> list[str]:
    return (tmp_path / "out" / name).read_text(encoding="utf-8").splitlines()


def test_books_go_to_their_splits_and_the_filters_drop_what_the_corpus_drops(tmp_path,
                                                                           capsys):
    split(tmp_path, "--tgt", "5")
    assert capsys.readouterr().err.strip() == "train 1, dev 1, test 1, heldout 1"
    assert lines(tmp_path, "train.es") == ["En el principio"]  # Gen 1:3: 43 characters against 12
    assert lines(tmp_path, "train.en") == ["In the beginning,"]
    assert lines(tmp_path, "dev.en") == ["In the days"]
    assert lines(tmp_path, "test.es") == ["Dios, habiendo hablado"]
    assert lines(tmp_path, "heldout.en") == ["In the beginning was"]


def test_a_short_row_names_its_line(tmp_path):
    (tmp_path / "verses.tsv").write_text("Gen\t1\t1\tEn el principio\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"verses.tsv:1: 4 columns, expected more than 4$"):
        split(tmp_path)
