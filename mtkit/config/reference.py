"""The recipe-key reference (docs/reference/recipe-keys.md), generated from the sections.

Every key's type, default, range or choices and description come from the dataclass
fields themselves, so the reference cannot drift from the code (a unit test compares the
committed file with `render_reference()`). Regenerate it with

    python -m mtkit.config.reference [docs/reference/recipe-keys.md]
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from mtkit.config.sections import Recipe, is_value_type, parse_duration
from mtkit.config.walker import field_types, strip_optional

REFERENCE_PATH = Path("docs/reference/recipe-keys.md")

_HEAD = """\
# Recipe keys

Generated from the recipe's dataclasses (`mtkit/config/sections.py`) by
`python -m mtkit.config.reference`; edit the code, not this file.

A recipe is a YAML mapping of the sections below; only `data.train` is required. Any key
can be set from the command line too: `mtkit train recipe.yaml --set train.lr=1e-3`.
Relative paths are read from the recipe's directory (from the current one in `--set`).
Numbers may be written 1e-3 or 1e3 (an integer key takes a whole one); text that YAML
reads as true/false unquoted (`no`, `off`, `yes`, `on`) must be quoted: `tgt: 'no'`.
"""

# the name of a type, and its plural for the items of a list
_TYPE_NAMES = {int: ("integer", "integers"), float: ("number", "numbers"),
               bool: ("true/false", "true/false"), str: ("text", "texts"), Path: ("path", "paths")}


def render_reference() -> str:
    """The reference as Markdown: one table of keys per section, in field order."""
    parts = [_HEAD]
    for f in dataclasses.fields(Recipe):
        if f.metadata.get("internal"):
            continue
        section = strip_optional(field_types(Recipe)[f.name])
        parts.append(f"\n## {f.name}\n\n{_sentence(f.metadata['doc'])}\n\n"
                     "| key | type | default | range or choices | description |\n"
                     "|---|---|---|---|---|\n")
        parts.extend(_row(*item) for item in _keys(section, f.name))
    return "".join(parts)


def _keys(cls: type, prefix: str) -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, type) of every key under a section, sub-sections walked in place."""
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}.{f.name}", hints[f.name]
        yield key, f, tp
        inner = _item_type(strip_optional(tp))
        if dataclasses.is_dataclass(inner) and not is_value_type(inner):
            yield from _keys(inner, key)


def _item_type(tp: Any) -> Any:
    """The type of a list's items (tuple[X, ...] -> X); any other type as it is."""
    args = typing.get_args(tp)
    return args[0] if typing.get_origin(tp) is tuple and args[-1] is Ellipsis else tp


def _row(key: str, f: dataclasses.Field, tp: Any) -> str:
    cells = [f"`{key}`", _type_name(f, tp), _default(f), _allowed(f, tp),
             f.metadata["doc"]]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |\n"


def _type_name(f: dataclasses.Field, tp: Any) -> str:
    if f.metadata.get("parse") is parse_duration:
        return "seconds or duration"
    optional = strip_optional(tp) is not tp
    tp = strip_optional(tp)
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args[-1] is Ellipsis:
        item = args[0]
        if dataclasses.is_dataclass(item):
            name = "mapping or list of mappings"  # one mapping stands for a list of one
        else:
            name = f"list of {_scalar_name(item, plural=True)}"
    elif typing.get_origin(tp) is tuple:
        name = f"list of {len(args)} {_scalar_name(args[0], plural=True)}"
    elif typing.get_origin(tp) is Literal:
        name = "choice"
    elif dataclasses.is_dataclass(tp) and not is_value_type(tp):
        name = "mapping"
    else:
        name = _scalar_name(tp)
    return f"{name} or null" if optional else name


def _scalar_name(tp: Any, plural: bool = False) -> str:
    # a value type (e.g. Average) is written as one string
    singular, several = _TYPE_NAMES.get(tp, ("text", "texts"))
    return several if plural else singular


def _default(f: dataclasses.Field) -> str:
    if f.default is dataclasses.MISSING:
        return "required"
    value = f.default
    if value is None:
        return "null"
    if dataclasses.is_dataclass(value) and not is_value_type(type(value)):
        return ""  # a sub-section: its keys follow
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return f"`{value}`"


def _allowed(f: dataclasses.Field, tp: Any) -> str:
    tp = strip_optional(tp)
    if typing.get_origin(tp) is Literal:
        return ", ".join(f"`{choice}`" for choice in typing.get_args(tp))
    if "range" not in f.metadata:
        return ""
    low, high = f.metadata["range"]
    if low is None and high is None:
        return "any"
    if f.metadata.get("above"):
        return f"> {low}" + (f", <= {high}" if high is not None else "")
    if high is None:
        return f">= {low}"
    return f"{low} to {high}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def main(argv: list[str]) -> int:
    """Write the reference to the path given, or to docs/reference/recipe-keys.md."""
    path = Path(argv[0]) if argv else REFERENCE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_reference(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
