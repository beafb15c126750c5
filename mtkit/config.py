"""Recipes: typed, frozen dataclasses loaded from YAML and validated once, here.

Code below this module receives plain typed values. Every error names the file,
the dotted key and what is wrong, in one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .errors import ConfigError


@dataclass(frozen=True)
class Langs:
    src: str = "src"
    tgt: str = "tgt"


@dataclass(frozen=True)
class Pair:
    """A parallel corpus: line N of `src` translates line N of `tgt`."""

    src: Path
    tgt: Path


@dataclass(frozen=True)
class DataConfig:
    train: Pair
    valid: Pair | None = None
    test: tuple[Pair, ...] = ()
    langs: Langs = Langs()
    max_len: int = 256  # training pairs longer than this (in tokens, either side) are dropped
    max_ratio: float = 3.0  # training pairs whose token-length ratio exceeds this are dropped


@dataclass(frozen=True)
class TokenizerConfig:
    model_type: Literal["unigram", "bpe"] = "unigram"
    vocab_size: int = 8000
    joint: bool = True  # one model for both languages (needed for tie_embeddings: all)
    character_coverage: float = 0.9995
    input_sentence_size: int = 1_000_000  # lines sampled for training; 0 = all
    seed: int = 1


@dataclass(frozen=True)
class ModelConfig:
    enc_layers: int = 6
    dec_layers: int = 6
    d_model: int = 512
    heads: int = 8
    ffn_dim: int = 2048
    dropout: float = 0.1
    attn_dropout: float = 0.0
    activation: Literal["relu", "swiglu"] = "relu"
    norm: Literal["pre", "post"] = "pre"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    tie_embeddings: Literal["all", "decoder", "none"] = "all"
    max_positions: int = 1024


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: int = 4096
    update_freq: int = 1
    lr: float = 5e-4
    warmup_steps: int = 4000
    label_smoothing: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    max_steps: int = 0  # 0 = no limit
    max_epochs: int = 0  # 0 = no limit
    max_time: float = 0.0  # seconds of training wall clock; 0 = no limit ("90m", "2h" accepted)
    seed: int = 1
    log_every: int = 50
    save_every: int = 1000
    keep_last: int = 5
    valid_every: int = 1000
    valid_bleu_lines: int = 500  # 0 = no BLEU during validation
    best_metric: Literal["bleu", "loss"] = "bleu"
    patience: int = 0  # validations without improvement before stopping; 0 = never
    # model.pt: "last-K" step checkpoints, "best-K" by dev score (kept on disk for it)
    # or "none" (checkpoint_best.pt); an average is kept only if it beats the best on dev
    average: str = "last-5"
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: bool = False  # torch.compile the training forward/backward
    threads: int = 0  # CPU threads for torch; 0 = torch's default
    max_bad_steps: int = 5  # consecutive non-finite losses before training stops

    @property
    def average_kind(self) -> str:
        """'last', 'best' or 'none' (train.average is validated when the recipe loads)."""
        return self.average.partition("-")[0]

    @property
    def average_k(self) -> int:
        return int(self.average.partition("-")[2] or 0)


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = 5
    lenpen: float = 1.0
    # when a sentence's beam search ends, once the n-best has finished: early = when no
    # live hypothesis would beat it by ending at the next step; exact = when none could,
    # at any length up to the cap
    stop: Literal["early", "exact"] = "early"
    max_len_a: float = 1.2
    max_len_b: int = 10
    # when set, the eval stage tries every beam x lenpen on the dev set and decodes the
    # test sets with the best; beam / lenpen fill in for an empty list
    tune_beam: tuple[int, ...] = ()
    tune_lenpen: tuple[float, ...] = ()


@dataclass(frozen=True)
class Recipe:
    data: DataConfig
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()
    name: str = field(default="recipe", metadata={"internal": True})

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-safe values (paths as strings), as stored in checkpoints."""
        raw = _plain(dataclasses.asdict(self))
        raw.pop("name")
        return raw

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_AVERAGE = re.compile(r"^(best|last)-([1-9]\d*)$|^none$")
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
    _read_renamed_keys(raw, where)
    recipe = _build(Recipe, raw, key="", ctx=_Context(where, base_dir))
    _cross_checks(recipe, where)
    return recipe


def _read_renamed_keys(raw: dict[str, Any], where: str) -> None:
    """Accept keys of earlier versions that models on disk still carry in their recipe."""
    train = raw.get("train")
    if isinstance(train, dict) and "average_last" in train:
        if "average" in train:
            raise ConfigError(f"{where}: train.average_last is the old name of train.average; "
                              "keep only train.average")
        train = dict(train)
        k = train.pop("average_last")
        train["average"] = "none" if k in (0, 1) else f"last-{k}"
        raw["train"] = train


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
        for part in parts[:-1]:
            child = node.get(part)
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
        if not dataclasses.is_dataclass(cls) and depth < len(parts) - 1:
            raise ConfigError(f"--set {item}: {'.'.join(parts[: depth + 1])} has no sub-keys")
    return cls


def check_data_files(recipe: Recipe, where: str) -> None:
    pairs = [("data.train", recipe.data.train), ("data.valid", recipe.data.valid)]
    pairs += [(f"data.test[{i}]", p) for i, p in enumerate(recipe.data.test)]
    for key, pair in pairs:
        if pair is None:
            continue
        for side in ("src", "tgt"):
            file = getattr(pair, side)
            if not file.is_file():
                raise ConfigError(f"{where}: {key}.{side}: data file not found: {file}")


