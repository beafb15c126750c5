"""SentencePiece subword tokenizers: training, loading, encoding and decoding.

The four special symbols live inside the SentencePiece model itself at fixed ids, so a
model file (or the bytes stored in a checkpoint) is the whole vocabulary: there is no
separate vocabulary file to keep in sync. The exception is an imported model, which
brings an explicit vocabulary of its own (vocab.py) that the pieces are mapped through.
"""

from __future__ import annotations

import copy
import hashlib
import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import sentencepiece as spm

from mtkit.data.sampling import Sampling, piece_scores, sample_segmentations
from mtkit.data.spm_input import (
    CorpusStream,
    existing_inputs,
    training_error,
    training_sentences,
)
from mtkit.data.vocab import TAG_CLOSE, TAG_OPEN, SpecialIds, Vocabulary
from mtkit.errors import CheckpointError, DataError
from mtkit.files.atomic import atomic_write_bytes

# The ids `mtkit spm-train` gives the special pieces. Everything after training reads a
# model's ids from its tokenizer (`Tokenizer.specials`), never from these constants.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
NUM_SPECIALS = 4
# trainer option name -> (id, piece)
SPECIALS = {
    "pad": (PAD_ID, "<pad>"),
    "unk": (UNK_ID, "<unk>"),
    "bos": (BOS_ID, "<s>"),
    "eos": (EOS_ID, "</s>"),
}


# The trainer's thread count is recorded in the model and changes its bytes, so it is a
# constant rather than os.cpu_count(): the same corpus gives the same model on any machine.
TRAIN_THREADS = 8

# Below this many lines, encode and decode one line at a time: sentencepiece's list calls
# start a thread pool each time, which costs more than the work on a few lines (a server's
# request, an interactive translate); a long list repays it. The ids and texts are the
# same either way.
FEW_LINES = 64


# --------------------------------------------------------------------------- training


def train_sentencepiece(
    inputs: list[Path],
    model_prefix: Path,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    input_sentence_size: int = 1_000_000,
    seed: int = 1,
    tags: tuple[str, ...] = (),
    names: dict[str, str] | None = None,
) -> Path:
    """Train a SentencePiece model on text files; write `<model_prefix>.model`, return its path.

    A random sample of at most `input_sentence_size` non-empty lines (0 = all) is used, so
    memory does not grow with the corpus; the same inputs and settings give the same bytes.
    Each of `tags` becomes the control symbol <tag>, with the ids after the specials.
    Errors name the settings as `names` spells them (default: the recipe's keys).
    """
    inputs = existing_inputs(inputs)
    where = ", ".join(str(p) for p in inputs)
    lines = CorpusStream(inputs)
    sentences = training_sentences(lines, input_sentence_size, seed)
    spm.set_random_generator_seed(seed)  # for whatever randomness the trainer itself uses
    try:
        model = _run_trainer(sentences, vocab_size, model_type, character_coverage, tags)
    except RuntimeError as exc:
        if lines.error is not None:
            raise lines.error from None
        if lines.nonempty == 0:
            raise DataError(f"{where}: no non-empty lines to train the tokenizer on") from None
        cut = 0 < input_sentence_size < lines.nonempty
        sample = f"{input_sentence_size} of {lines.nonempty} lines" if cut else ""
        raise training_error(str(exc), vocab_size, where, names, sample) from None
    if lines.error is not None:  # spm may finish on the lines read before the failure
        raise lines.error

    path = Path(f"{model_prefix}.model")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, model)  # readers never see half a model
    return path


