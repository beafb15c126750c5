"""The type walker: raw YAML values checked against the section dataclasses' field types.

It knows no key by name: each field's type, range and parser (declared beside the field
in sections.py) say how to read it. Every error names the file, the dotted key and what
is wrong, in one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mtkit.config.sections import Recipe, is_value_type
from mtkit.errors import ConfigError

# a decimal number, exponent allowed
_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


@dataclass
class Context:
    where: str
    base_dir: Path  # relative paths are resolved against it
    label: str | None = None  # replaces "where: key" in errors (a flag and its value)
    # YAML 1.1 reads 1e-3 (no dot) as text: in a recipe, a float key reads it as the number;
    # values that come typed (command-line flags, JSON requests) stay strict (and are not
    # told about YAML's unquoted no)
    numbers_in_text: bool = True

    def fail(self, key: str, problem: str) -> ConfigError:
        head = self.label or f"{self.where}: {key}"
        return ConfigError(f"{head}: {problem}")


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if _is_union(tp) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def internal_fields(cls: type) -> set[str]:
    """The fields a recipe file cannot set (Recipe.name, Recipe.inherited)."""
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("internal")}


def unknown_key(key: str, known: dict[str, Any], parent: str) -> str:
    internal = internal_fields(Recipe) if not parent else set()
    names = [k for k in known if k != "name" and k not in internal]
    where = f"{parent}.{key}" if parent else key
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(names)}"
    return f"unknown key '{where}'; {hint}"


def run_check(obj: Any) -> None:
    if hasattr(obj, "check"):
        obj.check()


def build(cls: type, raw: Any, key: str, ctx: Context) -> Any:
    """A section (or the recipe, key "") from its raw mapping, checked."""
    if not isinstance(raw, dict):
        raise ctx.fail(key or "recipe", f"expected a mapping, got {_show(raw)}")
    hints = field_types(cls)
    for name in raw:
        if name not in hints or (name == "name" and key):
            raise ConfigError(f"{ctx.where}: {unknown_key(str(name), hints, key)}")
    values = {}
    for f in dataclasses.fields(cls):
        dotted = f"{key}.{f.name}" if key else f.name
        if f.name in raw:
            values[f.name] = read_field(f, hints[f.name], raw[f.name], dotted, ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.fail(dotted, "required key is missing")
    obj = cls(**values)
    try:
        run_check(obj)
    except ValueError as exc:
        raise ConfigError(f"{ctx.where}: {exc}") from None
    return obj


def read_field(f: dataclasses.Field, tp: Any, value: Any, key: str, ctx: Context) -> Any:
    """One field's value: its own parser first (if it declares one), then type and range."""
    if "parse" in f.metadata:
        try:
            value = f.metadata["parse"](value)
        except ValueError as exc:
            raise ctx.fail(key, str(exc)) from None
    bounds = (*f.metadata["range"], f.metadata.get("above", False)) if "range" in f.metadata \
        else None
    return _coerce(tp, value, key, ctx, bounds)


def _coerce(tp: Any, value: Any, key: str, ctx: Context, bounds: tuple | None = None) -> Any:
    if _is_union(tp):
        if value is None and type(None) in typing.get_args(tp):
            return None
        return _coerce(strip_optional(tp), value, key, ctx, bounds)
    if is_value_type(tp):
        try:
            # an instance (from replace_checked) is re-read from its spelling, to check it too
            return tp.parse(str(value) if isinstance(value, tp) else value)
        except ValueError as exc:
            raise ctx.fail(key, str(exc)) from None
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key, ctx)
    if typing.get_origin(tp) is Literal:
        if value not in typing.get_args(tp):
            choices = ", ".join(map(str, typing.get_args(tp)))
            raise ctx.fail(key, f"expected one of {choices}, got {_show(value)}")
        return value
    if typing.get_origin(tp) is tuple:
        return _coerce_tuple(typing.get_args(tp), value, key, ctx, bounds)
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ctx.fail(key, f"expected a file path, got {_show(value)}")
        path = Path(value).expanduser()
        return path if path.is_absolute() else Path(os.path.normpath(ctx.base_dir / path))
    if tp in _SCALARS:
        return _SCALARS[tp](value, key, ctx, bounds)
    raise TypeError(f"unsupported recipe field type {tp!r} for {key}")  # a bug, not user error


def _coerce_tuple(args: tuple, value: Any, key: str, ctx: Context, bounds: tuple | None) -> Any:
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


def _read_bool(value: Any, key: str, ctx: Context, bounds: tuple | None) -> bool:
    if not isinstance(value, bool):
        raise ctx.fail(key, f"expected true or false, got {_show(value)}")
    return value


def _read_int(value: Any, key: str, ctx: Context, bounds: tuple | None) -> int:
    if (ctx.numbers_in_text and isinstance(value, str) and _DECIMAL.fullmatch(value.strip())
            and float(value).is_integer()):
        value = float(value)  # YAML 1.1 reads 1e3 as text; a whole number is an integer
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ctx.fail(key, f"expected an integer, got {_show(value)}")
    _check_range(key, value, bounds, ctx)
    return value


def _read_float(value: Any, key: str, ctx: Context, bounds: tuple | None) -> float:
    if ctx.numbers_in_text and isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ctx.fail(key, f"expected a number, got {_show(value)}")
    if not math.isfinite(value):  # NaN passes every range check, and no key means infinity
        raise ctx.fail(key, f"expected a finite number, got {value}")
    _check_range(key, float(value), bounds, ctx)
    return float(value)


def _read_str(value: Any, key: str, ctx: Context, bounds: tuple | None) -> str:
    if isinstance(value, bool) and ctx.numbers_in_text:  # YAML 1.1: unquoted no is false
        spelled = "no, off or false" if not value else "yes, on or true"
        raise ctx.fail(key, f"expected a string, got {value} (YAML reads an unquoted "
                            f"{spelled} as {str(value).lower()}); quote it, e.g. "
                            f"'{'yes' if value else 'no'}'")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ctx.fail(key, f"expected a string, got {_show(value)}")
    return str(value)


_SCALARS = {bool: _read_bool, int: _read_int, float: _read_float, str: _read_str}


def _check_range(key: str, value: float, bounds: tuple | None, ctx: Context) -> None:
    low, high, above = bounds or (None, None, False)
    if low is not None and (value <= low if above else value < low) or \
            high is not None and value > high:
        raise ctx.fail(key, f"{value} is out of range; expected {range_text(low, high, above)}")


def range_text(low: float | None, high: float | None, above: bool) -> str:
    """A range in words, as errors and the reference give it."""
    if above:
        return f"above {low}" + (f" and at most {high}" if high is not None else "")
    return f"between {low} and {high}" if high is not None else f"at least {low}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."
