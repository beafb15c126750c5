"""Recipes read from YAML (with `--set` overrides) or a checkpoint's dict, validated once.

Code below the config package receives plain typed values. `replace_checked` applies
command-line options to a section with the same checks as the YAML.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from mtkit.config.sections import Corpus, Pair, Recipe, is_value_type
from mtkit.config.upgrade import upgrade_recipe
from mtkit.config.walker import (
    Context,
    build,
    field_types,
    internal_fields,
    read_field,
    run_check,
    strip_optional,
    unknown_key,
)
from mtkit.errors import ConfigError
from mtkit.files.textio import text_file_problem

INHERITABLE = ("tokenizer", "model")  # what a recipe with train.init_from may leave out


class DuplicateKey(Exception):
    """A mapping gives one key twice (line numbers from 1)."""

    def __init__(self, key: Any, line: int, first: int):
        super().__init__(f"duplicate key {key!r}")
        self.line, self.first = line, first

    def in_file(self, path: Path) -> str:
        first = f" (first on line {self.first})" if self.first != self.line else ""
        return f"{path}:{self.line}: {self}{first}; give each key once"


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error: PyYAML keeps
    the last silently, so a second `model:` section would replace the first unseen."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges; the keys given beside it override, by design
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                continue  # the safe constructor refuses it with its own error
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise DuplicateKey(key, line, first_line[key])
            first_line[key] = line
        return super().construct_mapping(node, deep)


def parse_yaml(text: str) -> Any:
    """yaml.safe_load, refusing duplicate keys (DuplicateKey)."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: plain values only


def load_recipe(
    path: str | Path, overrides: list[str] = (), check_files: bool = True
) -> Recipe:
    """Read a YAML recipe, apply `key=value` overrides, validate, return a Recipe."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: recipe not found; check the path")
    try:
        raw = parse_yaml(path.read_text(encoding="utf-8"))
    except DuplicateKey as exc:
        raise ConfigError(exc.in_file(path)) from None
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
    # a fine-tuning recipe may leave out the sections its parent brings
    init_from = isinstance(raw.get("train"), dict) and raw["train"].get("init_from")
    inherited = tuple(s for s in INHERITABLE if s not in raw) if init_from else ()
    recipe = recipe_from_dict(raw, base_dir=path.parent, where=str(path), name=path.stem,
                              inherited=inherited)
    if not recipe.data.train:  # a bundle's recipe may have none (an imported model's)
        raise ConfigError(f"{path}: data.train: list at least one corpus {{src, tgt}}")
    if check_files:
        data = raw.get("data")
        listed = isinstance(data, dict) and isinstance(data.get("train"), list)
        check_data_files(recipe, where=str(path), train_listed=listed)
    return recipe


def recipe_from_dict(
    raw: dict[str, Any], base_dir: Path = Path("."), where: str = "recipe", name: str = "recipe",
    inherited: tuple[str, ...] = (),
) -> Recipe:
    """A Recipe from raw values (a parsed YAML file, or the dict a checkpoint stores);
    `inherited`: the sections a fine-tuning recipe leaves to its parent (`Recipe.inherited`)."""
    raw = upgrade_recipe(raw, where)
    for internal in ("name", "inherited"):
        if internal in raw:
            raise ConfigError(f"{where}: {unknown_key(internal, field_types(Recipe), '')}")
    raw["name"] = name
    if inherited:
        raw["inherited"] = inherited
    return build(Recipe, raw, key="", ctx=Context(where, base_dir))


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
    hints = field_types(type(section))
    values = {}
    for name, value in changes.items():
        if value is None:
            continue
        if name not in fields:
            raise TypeError(f"{type(section).__name__} has no field {name!r}")  # a bug
        flag = names.get(name)
        ctx = Context(where, Path.cwd(), label=f"{flag} {value}" if flag else None,
                      numbers_in_text=False)
        values[name] = read_field(fields[name], hints[name], value, f"{prefix}.{name}", ctx)
    new = dataclasses.replace(section, **values)
    try:
        run_check(new)
    except ValueError as exc:
        # "decode.beam" in the message becomes "--beam" where a flag is named
        flagged = re.sub(rf"\b{prefix}\.(\w+)", lambda m: names.get(m[1], m[0]), str(exc))
        raise ConfigError(flagged if flagged != str(exc) else f"{where}: {exc}") from None
    return new


def _section_key(cls: type) -> str:
    for name, tp in field_types(Recipe).items():
        if tp is cls:
            return name
    raise TypeError(f"{cls.__name__} is not a recipe section")  # a bug, not user error


def apply_overrides(raw: dict[str, Any], overrides: list[str], where: str) -> None:
    """Apply `--set a.b=value` overrides in place; values are parsed as YAML scalars."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item}: expected key=value, e.g. --set train.lr=0.001")
        key, _, text = item.partition("=")
        parts = key.strip().split(".")
        try:
            value = parse_yaml(text) if text.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"--set {item}: cannot parse the value {text!r}") from None
        except DuplicateKey as exc:
            raise ConfigError(f"--set {item}: {exc}; give each key once") from None
        f, hint = _check_override_key(parts, item)
        # a path typed on the command line is relative to where the user stands, in a
        # list or mapping value too (the recipe's own paths: to the recipe's directory)
        value = _absolute_paths(hint, value)
        _check_override_value(f, hint, value, ".".join(parts))
        _section_of(raw, parts, item)[parts[-1]] = value


