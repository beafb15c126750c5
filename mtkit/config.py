"""Recipes: typed, frozen dataclasses loaded from YAML and validated once, here.

Code below this module receives plain typed values. Every error names the file,
the dotted key and what is wrong, in one line.

The loader walks the dataclass types and knows no key by name. What a field needs
beyond its type is declared beside it:

- `metadata=between(low, high)`: the range of a number (or of each item of a tuple);
- `metadata={"parse": f}`: `f` reads the raw value before type checking (durations);
- a field typed by a class with a `parse` classmethod (e.g. `Average`) is read from one
  YAML scalar by calling it, and written back with `str()`;
- a section's `old_keys` class variable maps keys of earlier versions to today's;
- a section's `check()` method holds the rules between its fields (`Recipe.check`
  those between sections); it raises ValueError naming the dotted keys.

`replace_checked` applies command-line options to a section with the same checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from mtkit.errors import ConfigError


def between(low: float | None, high: float | None = None) -> dict[str, Any]:
    """Field metadata: the inclusive range of a number; None = unbounded.

    Every number declares one (a test checks it): `between(None)` says "any value" on purpose.
    """
    return {"range": (low, high)}


_AVERAGE = re.compile(r"(best|last)-([1-9]\d*)|none")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
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


# --------------------------------------------------------------------------- the sections


@dataclass(frozen=True)
class Langs:
    src: str = "src"
    tgt: str = "tgt"


@dataclass(frozen=True)
class Pair:
    """A parallel corpus: line N of `src` translates line N of `tgt`."""

    src: Path
    tgt: Path


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

    src: Path
    tgt: Path
    weight: float = field(default=1.0, metadata={"parse": parse_weight, **between(0.0)})
    tag: str | None = field(default=None, metadata={"parse": parse_tag})


@dataclass(frozen=True)
class DataConfig:
    # one corpus {src, tgt} or a list of {src, tgt, weight, tag}
    train: tuple[Corpus, ...]
    valid: Pair | None = None
    test: tuple[Pair, ...] = ()
    langs: Langs = Langs()
    # training pairs longer than this (in tokens, either side) are dropped
    max_len: int = field(default=256, metadata=between(1))
    # training pairs whose token-length ratio exceeds this are dropped
    max_ratio: float = field(default=3.0, metadata=between(1.0))

    def check(self) -> None:
        if not self.train:
            raise ValueError("data.train: list at least one corpus {src, tgt}")

    @property
    def tags(self) -> tuple[str, ...]:
        """The training corpora's tags, sorted, each once: the tokenizer's control symbols."""
        return tuple(sorted({c.tag for c in self.train if c.tag is not None}))


@dataclass(frozen=True)
class TokenizerConfig:
    model_type: Literal["unigram", "bpe"] = "unigram"
    vocab_size: int = field(default=8000, metadata=between(8, 1_000_000))
    joint: bool = True  # one model for both languages (needed for tie_embeddings: all)
    character_coverage: float = field(default=0.9995, metadata=between(0.9, 1.0))
    # lines sampled for training; 0 = all
    input_sentence_size: int = field(default=1_000_000, metadata=between(0))
    seed: int = field(default=1, metadata=between(None))
    # a SentencePiece model to use as it is instead of training one: a .model file (joint)
    # or a tokenizer directory of a run (spm.model, or spm.src.model and spm.tgt.model)
    model: Path | None = None
    # subword regularisation (Kudo 2018): > 0 segments the training text afresh each epoch,
    # drawing from the 16 best segmentations with p ~ P^sample_alpha (unigram models only);
    # dev and test never
    sample_alpha: float = field(default=0.0, metadata=between(0.0, 1.0))

    # what changes the SentencePiece model itself (the rest changes only how it is used)
    model_fields: ClassVar[tuple[str, ...]] = (
        "model_type", "vocab_size", "joint", "character_coverage", "input_sentence_size", "seed",
    )

    def check(self) -> None:
        if self.sample_alpha and self.model_type != "unigram":
            raise ValueError("tokenizer.sample_alpha samples a unigram model's segmentations: "
                             "set tokenizer.model_type: unigram, or sample_alpha: 0")


@dataclass(frozen=True)
class ModelConfig:
    enc_layers: int = field(default=6, metadata=between(1, 64))
    dec_layers: int = field(default=6, metadata=between(1, 64))
    d_model: int = field(default=512, metadata=between(2, 65536))
    heads: int = field(default=8, metadata=between(1, 1024))
    ffn_dim: int = field(default=2048, metadata=between(1))
    dropout: float = field(default=0.1, metadata=between(0.0, 0.99))
    attn_dropout: float = field(default=0.0, metadata=between(0.0, 0.99))
    activation: Literal["relu", "swiglu"] = "relu"
    norm: Literal["pre", "post"] = "pre"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    tie_embeddings: Literal["all", "decoder", "none"] = "all"
    max_positions: int = field(default=1024, metadata=between(8, 1_000_000))

    def check(self) -> None:
        # attention splits d_model into `heads` equal parts (so d_model is even too)
        if self.d_model % self.heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})"
            )
        if (self.d_model // self.heads) % 2:
            raise ValueError("model.d_model / model.heads must be even")


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: int = field(default=4096, metadata=between(16))
    update_freq: int = field(default=1, metadata=between(1))
    # tokens per update, padding included: sets update_freq for the job's world size
    # (max_tokens x update_freq x world_size), so one recipe trains alike on 1 or 8 devices
    tokens_per_update: int = field(default=0, metadata=between(0))  # 0 = use update_freq
    lr: float = field(default=5e-4, metadata=between(0.0, 10.0))
    warmup_steps: int = field(default=4000, metadata=between(0))
    # after the warmup: inverse-sqrt (never reaches a floor), or linear / cosine / wsd
    # down to min_lr at the horizon: max_steps, or an estimate from max_time (schedule.py)
    schedule: Literal["inverse-sqrt", "linear", "cosine", "wsd"] = "inverse-sqrt"
    min_lr: float = field(default=0.0, metadata=between(0.0, 10.0))
    decay_fraction: float = field(default=0.2, metadata=between(0.0, 1.0))  # wsd's decay
    label_smoothing: float = field(default=0.1, metadata=between(0.0, 0.99))
    adam_betas: tuple[float, float] = field(default=(0.9, 0.98), metadata=between(None))
    adam_eps: float = field(default=1e-8, metadata=between(0.0, 1.0))
    weight_decay: float = field(default=0.0, metadata=between(0.0))
    clip_norm: float = field(default=0.0, metadata=between(0.0))
    max_steps: int = field(default=0, metadata=between(0))  # 0 = no limit
    max_epochs: int = field(default=0, metadata=between(0))  # 0 = no limit
    # seconds of training wall clock; 0 = no limit ("90m", "2h" accepted)
    max_time: float = field(default=0.0, metadata={"parse": parse_duration, **between(0)})
    seed: int = field(default=1, metadata=between(None))
    log_every: int = field(default=50, metadata=between(1))
    save_every: int = field(default=1000, metadata=between(1))
    keep_last: int = field(default=5, metadata=between(0))
    valid_every: int = field(default=1000, metadata=between(1))
    valid_bleu_lines: int = field(default=500, metadata=between(0))  # 0 = no BLEU in validation
    best_metric: Literal["bleu", "loss"] = "bleu"
    # validations without improvement before stopping; 0 = never
    patience: int = field(default=0, metadata=between(0))
    # model.pt: "last-K" step checkpoints, "best-K" by dev score (kept on disk for it)
    # or "none" (checkpoint_best.pt); an average is kept only if it beats the best on dev
    average: Average = Average("last", 5)
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: bool = False  # torch.compile the training forward/backward
    threads: int = field(default=0, metadata=between(0, 1024))  # 0 = torch's default
    # consecutive non-finite losses before training stops
    max_bad_steps: int = field(default=5, metadata=between(1))
    # under torchrun: how long a collective may wait for a rank before the job ends
    dist_timeout: float = field(default=600.0, metadata={"parse": parse_duration, **between(1)})
    # a model bundle to start from (fine-tuning): its weights and SentencePiece model, with
    # a fresh optimiser and schedule; the model section must match the parent's
    init_from: Path | None = None
    # decay of an exponential moving average of the weights (e.g. 0.999), validated and
    # saved as checkpoint_ema.pt, a candidate for model.pt; 0 = off
    ema: float = field(default=0.0, metadata=between(0.0, 0.999999))

    # keys of earlier versions, which models on disk still carry in their recipe:
    # old key -> (today's key, converter of the old value)
    old_keys: ClassVar[dict[str, tuple[str, Callable[[Any], Any]]]] = {
        "average_last": ("average", lambda k: "none" if k in (0, 1) else f"last-{k}"),
    }

    def check(self) -> None:
        if self.schedule != "inverse-sqrt" and not (self.max_steps or self.max_time):
            raise ValueError(f"train.schedule {self.schedule} decays to train.min_lr at a "
                             "horizon: set train.max_steps or train.max_time")
        if self.min_lr > self.lr:
            raise ValueError(f"train.min_lr ({self.min_lr:g}) must not exceed train.lr "
                             f"({self.lr:g})")


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = field(default=5, metadata=between(1, 1000))
    lenpen: float = field(default=1.0, metadata=between(0.0, 10.0))
    # when a sentence's beam search ends, once the n-best has finished: early = when no
    # live hypothesis would beat it by ending at the next step; exact = when none could,
    # at any length up to the cap; top = when none has a higher log-probability than the
    # best finished one (length penalty aside: CTranslate2's rule, in effect)
    stop: Literal["early", "exact", "top"] = "early"
    nbest: int = field(default=1, metadata=between(1, 1000))  # translations per sentence
    max_len_a: float = field(default=1.2, metadata=between(0.0))
    max_len_b: int = field(default=10, metadata=between(0))
    # when set, the eval stage tries every beam x lenpen on the dev set and decodes the
    # test sets with the best; beam / lenpen fill in for an empty list
    tune_beam: tuple[int, ...] = field(default=(), metadata=between(1, 1000))
    tune_lenpen: tuple[float, ...] = field(default=(), metadata=between(0.0, 10.0))

    def check(self) -> None:
        # the n best come out of the beam
        if self.nbest > self.beam:
            raise ValueError(
                f"decode.nbest ({self.nbest}) must not exceed decode.beam ({self.beam})"
            )


@dataclass(frozen=True)
class Recipe:
    data: DataConfig
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()
    name: str = field(default="recipe", metadata={"internal": True})

    def check(self) -> None:
        if self.train.init_from is not None and self.tokenizer.model is not None:
            raise ValueError("tokenizer.model: train.init_from brings the parent's "
                             "SentencePiece model; leave tokenizer.model out")
        if self.model.tie_embeddings == "all" and not self.tokenizer.joint:
            raise ValueError(
                "model.tie_embeddings: 'all' needs tokenizer.joint: true "
                "(one vocabulary); use 'decoder' or 'none' with separate vocabularies"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-safe values (paths as strings), as stored in checkpoints."""
        raw = _plain(self)
        raw.pop("name")
        return raw

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------- loading


