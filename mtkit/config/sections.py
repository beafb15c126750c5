"""The recipe's sections: typed, frozen dataclasses, one per top-level key of a recipe.

What a field needs beyond its type is declared beside it, in its metadata:

- `between(low, high)` (fields.py): the range of a number (or of each item of a tuple);
- `"parse": f`: `f` reads the raw value before type checking (durations);
- `"doc"`: one line on what the key does, for the recipe-key reference;
- a field typed by a class with a `parse` classmethod (e.g. `Average`) is read from one
  YAML scalar by calling it, and written back with `str()`;
- a section's `check()` method holds the rules between its fields (`Recipe.check`
  those between sections); it raises ValueError naming the dotted keys.

The decode section is decode.py's, the helpers of field metadata fields.py's.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from mtkit.config.decode import DecodeConfig
from mtkit.config.fields import SEED_MAX, between, doc

_AVERAGE = re.compile(r"(best|last)-([1-9]\d*)|none")
# a number (1e3 too: YAML 1.1 leaves it text) and an optional unit
_DURATION = re.compile(r"^\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float) -> float:
    """'90m' -> 5400.0; plain numbers are seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"expected seconds or a duration like 90m or 2h, got {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass(frozen=True)
class Average:
    """Which checkpoints model.pt averages; written "last-5", "best-3" or "none"."""

    kind: Literal["last", "best", "none"]
    k: int = 0

    @classmethod
    def parse(cls, text: str) -> Average:
        match = _AVERAGE.fullmatch(text) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"expected best-K, last-K (K >= 1) or none, got {text!r}")
        return cls(match[1], int(match[2])) if match[1] else cls("none")

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}-{self.k}"


def is_value_type(tp: Any) -> bool:
    """A class written as one YAML scalar: read by its `parse` classmethod, written by str()."""
    return isinstance(tp, type) and callable(getattr(tp, "parse", None))


# --------------------------------------------------------------------------- data


def parse_lang(value: Any) -> Any:
    """A language code: it names files (eval/test.es.hyp.CODE) and API fields, so it is
    one short word."""
    if isinstance(value, str) and not (0 < len(value) <= 32 and value.isprintable()
                                       and not any(c in value for c in " /\\")):
        raise ValueError(f"{value!r} is not a language code; give one like en, pt-BR or "
                         "spa_Latn")
    return value


@dataclass(frozen=True)
class Langs:
    src: str = field(default="src", metadata={"parse": parse_lang, **doc(
        "source language code, as the serving API names it")})
    tgt: str = field(default="tgt", metadata={"parse": parse_lang, **doc(
        "target language code; also picks sacrebleu's BLEU tokenizer (zh, ja, ko)")})


@dataclass(frozen=True)
class Pair:
    """A parallel corpus: line N of `src` translates line N of `tgt`."""

    src: Path = field(metadata=doc("source-side text file, one sentence a line"))
    tgt: Path = field(metadata=doc("target-side text file, line N translating line N of src"))


# reserved by the tokenizer's own symbols <pad>, <unk>, <s> (see tokenizer.SPECIALS)
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TAKEN_TAGS = ("pad", "unk", "s")


def parse_tag(value: Any) -> str | None:
    """A corpus tag: a short name, written into the source as the control symbol <NAME>."""
    if value is None:
        return None
    if not isinstance(value, str) or not _TAG.fullmatch(value) or len(value) > 32:
        raise ValueError(f"{value!r} is not a valid tag; use up to 32 letters, digits, '_', "
                         "'-' or '.', e.g. BT")
    if value.lower() in _TAKEN_TAGS:
        raise ValueError(f"{value!r} is taken by the tokenizer's <{value}>; choose another name")
    return value