def _check_override_value(f: dataclasses.Field, hint: Any, value: Any, key: str) -> None:
    """Read a --set value as its field will be, so that a bad one is blamed on --set, not
    on the recipe file (the recipe as a whole is checked after)."""
    tp = strip_optional(hint)
    if typing.get_origin(tp) is tuple:
        tp = typing.get_args(tp)[0]
    if dataclasses.is_dataclass(tp) and not is_value_type(tp):  # errors name the inner key
        ctx = Context(f"--set {key}", Path.cwd())
    else:
        ctx = Context("--set", Path.cwd(), label=f"--set {key}")
    read_field(f, hint, value, key, ctx)


def _absolute_paths(tp: Any, value: Any) -> Any:
    """`value` with every string that a Path field of `tp` will read made absolute; what
    does not fit the type is left for the walker to refuse."""
    tp = strip_optional(tp)
    if tp is Path and isinstance(value, str) and value:
        return str(Path(value).expanduser().absolute())
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[1:] == (Ellipsis,):
        tp = typing.get_args(tp)[0]  # a variadic list: each item is read as its type
    if isinstance(value, list):
        return [_absolute_paths(tp, item) for item in value]
    if dataclasses.is_dataclass(tp) and not is_value_type(tp) and isinstance(value, dict):
        hints = field_types(tp)
        return {k: _absolute_paths(hints[k], v) if k in hints else v for k, v in value.items()}
    return value


def _section_of(raw: dict[str, Any], parts: list[str], item: str) -> dict[str, Any]:
    """The mapping that holds the dotted key `parts`, made where it is missing."""
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
    return node


def _check_override_key(parts: list[str], item: str) -> tuple[dataclasses.Field, Any]:
    """Check that the dotted key exists; return the field it names and its type."""
    cls: Any = Recipe
    for depth, part in enumerate(parts):
        hints = field_types(cls)
        if part not in hints or part == "name" or part in internal_fields(cls):
            dotted = ".".join(parts[:depth])
            raise ConfigError(f"--set {item}: {unknown_key(part, hints, dotted)}")
        f, hint = next(f for f in dataclasses.fields(cls) if f.name == part), hints[part]
        cls = strip_optional(hint)
        if typing.get_origin(cls) is tuple and dataclasses.is_dataclass(typing.get_args(cls)[0]):
            cls = typing.get_args(cls)[0]  # a list of one written as its mapping (data.train)
        is_section = dataclasses.is_dataclass(cls) and not is_value_type(cls)
        if not is_section and depth < len(parts) - 1:
            raise ConfigError(f"--set {item}: {'.'.join(parts[: depth + 1])} has no sub-keys")
    return f, hint


def check_data_files(recipe: Recipe, where: str, train_listed: bool = False) -> None:
    """Every data file the recipe names exists (and tokenizer.model, when given). Errors
    name a training corpus data.train[i] when there are several or the recipe gives a
    list, data.train when it gives one mapping."""
    listed = train_listed or len(recipe.data.train) > 1
    pairs: list[tuple[str, Pair | Corpus | None]]
    pairs = [(f"data.train[{i}]" if listed else "data.train", c)
             for i, c in enumerate(recipe.data.train)]
    pairs += [("data.valid", recipe.data.valid)]
    pairs += [(f"data.test[{i}]", p) for i, p in enumerate(recipe.data.test)]
    given = recipe.tokenizer.model
    if given is not None and not given.exists():
        raise ConfigError(f"{where}: tokenizer.model: not found: {given}")
    for key, pair in pairs:
        if pair is None:
            continue
        for side in ("src", "tgt", "alignments"):
            file = getattr(pair, side, None)
            problem = None if file is None else text_file_problem(file)
            if problem == "not found":
                raise ConfigError(f"{where}: {key}.{side}: data file not found: {file}")
            if problem is not None:
                raise ConfigError(f"{where}: {key}.{side}: {file}: {problem}")
