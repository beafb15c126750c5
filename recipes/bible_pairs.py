"""Parallel Bible corpora split as ../shared/data/bible-es-en is, for any two columns of
the verse table that the corpus's own tools/extract.py writes (verses.tsv: book,
chapter, verse, then one column per SWORD module: spaRV1909eb, engKJV2006eb,
engWEB2015eb).

    python recipes/bible_pairs.py verses.tsv OUT --src 3 --tgt 5 --src-lang es --tgt-lang en

writes OUT/{train,dev,test,heldout}.{es,en}: dev and test are the shared corpus's books,
`heldout` the books it keeps out of every split (Joel, John, Ephesians), train the rest.
A verse is dropped where either side is empty or the character-length ratio lies
outside 0.4-2.5, and so is every verse of the 12 chapters whose versification differs
between the editions, as in the shared corpus: with columns 3 and 4 this rebuilds its
files line for line. Nothing here is shipped data; the script is how recipes/README.md's
second language pair and held-out books were made.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SPLITS = {
    "dev": {"Ruth", "Jonah", "Phil", "Jas", "1Pet", "Titus"},
    "test": {"Esth", "Mic", "Gal", "Col", "1Thess", "2Tim", "Heb"},
    "heldout": {"Joel", "John", "Eph"},
}
# (book, chapter) numbered differently in Reina-Valera 1909 and the English editions
MISNUMBERED = {("Num", 13), ("Num", 30), ("1Sam", 24), ("1Chr", 21), ("2Chr", 33), ("Job", 39),
               ("Job", 40), ("Ps", 113), ("Ps", 150), ("Lam", 5), ("Hos", 12), ("Jonah", 2)}
RATIO = (0.4, 2.5)


def split_of(book: str) -> str:
    return next((name for name, books in SPLITS.items() if book in books), "train")


def keep(src: str, tgt: str) -> bool:
    return bool(src and tgt) and RATIO[0] <= len(src) / len(tgt) <= RATIO[1]


def write_pairs(table: Path, out: Path, src_col: int, tgt_col: int, src_lang: str,
                tgt_lang: str) -> dict[str, int]:
    """The split files under `out`; returns the pairs written per split."""
    pairs: dict[str, list[tuple[str, str]]] = {name: [] for name in ("train", *SPLITS)}
    with table.open(encoding="utf-8", newline="") as rows:
        for number, row in enumerate(csv.reader(rows, delimiter="\t", quoting=csv.QUOTE_NONE),
                                     start=1):
            if len(row) <= max(src_col, tgt_col):
                raise SystemExit(f"{table}:{number}: {len(row)} columns, expected more than "
                                 f"{max(src_col, tgt_col)}")
            book, chapter = row[0], int(row[1])
            src, tgt = row[src_col], row[tgt_col]
            if (book, chapter) not in MISNUMBERED and keep(src, tgt):
                pairs[split_of(book)].append((src, tgt))
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in pairs.items():
        for lang, side in ((src_lang, 0), (tgt_lang, 1)):
            text = "".join(pair[side] + "\n" for pair in lines)
            (out / f"{name}.{lang}").write_text(text, encoding="utf-8")
    return {name: len(lines) for name, lines in pairs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path, help="verses.tsv from tools/extract.py")
    parser.add_argument("out", type=Path, help="directory for the split files")
    parser.add_argument("--src", type=int, default=3, help="source column (0-based)")
    parser.add_argument("--tgt", type=int, default=4, help="target column (0-based)")
    parser.add_argument("--src-lang", default="es")
    parser.add_argument("--tgt-lang", default="en")
    args = parser.parse_args(argv)
    counts = write_pairs(args.table, args.out, args.src, args.tgt, args.src_lang,
                         args.tgt_lang)
    print(", ".join(f"{name} {count:,}" for name, count in counts.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