def load_recipe(
    path: str | Path, overrides: list[str] = (), check_files: bool = True
) -> Recipe:
    """Read a YAML recipe, apply `key=value` overrides, validate, return a Recipe."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: recipe not found; check the path")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{where}: YAML syntax error: {problem}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: recipe is not UTF-8 text") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of sections (data, model, ...)")
    apply_overrides(raw, overrides, where=str(path))
    recipe = recipe_from_dict(raw, base_dir=path.parent, where=str(path), name=path.stem)
    if check_files:
        check_data_files(recipe, where=str(path))
    return recipe


def recipe_from_dict(
    raw: dict[str, Any], base_dir: Path = Path("."), where: str = "recipe", name: str = "recipe"
) -> Recipe:
    raw = dict(raw)
    if "name" in raw:
        raise ConfigError(f"{where}: {_unknown_key('name', _field_types(Recipe), '')}")
    raw["name"] = name
    return _build(Recipe, raw, key="", ctx=_Context(where, base_dir))


def changed_fields(old: Any, new: Any) -> list[str]:
    """The fields in which two values of one recipe section differ, in field order."""
    return [f.name for f in dataclasses.fields(new) if getattr(old, f.name) != getattr(new, f.name)]


def replace_checked(
    section: Any,
    changes: dict[str, Any],
    names: dict[str, str] | None = None,
    where: str = "command line",
) -> Any:
    """`dataclasses.replace(section, **changes)`, checked as if the changes came from YAML.

    None in `changes` means "not given". `names` maps fields to the command-line flags
    that set them, so that errors name the flag: "--beam 0: 0 is out of range; ...".
    """
    names = names or {}
    prefix = _section_key(type(section))
    fields = {f.name: f for f in dataclasses.fields(section)}
    hints = _field_types(type(section))
    values = {}
    for name, value in changes.items():
        if value is None:
            continue
        if name not in fields:
            raise TypeError(f"{type(section).__name__} has no field {name!r}")  # a bug
        flag = names.get(name)
        ctx = _Context(where, Path.cwd(), label=f"{flag} {value}" if flag else None)
        values[name] = _read_field(fields[name], hints[name], value, f"{prefix}.{name}", ctx)
    new = dataclasses.replace(section, **values)
    try:
        _check(new)
    except ValueError as exc:
        # "decode.beam" in the message becomes "--beam" where a flag is named
        flagged = re.sub(rf"\b{prefix}\.(\w+)", lambda m: names.get(m[1], m[0]), str(exc))
        raise ConfigError(flagged if flagged != str(exc) else f"{where}: {exc}") from None
    return new


def apply_overrides(raw: dict[str, Any], overrides: list[str], where: str) -> None:
    """Apply `--set a.b=value` overrides in place; values are parsed as YAML scalars."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item}: expected key=value, e.g. --set train.lr=0.001")
        key, _, text = item.partition("=")
        parts = key.strip().split(".")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"--set {item}: cannot parse the value {text!r}") from None
        leaf_type = _check_override_key(parts, item)
        if _strip_optional(leaf_type) is Path and isinstance(value, str) and value:
            # a path typed on the command line is relative to where the user stands
            value = str(Path(value).expanduser().absolute())
        node = raw
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if isinstance(child, list) and len(child) == 1 and isinstance(child[0], dict):
                child = child[0]  # a list of one: its only item
            elif isinstance(child, list):
                dotted = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {item}: {dotted} is a list of {len(child)}; "
                                  "edit its items in the recipe")
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value