def _run_trainer(sentences: Iterable[str], vocab_size: int, model_type: str,
                 character_coverage: float, tags: tuple[str, ...]) -> bytes:
    """The trained model's bytes; spm writes no file itself."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=0,  # already sampled
        # a CJK line has no spaces and 3 bytes per character; spm skips longer lines
        max_sentence_length=16384,
        num_threads=TRAIN_THREADS,
        minloglevel=2,  # errors only; the trainer's progress log is noise for our users
        # control symbols, not user-defined ones: a literal "<BT>" in the text stays
        # text, so only mtkit (binarize, translate --tag) ever writes a tag
        control_symbols=[tag_piece(t) for t in tags],
        **_special_options(),
    )
    return model.getvalue()


def _special_options() -> dict[str, int | str]:
    options: dict[str, int | str] = {}
    for name, (index, piece) in SPECIALS.items():
        options[f"{name}_id"] = index
        options[f"{name}_piece"] = piece
    return options


def tag_piece(tag: str) -> str:
    return f"<{tag}>"


# --------------------------------------------------------------------------- the tokenizer


class Tokenizer:
    """One SentencePiece model shared by both languages (joint) or one per language.

    Encoded ids carry no BOS/EOS; the model adds them where it needs them.
    `threads` is spm's thread count for batched encoding (0 = all cores). A tokenizer
    made by `tagged(NAME)` starts every source line with the tag's control symbol.

    With `vocab` (an imported model's explicit vocabulary, `vocab.Vocabulary`'s bytes) the
    ids are the vocabulary's: SentencePiece's pieces are mapped through it, the special
    ids are its own, and `joint` means one vocabulary (the two sides may still have a
    SentencePiece model each).
    """

    def __init__(
        self,
        src: bytes,
        tgt: bytes | None = None,
        threads: int = 0,
        names: tuple[str, str] = ("source model", "target model"),
        vocab: bytes | None = None,
    ):
        self._src_bytes = bytes(src)
        self._tgt_bytes = None if tgt is None else bytes(tgt)
        self._vocab_bytes = None if vocab is None else bytes(vocab)
        self.vocab = None if vocab is None else Vocabulary.from_bytes(vocab, names[0])
        self.threads = threads
        mtkit_ids = self.vocab is None  # SentencePiece's own ids, with mtkit's specials
        self._src = _load_processor(self._src_bytes, names[0], mtkit_ids)
        self._tgt = self._src if tgt is None else _load_processor(self._tgt_bytes, names[1],
                                                                  mtkit_ids)
        self.source_tag: int | None = None  # id put before every encoded source line
        self.target_start: tuple[int, ...] = ()  # ids every target starts with (a language)
        self.langs: tuple[str, str] | None = None  # a multilingual model's chosen pair
        if self.vocab is not None and self.vocab.languages is not None:
            self._choose(*self.vocab.languages.default)
        self.specials = self.vocab.specials if self.vocab is not None else SpecialIds(
            pad=self._tgt.pad_id(), unk=self._tgt.unk_id(), start=self._tgt.bos_id(),
            eos=self._tgt.eos_id())
        self._piece_scores: dict[spm.SentencePieceProcessor, np.ndarray] = {}  # for sampling

    @classmethod
    def from_files(cls, src_model: Path, tgt_model: Path | None = None,
                   vocab: Path | None = None) -> Tokenizer:
        src = _read_model(Path(src_model))
        tgt = None if tgt_model is None else _read_model(Path(tgt_model))
        words = None if vocab is None else _read_model(Path(vocab))
        return cls(src, tgt, names=(str(src_model), str(tgt_model)), vocab=words)

    @classmethod
    def from_bytes(cls, src: bytes, tgt: bytes | None = None,
                   vocab: bytes | None = None) -> Tokenizer:
        """Rebuild from model bytes stored in a checkpoint."""
        return cls(src, tgt, names=("checkpoint: source tokenizer", "checkpoint: target tokenizer"),
                   vocab=vocab)

    # -- properties

    @property
    def src_bytes(self) -> bytes:
        return self._src_bytes

    @property
    def tgt_bytes(self) -> bytes | None:
        """None when joint: the source model serves both sides."""
        return self._tgt_bytes

    @property
    def vocab_bytes(self) -> bytes | None:
        """An explicit vocabulary's bytes; None for SentencePiece's own ids."""
        return self._vocab_bytes

    @property
    def joint(self) -> bool:
        return self._tgt_bytes is None if self.vocab is None else self.vocab.joint

    @property
    def src_vocab_size(self) -> int:
        return len(self.pieces("src"))

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.pieces("tgt"))

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags the source model knows: its control symbols <NAME> beyond the specials
        (with a vocabulary: its target-language tokens >>NAME<<)."""
        if self.vocab is not None:
            return self.vocab.tags
        proc = self._src
        pieces = (proc.id_to_piece(i) for i in range(NUM_SPECIALS, proc.vocab_size())
                  if proc.is_control(i))
        return tuple(p[1:-1] for p in pieces if p.startswith("<") and p.endswith(">"))

    def tagged(self, tag: str | None) -> Tokenizer:
        """This tokenizer, putting <tag> before every source line (None: no tag)."""
        if tag is None:
            return self
        if self.vocab is not None:
            index = self.vocab.tag_id(tag)
        else:
            index = self._src.piece_to_id(tag_piece(tag))
            index = index if index >= NUM_SPECIALS and self._src.is_control(index) else None
        if index is None:
            known = ", ".join(self.tags) or "none"
            if self.vocab is not None:
                raise DataError(f"tag {tag}: not a target-language token of this model (its "
                                f"tokens: {known})")
            raise DataError(f"tag {tag}: not a tag of this SentencePiece model (its tags: "
                            f"{known}); tags are the data.train corpora's `tag` values")
        other = copy.copy(self)
        other.source_tag = index
        return other

    @property
    def languages(self) -> tuple[str, ...]:
        """A multilingual model's language codes (empty: a model of one pair)."""
        languages = None if self.vocab is None else self.vocab.languages
        return () if languages is None else languages.codes

    def with_langs(self, src: str | None, tgt: str | None,
                   names: tuple[str, str] = ("src_lang", "tgt_lang")) -> Tokenizer:
        """This tokenizer translating src -> tgt (None: the model's default for that side)
        with a multilingual model (`vocab.Languages`); DataError for a code it lacks, the
        option named by `names`."""
        if src is None and tgt is None:
            return self
        if self.langs is None:
            raise DataError(f"{'/'.join(names)}: this model translates one language pair; a "
                            "pair is chosen only for a multilingual model (M2M100, NLLB)")
        other = copy.copy(self)
        other._choose(src or self.langs[0], tgt or self.langs[1], names)
        return other

    def _choose(self, src: str, tgt: str, names: tuple[str, str] = ("src_lang", "tgt_lang")
                ) -> None:
        languages = self.vocab.languages  # type: ignore[union-attr]  # callers check
        self.source_tag = languages.id_of(src, names[0])
        self.target_start = (languages.id_of(tgt, names[1]),)
        self.langs = (src, tgt)

    # -- encoding and decoding

    def encode_src(self, lines: list[str], sampling: Sampling | None = None) -> list[list[int]]:
        """Token ids per line: the best segmentation, or one sampled (subword sampling)."""
        ids = self._encode(self._src, lines, sampling)
        if self.source_tag is not None:
            ids = [[self.source_tag, *seq] for seq in ids]
        return ids

    def encode_tgt(self, lines: list[str], sampling: Sampling | None = None) -> list[list[int]]:
        """Token ids per line, after `target_start` (a multilingual model's language)."""
        ids = self._encode(self._tgt, lines, sampling)
        if self.target_start:
            ids = [[*self.target_start, *seq] for seq in ids]
        return ids

    def _encode(self, proc: spm.SentencePieceProcessor, lines: list[str],
                sampling: Sampling | None) -> list[list[int]]:
        if self.vocab is not None:
            side = "src" if proc is self._src else "tgt"
            if sampling is None:
                threads = None if len(lines) < FEW_LINES else self._spm_threads()
                return self.vocab.encode(proc, lines, side, threads)
            ids = np.array(self.vocab.ids_of(proc, side))
            return [ids[seq].tolist() for seq in sample_segmentations(
                proc, list(lines), sampling, piece_scores(proc))]
        if sampling is None:
            if len(lines) < FEW_LINES:
                return [proc.encode(line, out_type=int) for line in lines]
            return proc.encode(list(lines), out_type=int, num_threads=self._spm_threads())
        if proc not in self._piece_scores:  # read once, not for every chunk of an epoch
            self._piece_scores[proc] = piece_scores(proc)
        return sample_segmentations(proc, list(lines), sampling, self._piece_scores[proc])

    def spans(self, side: str, line: str) -> list[tuple[int, int] | None]:
        """Where in `line` each id of its best segmentation comes from, laid out as
        `encode_src([line])` (side "src") or `encode_tgt` gives them: (begin, end)
        character offsets of the text of `line` its piece stands for (empty for a piece the
        normaliser added, such as a leading ▁, or for all but the last byte piece of a
        character); None for a tag or language token. Word alignments count the line's own
        whitespace words by these, since normalising can change them (NFKC makes ´ a space
        and an accent; control characters are dropped)."""
        proc = self._src if side == "src" else self._tgt
        lead: list[tuple[int, int] | None] = []
        text, shift = line, 0
        if self.vocab is not None and side == "src" and line.startswith(TAG_OPEN) and (
                end := line.find(TAG_CLOSE)) != -1:  # a >>xx<< token, as Vocabulary.encode
            lead, text, shift = [None], line[end + 2:], end + 2
        if side == "src" and self.source_tag is not None:
            lead = [None, *lead]
        if side == "tgt":
            lead = [None] * len(self.target_start)
        starts = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])  # char -> byte
        pieces = proc.encode(text, return_type="proto").pieces

        def char(offset: int) -> int:  # the character holding byte `offset` of text
            return shift + int(np.searchsorted(starts, offset, side="right")) - 1

        return [*lead, *((char(p.begin), char(p.end - 1) + 1 if p.end > p.begin
                          else char(p.begin)) for p in pieces)]

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Ids to text; special ids (< 4: pad, unk, bos, eos) are left out."""
        return self._decode(self._tgt, "tgt", ids)

    def decode_src(self, ids: list[list[int]]) -> list[str]:
        """Source ids to text, as decode_tgt (word alignments map source pieces to words)."""
        return self._decode(self._src, "src", ids)

    def _decode(self, proc: spm.SentencePieceProcessor, side: str, ids: list[list[int]]
                ) -> list[str]:
        if self.vocab is not None:
            return [self.vocab.decode(proc, seq, side) for seq in ids]
        clean = [[int(i) for i in seq if i >= NUM_SPECIALS] for seq in ids]
        if len(clean) < FEW_LINES:
            return [proc.decode(seq) for seq in clean]
        return proc.decode(clean, num_threads=self._spm_threads())

    def pieces(self, side: str) -> list[str]:
        """The vocabulary of one side ("src" or "tgt"), piece by id."""
        if self.vocab is not None:
            return list(self.vocab.pieces(side))
        proc = self._src if side == "src" else self._tgt
        return [proc.id_to_piece(i) for i in range(proc.vocab_size())]

    def fingerprint(self) -> str:
        """Hex sha256 over the model bytes: equal fingerprints mean identical tokenization."""
        digest = hashlib.sha256(b"joint\0" if self.joint else b"separate\0")
        digest.update(self._src_bytes)
        if self._tgt_bytes is not None:
            digest.update(b"\0tgt\0")
            digest.update(self._tgt_bytes)
        if self._vocab_bytes is not None:
            digest.update(b"\0vocab\0")
            digest.update(self._vocab_bytes)
        return digest.hexdigest()

    def _spm_threads(self) -> int:
        return self.threads if self.threads > 0 else -1  # spm: -1 = all cores


def _read_model(path: Path) -> bytes:
    if path.is_dir():  # a run's tokenizer directory, say: name the models in it
        inside = ", ".join(p.name for p in sorted(path.glob("*.model")))
        raise DataError(f"{path}: is a directory, expected a SentencePiece model file"
                        + (f" (it holds {inside})" if inside else ""))
    if not path.is_file():
        raise DataError(f"{path}: tokenizer model not found")
    return path.read_bytes()


def _load_processor(blob: bytes, name: str, mtkit_ids: bool = True) -> spm.SentencePieceProcessor:
    """The model; with `mtkit_ids`, checked to hold mtkit's special pieces at their ids."""
    error = CheckpointError if name.startswith("checkpoint") else DataError
    try:
        processor = spm.SentencePieceProcessor(model_proto=blob)
    except (RuntimeError, OSError):
        raise error(f"{name}: not a SentencePiece model (corrupt or truncated file?)") from None
    for index, piece in SPECIALS.values() if mtkit_ids else ():
        if processor.vocab_size() <= index or processor.id_to_piece(index) != piece:
            raise error(
                f"{name}: SentencePiece model lacks {piece} at id {index}; "
                "train it with mtkit (or with pad_id=0, unk_id=1, bos_id=2, eos_id=3)"
            )
    return processor


VOCAB_FILE = "vocab.json"  # beside the SentencePiece model(s): an explicit vocabulary
