"""Word links of training pairs, as links between the pieces a model reads: what
guided-alignment training supervises the cross-attention with.

A corpus's `alignments` file gives, for line N of its source and target files, links
`i-j` between the source line's whitespace words and the target line's, counted from 0
(Pharaoh, as fast_align and eflomal write them; an empty line: no links). Binarize maps
them to pieces, every piece of source word i to every piece of target word j, and keeps
them beside the token ids as side "links": `{split}.links.bin` holds each kept pair's
(source piece, target piece) positions as int32 pairs, `{split}.links.idx` the offsets.
A source piece's position counts a corpus tag, as the batches the model reads do.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from mtkit.data.tokenizer import Tokenizer
from mtkit.data.words import source_units, target_units
from mtkit.errors import DataError

SIDE = "links"  # the binarised side's name: {split}.links.bin/.idx
_LINK = re.compile(r"(\d+)-(\d+)")


def parse_links(line: str, src_words: int, tgt_words: int, where: str
                ) -> list[tuple[int, int]]:
    """The (i, j) word links of one Pharaoh line; DataError naming `where` (FILE:LINE) for
    a field that is no link or a word the pair does not have."""
    links = []
    for text in line.split():
        match = _LINK.fullmatch(text)
        if match is None:
            raise DataError(f"{where}: {text!r} is not a link; write i-j pairs (source word "
                            "i, target word j, from 0) separated by spaces")
        i, j = int(match[1]), int(match[2])
        if i >= src_words or j >= tgt_words:
            raise DataError(f"{where}: link {text}: the pair has {src_words} source and "
                            f"{tgt_words} target words, counted from 0; is this the "
                            "alignments file of these source and target files?")
        links.append((i, j))
    return links


def piece_links(word_links: Sequence[tuple[int, int]], src_units: Sequence[int | None],
                tgt_units: Sequence[int | None]) -> np.ndarray:
    """(K, 2) int32 (source piece, target piece) positions linking every piece of source
    word i to every piece of target word j, for each word link (i, j); sorted, each once.
    A word no piece spells (a normaliser removed it) links nothing."""
    src_pieces: dict[int, list[int]] = defaultdict(list)
    tgt_pieces: dict[int, list[int]] = defaultdict(list)
    for position, word in enumerate(src_units):
        if word is not None:
            src_pieces[word].append(position)
    for position, word in enumerate(tgt_units):
        if word is not None:
            tgt_pieces[word].append(position)
    pairs = sorted({(s, t) for i, j in word_links
                    for s in src_pieces.get(i, ()) for t in tgt_pieces.get(j, ())})
    return np.array(pairs, dtype=np.int32).reshape(-1, 2)


def encode_links(tokenizer: Tokenizer, lines: tuple[list[str], list[str], list[str]],
                 ids: tuple[list[list[int]], list[list[int]]], where: tuple[str, int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The piece links of a chunk of pairs: their source, target and alignments lines and
    their encoded ids; `where` = (alignments file, its line number of the chunk's first
    pair, from 1). Returns flat int32 (s, t) values and each pair's count of values."""
    path, first = where
    flat: list[np.ndarray] = []
    for k, (src, tgt, text, src_ids, tgt_ids) in enumerate(zip(*lines, *ids, strict=True)):
        words = parse_links(text, len(src.split()), len(tgt.split()), f"{path}:{first + k}")
        flat.append(piece_links(words, source_units(tokenizer, src, src_ids, "word"),
                                target_units(tokenizer, tgt, tgt_ids)).reshape(-1))
    lens = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
    values = np.concatenate(flat) if flat else np.empty(0, dtype=np.int32)
    return values.astype(np.int32, copy=False), lens