def _cross_checks(recipe: Recipe, where: str) -> None:
    m, t = recipe.model, recipe.tokenizer
    if m.d_model % m.heads:
        raise ConfigError(
            f"{where}: model.d_model ({m.d_model}) must be divisible by model.heads ({m.heads})"
        )
    if (m.d_model // m.heads) % 2:
        raise ConfigError(f"{where}: model.d_model / model.heads must be even")
    if m.tie_embeddings == "all" and not t.joint:
        raise ConfigError(
            f"{where}: model.tie_embeddings: 'all' needs tokenizer.joint: true "
            "(one vocabulary); use 'decoder' or 'none' with separate vocabularies"
        )
    if m.d_model % 2:
        raise ConfigError(f"{where}: model.d_model must be even")


# --------------------------------------------------------------------------- the type walker

_RANGES: dict[str, tuple[float | None, float | None]] = {
    # key: (min inclusive, max inclusive); None = unbounded
    "tokenizer.vocab_size": (8, 1_000_000),
    "tokenizer.character_coverage": (0.9, 1.0),
    "tokenizer.input_sentence_size": (0, None),
    "model.enc_layers": (1, 64),
    "model.dec_layers": (1, 64),
    "model.d_model": (2, 65536),
    "model.heads": (1, 1024),
    "model.ffn_dim": (1, None),
    "model.dropout": (0.0, 0.99),
    "model.attn_dropout": (0.0, 0.99),
    "model.max_positions": (8, 1_000_000),
    "data.max_len": (1, None),
    "data.max_ratio": (1.0, None),
    "train.max_tokens": (16, None),
    "train.update_freq": (1, None),
    "train.lr": (0.0, 10.0),
    "train.warmup_steps": (0, None),
    "train.label_smoothing": (0.0, 0.99),
    "train.adam_eps": (0.0, 1.0),
    "train.weight_decay": (0.0, None),
    "train.clip_norm": (0.0, None),
    "train.max_steps": (0, None),
    "train.max_epochs": (0, None),
    "train.max_time": (0, None),
    "train.log_every": (1, None),
    "train.save_every": (1, None),
    "train.keep_last": (0, None),
    "train.valid_every": (1, None),
    "train.valid_bleu_lines": (0, None),
    "train.patience": (0, None),
    "train.threads": (0, 1024),
    "train.max_bad_steps": (1, None),
    "decode.beam": (1, 1000),
    "decode.lenpen": (0.0, 10.0),
    "decode.max_len_a": (0.0, None),
    "decode.max_len_b": (0, None),
    "decode.tune_beam": (1, 1000),
    "decode.tune_lenpen": (0.0, 10.0),
}


@dataclass
class _Context:
    where: str
    base_dir: Path

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key}: {problem}")


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if _is_union(tp) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _unknown_key(key: str, known: dict[str, Any], parent: str) -> str:
    names = [k for k in known if k != "name"]
    where = f"{parent}.{key}" if parent else key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(names)}"
    return f"unknown key '{where}'; {hint}"


def _build(cls: type, raw: Any, key: str, ctx: _Context) -> Any:
    if not isinstance(raw, dict):
        raise ctx.fail(key or "recipe", f"expected a mapping, got {_show(raw)}")
    hints = _field_types(cls)
    for name in raw:
        if name not in hints or (name == "name" and key):
            raise ConfigError(f"{ctx.where}: {_unknown_key(str(name), hints, key)}")
    values = {}
    for f in dataclasses.fields(cls):
        dotted = f"{key}.{f.name}" if key else f.name
        if f.name in raw:
            values[f.name] = _coerce(hints[f.name], raw[f.name], dotted, ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.fail(dotted, "required key is missing")
    return cls(**values)


def _coerce(tp: Any, value: Any, key: str, ctx: _Context) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        return _coerce(_strip_optional(tp), value, key, ctx)
    if key == "train.max_time":
        try:
            value = parse_duration(value)
        except ValueError as exc:
            raise ctx.fail(key, str(exc)) from None
    if key == "train.average" and not _AVERAGE.match(str(value)):
        raise ctx.fail(key, f"expected best-K, last-K (K >= 1) or none, got {_show(value)}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, ctx)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(map(str, args))
            raise ctx.fail(key, f"expected one of {choices}, got {_show(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            value = [value] if key == "data.test" else value
        if not isinstance(value, (list, tuple)):
            raise ctx.fail(key, f"expected a list, got {_show(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, f"{key}[{i}]", ctx) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ctx.fail(key, f"expected a list of {len(args)} values, got {_show(value)}")
        return tuple(_coerce(a, v, f"{key}[{i}]", ctx) for i, (a, v) in enumerate(zip(args, value)))
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
        _check_range(key, value, ctx)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(key, f"expected a number, got {_show(value)}")
        _check_range(key, float(value), ctx)
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ctx.fail(key, f"expected a string, got {_show(value)}")
        return str(value)
    raise TypeError(f"unsupported recipe field type {tp!r} for {key}")  # a bug, not user error


def _check_range(key: str, value: float, ctx: _Context) -> None:
    low, high = _RANGES.get(key.split("[")[0], (None, None))  # a list's items share a range
    if low is not None and value < low or high is not None and value > high:
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ctx.fail(key, f"{value} is out of range; expected {bounds}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
