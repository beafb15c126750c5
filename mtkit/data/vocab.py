"""Special ids, and explicit vocabularies: the tokenizer kind of imported models.

mtkit's own tokenizers are SentencePiece models whose ids are the model's ids. A model
imported from elsewhere (Marian / OPUS-MT) has a vocabulary of its own besides its
SentencePiece models: a piece -> id map (`vocab.json`), one for both sides or one per
side, with its own special ids (`</s>` 0, `<unk>` 1, `<pad>` last). A `Vocabulary` holds
that map, as the model has it (no remapping: a remap would change the softmax's rows), and
maps SentencePiece pieces through it as Hugging Face's MarianTokenizer does: a piece not in
the vocabulary is `<unk>`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sentencepiece as spm

from mtkit.errors import CheckpointError, DataError

# A source line may start with a target-language token, >>fra<< (multilingual models).
TAG_OPEN, TAG_CLOSE = ">>", "<<"
# Share of a SentencePiece model's pieces its vocabulary must hold. Not 100%: Marian builds
# the vocabulary from the encoded training text, so a piece the text never produced may be
# missing; another model's vocabulary shares only a few of them.
MIN_PIECES_KNOWN = 0.9


@dataclass(frozen=True)
class SpecialIds:
    """The target-side ids that batches, the loss and the search give a meaning to.

    A model's own: mtkit's tokenizers have pad 0, unk 1, start 2 (<s>), eos 3; an
    imported model may have others (its decoder may start from pad or from eos). Sources
    are padded with `pad` and end with `eos` too (`source_input`). `banned`: further ids
    the model must never emit (a generation config's bad_words_ids).
    """

    pad: int
    unk: int
    start: int  # the token the decoder is fed first
    eos: int
    banned: tuple[int, ...] = ()
    # a source's leading language token goes after its eos (NLLB's legacy_behaviour); only
    # for a multilingual model, whose every source starts with one
    tag_after_eos: bool = False

    @property
    def never_emitted(self) -> tuple[int, ...]:
        """Ids a search must not produce: pad, the start token unless it is eos, and the
        banned ones."""
        return tuple(sorted(({self.pad, self.start} - {self.eos}) | set(self.banned)))

    def source_input(self, ids: Sequence[int]) -> list[int]:
        """The ids the encoder reads for a source as `Tokenizer.encode_src` gives it (a tag
        or language token first, if any, then the pieces): those ids, then eos; with
        `tag_after_eos`, the pieces, eos, then the language token. Every site that feeds
        an encoder ends its sources here, so a cut (to the model's length) is made before,
        on the ids, and keeps the language token."""
        return _ended(list(ids), self.eos, self.tag_after_eos)

    def source_positions(self, length: int) -> list[int]:
        """The encoder position of each id of a source of `length` ids, then of its eos
        (`source_input`'s order): attention over the encoder's positions read at these
        comes in the ids' order, eos last."""
        where = [0] * (length + 1)
        for position, k in enumerate(_ended(list(range(length)), length, self.tag_after_eos)):
            where[k] = position
        return where


def _ended(items: list[Any], end: Any, tag_after_end: bool) -> list[Any]:
    """`items` then `end`; or, `tag_after_end`, the first item moved after `end`."""
    if tag_after_end and items:
        return [*items[1:], end, items[0]]
    return [*items, end]


@dataclass(frozen=True)
class Languages:
    """A multilingual model's language tokens (M2M100, NLLB): each language's code and its
    token's id (one vocabulary serves both sides), and the pair translated by default. A
    source is `[src] pieces </s>` (`pieces </s> [src]` for NLLB's legacy_behaviour:
    `SpecialIds.tag_after_eos`); a target `[tgt] pieces </s>`, its language token forced
    first when decoding."""

    codes: tuple[str, ...]
    ids: tuple[int, ...]
    default: tuple[str, str]  # (source, target) codes

    def id_of(self, code: str, what: str) -> int:
        """The token id of a language; DataError naming the closest codes otherwise."""
        if code in self.codes:
            return self.ids[self.codes.index(code)]
        close = difflib.get_close_matches(code, self.codes, n=3, cutoff=0.5)
        hint = f"closest: {', '.join(close)}" if close else \
            f"it has {len(self.codes)}; mtkit info lists them"
        raise DataError(f"{what} {code}: not a language of this model ({hint})")

    def to_dict(self) -> dict[str, Any]:
        return {"codes": list(self.codes), "ids": list(self.ids), "default": list(self.default)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Languages:
        src, tgt = raw["default"]
        return cls(tuple(str(c) for c in raw["codes"]), tuple(int(i) for i in raw["ids"]),
                   (str(src), str(tgt)))


@dataclass(frozen=True)
class Vocabulary:
    """Pieces by id for each side (`tgt` None: `src` serves both) and the special ids;
    `languages`: a multilingual model's language tokens (None: one language pair)."""

    src: tuple[str, ...]
    tgt: tuple[str, ...] | None
    specials: SpecialIds
    languages: Languages | None = None
    _index: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index["src"] = {piece: i for i, piece in enumerate(self.src)}
        self._index["tgt"] = (self._index["src"] if self.tgt is None else
                              {piece: i for i, piece in enumerate(self.tgt)})

    @property
    def joint(self) -> bool:
        return self.tgt is None

    def pieces(self, side: str) -> tuple[str, ...]:
        return self.src if side == "src" or self.tgt is None else self.tgt

    def index(self, side: str) -> dict[str, int]:
        return self._index[side]

    @property
    def tags(self) -> tuple[str, ...]:
        """The target-language tokens of the source side, as names: >>fra<< -> fra."""
        return tuple(p[2:-2] for p in self.src
                     if p.startswith(TAG_OPEN) and p.endswith(TAG_CLOSE) and len(p) > 4)

    def tag_id(self, tag: str) -> int | None:
        """The id of >>tag<< (or of tag, written whole), None when the source lacks it."""
        piece = tag if tag.startswith(TAG_OPEN) else f"{TAG_OPEN}{tag}{TAG_CLOSE}"
        return self._index["src"].get(piece)

    # -- encoding and decoding

    def encode(self, proc: spm.SentencePieceProcessor, lines: Sequence[str], side: str,
               threads: int | None = None) -> list[list[int]]:
        """Each line's ids: SentencePiece's pieces through the vocabulary (unknown: <unk>).
        A source line that starts with >>xx<< keeps it as one token, as MarianTokenizer.
        `threads`: one batched SentencePiece call on that many threads (-1: all cores);
        None: a call per line (cheaper for a few lines)."""
        index, unk = self._index[side], self.specials.unk
        codes, texts = [], []
        for line in lines:
            code: list[int] = []
            if side == "src" and line.startswith(TAG_OPEN) and (end := line.find(TAG_CLOSE)) != -1:
                code = [index.get(line[: end + 2], unk)]
                line = line[end + 2:]
            codes.append(code)
            texts.append(line)
        if threads is None:
            pieces = [proc.encode(text, out_type=str) for text in texts]
        else:
            pieces = proc.encode(texts, out_type=str, num_threads=threads)
        return [code + [index.get(p, unk) for p in seq] for code, seq in zip(codes, pieces)]

    def ids_of(self, proc: spm.SentencePieceProcessor, side: str) -> list[int]:
        """SentencePiece id -> vocabulary id (unknown: <unk>): for sampled segmentations,
        which come as SentencePiece ids."""
        index, unk = self._index[side], self.specials.unk
        return [index.get(proc.id_to_piece(i), unk) for i in range(proc.vocab_size())]

    def decode(self, proc: spm.SentencePieceProcessor, ids: Sequence[int],
               side: str = "tgt") -> str:
        """Ids -> text: the pieces without the special ids, through SentencePiece."""
        pieces, s = self.pieces(side), self.specials
        skip = {s.pad, s.unk, s.eos, s.start, *(self.languages.ids if self.languages else ())}
        return proc.decode_pieces([pieces[i] for i in ids if i not in skip and i < len(pieces)])

    # -- checks and the file boundary

    def check_matches(self, proc: spm.SentencePieceProcessor, side: str, name: str) -> None:
        """ValueError unless this side's vocabulary holds most of the model's pieces."""
        index = self._index[side]
        normal = [proc.id_to_piece(i) for i in range(proc.vocab_size())
                  if not (proc.is_control(i) or proc.is_unknown(i))]
        known = sum(piece in index for piece in normal)
        if normal and known < MIN_PIECES_KNOWN * len(normal):
            raise ValueError(f"the vocabulary does not match {name}: it holds {known} of its "
                             f"{len(normal)} pieces")

    def to_bytes(self) -> bytes:
        s = self.specials
        specials: dict[str, Any] = {"pad": s.pad, "unk": s.unk, "start": s.start,
                                    "eos": s.eos, "banned": list(s.banned)}
        if s.tag_after_eos:  # written only when set: other bundles' bytes stay as they were
            specials["tag_after_eos"] = True
        raw = {"src": list(self.src), "tgt": None if self.tgt is None else list(self.tgt),
               "specials": specials}
        if self.languages is not None:
            raw["languages"] = self.languages.to_dict()
        return json.dumps(raw, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, blob: bytes, where: str) -> Vocabulary:
        try:
            raw: dict[str, Any] = json.loads(bytes(blob).decode("utf-8"))
            s = raw["specials"]
            specials = SpecialIds(int(s["pad"]), int(s["unk"]), int(s["start"]), int(s["eos"]),
                                  tuple(int(i) for i in s.get("banned", ())),
                                  bool(s.get("tag_after_eos", False)))
            languages = Languages.from_dict(raw["languages"]) if raw.get("languages") else None
            if specials.tag_after_eos and languages is None:
                raise ValueError("a language token after eos, but no languages")
            vocab = cls(tuple(raw["src"]), None if raw["tgt"] is None else tuple(raw["tgt"]),
                        specials, languages)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise CheckpointError(f"{where}: the vocabulary is damaged") from None
        size = len(vocab.pieces("tgt"))
        if not all(0 <= i < size for i in (specials.pad, specials.unk, specials.start,
                                            specials.eos, *specials.banned,
                                            *(languages.ids if languages else ()))):
            raise CheckpointError(f"{where}: the vocabulary's special ids lie outside it")
        return vocab
