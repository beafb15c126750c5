"""docs/reference/recipe-keys.md is generated from the recipe's dataclasses and kept so."""

import dataclasses
import typing
from pathlib import Path

import pytest

from mtkit.config import Recipe
from mtkit.config.reference import REFERENCE_PATH, main, render_reference

ROOT = Path(__file__).resolve().parents[2]


def sections() -> list[type]:
    """Every dataclass a recipe is made of, the recipe included."""
    found, todo = [], [Recipe]
    while todo:
        cls = todo.pop()
        found.append(cls)
        for tp in typing.get_type_hints(cls).values():
            for inner in (tp, *typing.get_args(tp)):
                if dataclasses.is_dataclass(inner) and not hasattr(inner, "parse"):
                    todo.append(inner)
    return found


def test_the_committed_reference_is_what_the_code_generates():
    committed = (ROOT / REFERENCE_PATH).read_text(encoding="utf-8")
    assert committed == render_reference(), (
        "docs/reference/recipe-keys.md is stale: run python -m mtkit.config.reference")


@pytest.mark.parametrize("cls", sections(), ids=lambda cls: cls.__name__)
def test_every_key_has_a_description(cls):
    undocumented = [f.name for f in dataclasses.fields(cls)
                    if not f.metadata.get("internal") and not f.metadata.get("doc")]
    assert not undocumented


def test_every_key_is_in_the_reference():
    text = render_reference()
    for cls in sections():
        for f in dataclasses.fields(cls):
            if not f.metadata.get("internal"):
                assert f"{f.name}` |" in text or f"## {f.name}" in text, f.name
    assert "| `train.lr` | number | `0.0005` | 0.0 to 10.0 | peak learning rate |" in text
    assert "| `model.norm` | choice | `pre` | `pre`, `post` |" in text


def test_main_writes_the_reference(tmp_path):
    out = tmp_path / "keys.md"
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render_reference()