def _check_override_key(parts: list[str], item: str) -> Any:
    """Check that the dotted key exists; return the type of the field it names."""
    cls: Any = Recipe
    for depth, part in enumerate(parts):
        hints = _field_types(cls)
        if part not in hints or part == "name":
            dotted = ".".join(parts[:depth])
            raise ConfigError(f"--set {item}: {_unknown_key(part, hints, dotted)}")
        cls = _strip_optional(hints[part])
        if typing.get_origin(cls) is tuple and dataclasses.is_dataclass(typing.get_args(cls)[0]):
            cls = typing.get_args(cls)[0]  # a list of one written as its mapping (data.train)
        is_section = dataclasses.is_dataclass(cls) and not _is_value_type(cls)
        if not is_section and depth < len(parts) - 1:
            raise ConfigError(f"--set {item}: {'.'.join(parts[: depth + 1])} has no sub-keys")
    return cls


def check_data_files(recipe: Recipe, where: str) -> None:
    pairs: list[tuple[str, Pair | Corpus | None]]
    pairs = [(f"data.train[{i}]" if len(recipe.data.train) > 1 else "data.train", c)
             for i, c in enumerate(recipe.data.train)]
    pairs += [("data.valid", recipe.data.valid)]
    pairs += [(f"data.test[{i}]", p) for i, p in enumerate(recipe.data.test)]
    given = recipe.tokenizer.model
    if given is not None and not given.exists():
        raise ConfigError(f"{where}: tokenizer.model: not found: {given}")
    for key, pair in pairs:
        if pair is None:
            continue
        for side in ("src", "tgt"):
            file = getattr(pair, side)
            if not file.is_file():
                raise ConfigError(f"{where}: {key}.{side}: data file not found: {file}")