def parse_weight(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        raise ValueError(f"{value} is not above 0; a corpus is sampled size x weight times "
                         "an epoch (leave a corpus out to not use it)")
    return value


@dataclass(frozen=True)
class Corpus:
    """A training corpus. An epoch samples round(pairs x weight) of its pairs (weight 4:
    each pair 4 times; 0.5: a fresh half each epoch); `tag` marks its source lines with
    the control symbol <tag> (e.g. back-translated text, Caswell et al. 2019)."""

    src: Path = field(metadata=doc("source-side text file, one sentence a line"))
    tgt: Path = field(metadata=doc("target-side text file, line N translating line N of src"))
    weight: float = field(default=1.0, metadata={"parse": parse_weight, **between(
        0.0, doc="an epoch samples round(pairs x weight) of its pairs", above=True)})
    tag: str | None = field(default=None, metadata={"parse": parse_tag, **doc(
        "marks its source lines with the control symbol `<tag>` (e.g. BT for back-translation)")})
    alignments: Path | None = field(default=None, metadata=doc(
        "word links of each pair, `i-j` (Pharaoh, as fast_align or eflomal write them), one "
        "line per pair: guided-alignment training (train.alignment_weight)"))


@dataclass(frozen=True)
class DataConfig:
    train: tuple[Corpus, ...] = field(metadata=doc(
        "one corpus {src, tgt} or a list of {src, tgt, weight, tag}"))
    valid: Pair | None = field(default=None, metadata=doc(
        "dev set {src, tgt}: validation loss and BLEU, and tuning in the eval stage"))
    test: tuple[Pair, ...] = field(default=(), metadata=doc(
        "test sets {src, tgt} (one or a list) that the eval stage translates and scores"))
    langs: Langs = field(default=Langs(), metadata=doc("the language codes {src, tgt}"))
    max_len: int = field(default=256, metadata=between(
        1, doc="training pairs longer than this (in tokens, either side) are dropped"))
    max_ratio: float = field(default=3.0, metadata=between(
        1.0, doc="training pairs whose token-length ratio exceeds this are dropped"))

    # A recipe file lists at least one corpus (loader.load_recipe checks it); a bundle's
    # recipe may list none: an imported model was trained elsewhere.

    @property
    def tags(self) -> tuple[str, ...]:
        """The training corpora's tags, sorted, each once: the tokenizer's control symbols."""
        return tuple(sorted({c.tag for c in self.train if c.tag is not None}))


# --------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class TokenizerConfig:
    kind: Literal["sentencepiece", "vocab"] = field(default="sentencepiece", metadata=doc(
        "sentencepiece: the ids are the SentencePiece model's own; vocab: an imported "
        "model's explicit vocabulary maps the pieces to ids (mtkit import sets it, "
        "fine-tuning keeps it)"))
    model_type: Literal["unigram", "bpe"] = field(default="unigram", metadata=doc(
        "the kind of SentencePiece model trained on the training text"))
    vocab_size: int = field(default=8000, metadata=between(
        8, 1_000_000, doc="pieces in the vocabulary (of each, when not joint)"))
    joint: bool = field(default=True, metadata=doc(
        "one model for both languages (needed for model.tie_embeddings: all); with kind "
        "vocab: one vocabulary"))
    # SentencePiece itself refuses a coverage below 0.98
    character_coverage: float = field(default=0.9995, metadata=between(
        0.98, 1.0,
        doc="share of the text's characters the vocabulary covers; the rest are `<unk>`"))
    input_sentence_size: int = field(default=1_000_000, metadata=between(
        0, doc="lines sampled for training the model; 0 = all"))
    seed: int = field(default=1, metadata=between(0, SEED_MAX, doc="seed of that sample"))
    model: Path | None = field(default=None, metadata=doc(
        "a SentencePiece model to use as it is: a .model file (joint) or a run's tokenizer "
        "directory (spm.model, or spm.src.model and spm.tgt.model)"))
    # subword regularisation (Kudo 2018): dev and test are never sampled
    sample_alpha: float = field(default=0.0, metadata=between(
        0.0, 1.0, doc="> 0: segment the training text afresh each epoch, drawing from the 16 "
        "best segmentations with p ~ P^sample_alpha (unigram only)"))

    # what changes the SentencePiece model itself (the rest changes only how it is used)
    model_fields: ClassVar[tuple[str, ...]] = (
        "model_type", "vocab_size", "joint", "character_coverage", "input_sentence_size", "seed",
    )

    def check(self) -> None:
        if self.sample_alpha and self.model_type != "unigram":
            raise ValueError("tokenizer.sample_alpha samples a unigram model's segmentations: "
                             "set tokenizer.model_type: unigram, or sample_alpha: 0")


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    enc_layers: int = field(default=6, metadata=between(1, 64, doc="encoder layers"))
    dec_layers: int = field(default=6, metadata=between(1, 64, doc="decoder layers"))
    d_model: int = field(default=512, metadata=between(
        2, 65536, doc="width of embeddings and of every layer's output"))
    heads: int = field(default=8, metadata=between(
        1, 1024, doc="attention heads; d_model / heads must be even"))
    ffn_dim: int = field(default=2048, metadata=between(1, doc="inner width of feed-forward"))
    dropout: float = field(default=0.1, metadata=between(
        0.0, 0.99, doc="dropout on the embeddings and on each sublayer's output"))
    attn_dropout: float = field(default=0.0, metadata=between(
        0.0, 0.99, doc="dropout on attention weights"))
    activation: Literal["relu", "swiglu", "swish"] = field(default="relu", metadata=doc(
        "feed-forward activation: relu, swiglu (gated, no biases) or swish (SiLU, not "
        "gated, as Marian's)"))
    norm: Literal["pre", "post"] = field(default="pre", metadata=doc(
        "layer norm before each sublayer (pre) or after its residual sum (post)"))
    positions: Literal["sinusoidal", "learned"] = field(default="sinusoidal", metadata=doc(
        "position embeddings"))
    position_layout: Literal["interleaved", "halves", "fairseq"] = field(
        default="interleaved", metadata=doc(
            "columns of the sinusoidal table: sine and cosine interleaved (mtkit's), the "
            "sine half then the cosine half (Marian's), or fairseq's halves (M2M100, NLLB: "
            "frequencies over d_model/2 - 1, position t at row pad + 1 + t)"))
    scale_embeddings: bool = field(default=True, metadata=doc(
        "multiply token embeddings by sqrt(d_model) before adding the positions"))
    output_bias: bool = field(default=False, metadata=doc(
        "a learned bias added to the output logits (Marian's final_logits_bias)"))
    tie_embeddings: Literal["all", "decoder", "none"] = field(default="all", metadata=doc(
        "share weights: source, target and output embeddings (all; needs a joint "
        "tokenizer), target and output (decoder), or none"))
    max_positions: int = field(default=1024, metadata=between(
        8, 1_000_000, doc="positions the model holds: its longest sequence, in tokens"))

    def check(self) -> None:
        # attention splits d_model into `heads` equal parts (so d_model is even too)
        if self.d_model % self.heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})"
            )
        if (self.d_model // self.heads) % 2:
            raise ValueError("model.d_model / model.heads must be even")
        if self.position_layout != "interleaved" and self.positions != "sinusoidal":
            raise ValueError("model.position_layout orders the columns of a sinusoidal table: "
                             "set model.positions: sinusoidal, or leave position_layout out")


# --------------------------------------------------------------------------- train


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: int = field(default=4096, metadata=between(
        16, doc="tokens per batch on one device, padding included"))
    update_freq: int = field(default=1, metadata=between(
        1, doc="batches whose gradients add up to one update"))
    # so one recipe trains alike on 1 or 8 devices
    tokens_per_update: int = field(default=0, metadata=between(
        0, doc="tokens per update, padding included: sets update_freq for the job's world "
        "size (max_tokens x update_freq x world_size); 0 = use update_freq"))
    lr: float = field(default=5e-4, metadata=between(0.0, 10.0, doc="peak learning rate"))
    warmup_steps: int = field(default=4000, metadata=between(
        0, doc="updates of linear warmup to lr"))
    schedule: Literal["inverse-sqrt", "linear", "cosine", "wsd"] = field(
        default="inverse-sqrt", metadata=doc(
            "after the warmup: inverse-sqrt (no floor), or linear, cosine or wsd down to "
            "min_lr at max_steps, or within max_time (at an update estimated from the "
            "speed and revised at each validation)"))
    min_lr: float = field(default=0.0, metadata=between(
        0.0, 10.0, doc="the learning rate that linear, cosine and wsd end at"))
    decay_fraction: float = field(default=0.2, metadata=between(
        0.0, 1.0, doc="the share of the updates that wsd spends decaying"))
    label_smoothing: float = field(default=0.1, metadata=between(
        0.0, 0.99, doc="probability mass spread over the vocabulary in the loss"))
    alignment_weight: float = field(default=0.1, metadata=between(
        0.0, doc="weight of the guided-alignment loss (Garg et al., 2019) on the "
        "decode.alignment_layer's cross-attention, for corpora that give `alignments`"))
    # torch's Adam takes 0 <= beta < 1
    adam_betas: tuple[float, float] = field(default=(0.9, 0.98), metadata=between(
        0.0, 0.999999, doc="Adam's two decay rates"))
    adam_eps: float = field(default=1e-8, metadata=between(0.0, 1.0, doc="Adam's epsilon"))
    weight_decay: float = field(default=0.0, metadata=between(
        0.0, doc="decoupled weight decay (AdamW)"))
    clip_norm: float = field(default=0.0, metadata=between(
        0.0, doc="clip the gradient norm to this; 0 = no clipping"))
    max_steps: int = field(default=0, metadata=between(0, doc="updates; 0 = no limit"))
    max_epochs: int = field(default=0, metadata=between(0, doc="epochs; 0 = no limit"))
    max_time: float = field(default=0.0, metadata={"parse": parse_duration, **between(
        0, doc="seconds of training wall clock (90m, 2h accepted); 0 = no limit")})
    seed: int = field(default=1, metadata=between(
        0, SEED_MAX, doc="seed of initialisation, batching and dropout"))
    log_every: int = field(default=50, metadata=between(1, doc="updates between log lines"))
    save_every: int = field(default=1000, metadata=between(
        1, doc="updates between checkpoints"))
    keep_last: int = field(default=5, metadata=between(
        0, doc="step checkpoints kept on disk"))
    valid_every: int = field(default=1000, metadata=between(
        1, doc="updates between validations"))
    valid_bleu_lines: int = field(default=500, metadata=between(
        0, doc="dev lines translated for BLEU at each validation; 0 = loss only"))
    best_metric: Literal["bleu", "loss"] = field(default="bleu", metadata=doc(
        "what picks the best checkpoint"))
    patience: int = field(default=0, metadata=between(
        0, doc="validations without improvement before stopping; 0 = never"))
    # an average is kept only if it beats the best on dev
    average: Average = field(default=Average("last", 5), metadata=doc(
        "what model.pt is: the average of the last-K step checkpoints, of the best-K by dev score "
        "(kept on disk for it), or none (checkpoint_best.pt)"))
    precision: Literal["auto", "fp32", "bf16"] = field(default="auto", metadata=doc(
        "arithmetic of the forward and backward passes (weights and optimiser stay fp32); "
        "auto: bf16 where a matmul probe at start finds it at least twice as fast as fp32 "
        "(CPUs with AMX) or on a CUDA GPU with bf16, fp32 elsewhere"))
    compile: bool = field(default=False, metadata=doc(
        "torch.compile the training forward and backward"))
    threads: int = field(default=0, metadata=between(
        0, 1024, doc="CPU threads of torch; 0 = torch's default"))
    max_bad_steps: int = field(default=5, metadata=between(
        1, doc="consecutive non-finite losses before training stops"))
    dist_timeout: float = field(default=600.0, metadata={"parse": parse_duration, **between(
        1, doc="under torchrun: how long a collective waits for a rank before the job ends")})
    # the model section must match the parent's
    init_from: Path | None = field(default=None, metadata=doc(
        "a model bundle to fine-tune: its weights and SentencePiece model, with a fresh "
        "optimiser and schedule"))
    ema: float = field(default=0.0, metadata=between(
        0.0, 0.999999, doc="decay of a moving average of the weights (e.g. 0.999), saved as "
        "checkpoint_ema.pt, a candidate for model.pt; 0 = off"))

    def check(self) -> None:
        if self.schedule != "inverse-sqrt" and not (self.max_steps or self.max_time):
            raise ValueError(f"train.schedule {self.schedule} decays to train.min_lr at a "
                             "horizon: set train.max_steps or train.max_time")
        if self.min_lr > self.lr:
            raise ValueError(f"train.min_lr ({self.min_lr:g}) must not exceed train.lr "
                             f"({self.lr:g})")


# --------------------------------------------------------------------------- the recipe


@dataclass(frozen=True)
class Recipe:
    data: DataConfig = field(metadata=doc("the corpora and their filters"))
    tokenizer: TokenizerConfig = field(default=TokenizerConfig(), metadata=doc(
        "the SentencePiece model"))
    model: ModelConfig = field(default=ModelConfig(), metadata=doc("the Transformer"))
    train: TrainConfig = field(default=TrainConfig(), metadata=doc(
        "optimisation, checkpoints and stopping"))
    decode: DecodeConfig = field(default=DecodeConfig(), metadata=doc(
        "beam search or sampling"))
    name: str = field(default="recipe", metadata={"internal": True})
    # the sections a fine-tuning recipe file leaves out, to be its parent's (train.init_from)
    inherited: tuple[str, ...] = field(default=(), metadata={"internal": True})

    def check(self) -> None:
        # a section left to the parent holds defaults until the parent is read: what
        # depends on one is checked then, with the parent's (finetune.load_parent)
        model, tokenizer = ("model" not in self.inherited, "tokenizer" not in self.inherited)
        if model and self.decode.alignment_index(self.model.dec_layers) is None:
            raise ValueError(self.decode.alignment_layer_error(self.model.dec_layers))
        if self.tokenizer.kind == "vocab" and (self.tokenizer.model is not None or (
                self.data.train and self.train.init_from is None)):
            raise ValueError("tokenizer.kind: vocab is an imported model's vocabulary: "
                             "fine-tune one with train.init_from (a model `mtkit import` "
                             "wrote), without tokenizer.model")
        if self.train.init_from is not None and self.tokenizer.model is not None:
            raise ValueError("tokenizer.model: train.init_from brings the parent's "
                             "SentencePiece model; leave tokenizer.model out")
        if tokenizer and self.tokenizer.sample_alpha and any(c.alignments for c in
                                                             self.data.train):
            raise ValueError("data.train alignments: word links fix one segmentation; leave "
                             "them out or set tokenizer.sample_alpha: 0")
        if model and tokenizer and self.model.tie_embeddings == "all" and not self.tokenizer.joint:
            raise ValueError(
                "model.tie_embeddings: 'all' needs tokenizer.joint: true "
                "(one vocabulary); use 'decoder' or 'none' with separate vocabularies"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-safe values (paths as strings), as stored in checkpoints."""
        raw = plain(self)
        raw.pop("name")
        raw.pop("inherited")
        return raw

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def plain(value: Any) -> Any:
    """YAML-safe values: sections as mappings, tuples as lists, paths and value types as text."""
    if isinstance(value, Path) or is_value_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