# --------------------------------------------------------------------------- the type walker


@dataclass
class _Context:
    where: str
    base_dir: Path  # relative paths are resolved against it
    label: str | None = None  # replaces "where: key" in errors (a flag and its value)

    def fail(self, key: str, problem: str) -> ConfigError:
        head = self.label or f"{self.where}: {key}"
        return ConfigError(f"{head}: {problem}")


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _section_key(cls: type) -> str:
    for name, tp in _field_types(Recipe).items():
        if tp is cls:
            return name
    raise TypeError(f"{cls.__name__} is not a recipe section")  # a bug, not user error


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if _is_union(tp) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _is_value_type(tp: Any) -> bool:
    """A class written as one YAML scalar: read by its `parse` classmethod, written by str()."""
    return isinstance(tp, type) and callable(getattr(tp, "parse", None))


def _unknown_key(key: str, known: dict[str, Any], parent: str) -> str:
    names = [k for k in known if k != "name"]
    where = f"{parent}.{key}" if parent else key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(names)}"
    return f"unknown key '{where}'; {hint}"


def _check(obj: Any) -> None:
    if hasattr(obj, "check"):
        obj.check()


def _build(cls: type, raw: Any, key: str, ctx: _Context) -> Any:
    if not isinstance(raw, dict):
        raise ctx.fail(key or "recipe", f"expected a mapping, got {_show(raw)}")
    for old, (new, convert) in getattr(cls, "old_keys", {}).items():
        if old in raw:
            if new in raw:
                raise ConfigError(f"{ctx.where}: {key}.{old} is the old name of {key}.{new}; "
                                  f"keep only {key}.{new}")
            raw = dict(raw)
            raw[new] = convert(raw.pop(old))
    hints = _field_types(cls)
    for name in raw:
        if name not in hints or (name == "name" and key):
            raise ConfigError(f"{ctx.where}: {_unknown_key(str(name), hints, key)}")
    values = {}
    for f in dataclasses.fields(cls):
        dotted = f"{key}.{f.name}" if key else f.name
        if f.name in raw:
            values[f.name] = _read_field(f, hints[f.name], raw[f.name], dotted, ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.fail(dotted, "required key is missing")
    obj = cls(**values)
    try:
        _check(obj)
    except ValueError as exc:
        raise ConfigError(f"{ctx.where}: {exc}") from None
    return obj


def _read_field(f: dataclasses.Field, tp: Any, value: Any, key: str, ctx: _Context) -> Any:
    """One field's value: its own parser first (if it declares one), then type and range."""
    if "parse" in f.metadata:
        try:
            value = f.metadata["parse"](value)
        except ValueError as exc:
            raise ctx.fail(key, str(exc)) from None
    return _coerce(tp, value, key, ctx, f.metadata.get("range"))


def _coerce(tp: Any, value: Any, key: str, ctx: _Context, bounds: tuple | None = None) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        return _coerce(_strip_optional(tp), value, key, ctx, bounds)
    if _is_value_type(tp):
        try:
            # an instance (from replace_checked) is re-read from its spelling, to check it too
            return tp.parse(str(value) if isinstance(value, tp) else value)
        except ValueError as exc:
            raise ctx.fail(key, str(exc)) from None
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, ctx)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(map(str, args))
            raise ctx.fail(key, f"expected one of {choices}, got {_show(value)}")
        return value
    if origin is tuple:
        variadic = len(args) == 2 and args[1] is Ellipsis
        if variadic and dataclasses.is_dataclass(args[0]) and isinstance(value, dict):
            value = [value]  # one mapping stands for a list of one (e.g. data.test)
        if not isinstance(value, (list, tuple)):
            raise ctx.fail(key, f"expected a list, got {_show(value)}")
        if not variadic and len(value) != len(args):
            raise ctx.fail(key, f"expected a list of {len(args)} values, got {_show(value)}")
        item_types = args[:1] * len(value) if variadic else args
        # the items share the field's range
        return tuple(
            _coerce(a, v, f"{key}[{i}]", ctx, bounds)
            for i, (a, v) in enumerate(zip(item_types, value))
        )
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ctx.fail(key, f"expected a file path, got {_show(value)}")
        path = Path(value).expanduser()
        return path if path.is_absolute() else Path(os.path.normpath(ctx.base_dir / path))
    if tp is bool:
        if not isinstance(value, bool):
            raise ctx.fail(key, f"expected true or false, got {_show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ctx.fail(key, f"expected an integer, got {_show(value)}")
        _check_range(key, value, bounds, ctx)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(key, f"expected a number, got {_show(value)}")
        _check_range(key, float(value), bounds, ctx)
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ctx.fail(key, f"expected a string, got {_show(value)}")
        return str(value)
    raise TypeError(f"unsupported recipe field type {tp!r} for {key}")  # a bug, not user error


def _check_range(key: str, value: float, bounds: tuple | None, ctx: _Context) -> None:
    low, high = bounds or (None, None)
    if low is not None and value < low or high is not None and value > high:
        bounds_text = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ctx.fail(key, f"{value} is out of range; expected {bounds_text}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def _plain(value: Any) -> Any:
    """YAML-safe values: sections as mappings, tuples as lists, paths and value types as text."""
    if isinstance(value, Path) or _is_value_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
