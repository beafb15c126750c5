from pathlib import Path

import pytest
import yaml

from mtkit.config import Recipe, load_recipe, parse_duration, recipe_from_dict
from mtkit.errors import ConfigError

DATA = Path(__file__).parent / "data"


def write_recipe(tmp_path: Path, text: str) -> Path:
    for name in ("a.es", "a.en"):
        (tmp_path / name).write_text("hola\n", encoding="utf-8")
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    return path


BASE = """
data:
  langs: {src: es, tgt: en}
  train: {src: a.es, tgt: a.en}
  valid: {src: a.es, tgt: a.en}
  test:
    - {src: a.es, tgt: a.en}
model: {d_model: 64, heads: 4}
train: {max_time: 90m}
"""


def test_load_resolves_paths_defaults_and_units(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, BASE))
    assert recipe.name == "r"
    assert recipe.data.train.src == tmp_path / "a.es"
    assert recipe.data.test[0].tgt == tmp_path / "a.en"
    assert recipe.train.max_time == 5400.0
    assert recipe.model.heads == 4 and recipe.model.enc_layers == 6
    assert recipe.train.adam_betas == (0.9, 0.98)


def test_overrides_are_typed(tmp_path):
    path = write_recipe(tmp_path, BASE)
    recipe = load_recipe(path, ["train.lr=0.002", "model.norm=post", "train.adam_betas=[0.8, 0.9]"])
    assert recipe.train.lr == 0.002
    assert recipe.model.norm == "post"
    assert recipe.train.adam_betas == (0.8, 0.9)


def test_roundtrip_through_dict(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, BASE))
    again = recipe_from_dict(recipe.to_dict(), name=recipe.name)
    assert again == recipe
    assert yaml.safe_load(recipe.to_yaml())["model"]["d_model"] == 64


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            "model: {d_model: 64, heads: 4, head: 2}",
            "unknown key 'model.head'; did you mean 'heads'?",
        ),
        ("model: {d_model: 64, heads: '8x'}", "model.heads: expected an integer, got '8x'"),
        ("model: {d_model: 64, heads: 4, dropout: 1.5}", "model.dropout: 1.5 is out of range"),
        (
            "model: {d_model: 60, heads: 8}",
            "model.d_model (60) must be divisible by model.heads (8)",
        ),
        ("model: {d_model: 64, heads: 4, activation: gelu}", "expected one of relu, swiglu"),
        ("tokenizer: {joint: false}\nmodel: {d_model: 64, heads: 4}", "tie_embeddings"),
        ("train: {max_time: soon}", "train.max_time: expected seconds or a duration"),
        ("train: {average: top-3}", "train.average: expected best-K, last-K (K >= 1) or none"),
        ("train: {average: best-0}", "train.average: expected best-K"),
        ("train: {average: last-2, average_last: 3}", "train.average_last is the old name"),
        ("decode: {stop: always}", "decode.stop: expected one of early, exact, got 'always'"),
    ],
)
def test_validation_errors_name_the_key(tmp_path, edit, message):
    text = BASE.replace("model: {d_model: 64, heads: 4}", "").replace("train: {max_time: 90m}", "")
    path = write_recipe(tmp_path, text + edit + "\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_data_file(tmp_path):
    path = write_recipe(tmp_path, BASE.replace("valid: {src: a.es", "valid: {src: nope.es"))
    with pytest.raises(ConfigError, match=r"data.valid.src: data file not found: .*nope.es"):
        load_recipe(path)
    assert load_recipe(path, check_files=False).data.valid.src.name == "nope.es"


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    path = write_recipe(tmp_path, "data:\n  train: {src: a.es\n  bad: [\n")
    with pytest.raises(ConfigError, match=r"r.yaml:\d+:\d+: YAML syntax error"):
        load_recipe(path)


def test_missing_recipe_and_required_key(tmp_path):
    with pytest.raises(ConfigError, match="recipe not found"):
        load_recipe(tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match="data: required key is missing"):
        load_recipe(write_recipe(tmp_path, "model: {d_model: 64, heads: 4}\n"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lrr=1", "unknown key 'train.lrr'; did you mean 'lr'?"),
        ("nosection.x=1", "unknown key 'nosection'"),
        ("train.lr", "expected key=value"),
        ("train.lr=[1", "cannot parse the value"),
        ("train.lr=abc", "train.lr: expected a number"),
    ],
)
def test_bad_overrides(tmp_path, override, message):
    with pytest.raises(ConfigError) as info:
        load_recipe(write_recipe(tmp_path, BASE), [override])
    assert message in str(info.value)


def test_parse_duration():
    assert parse_duration("90m") == 5400
    assert parse_duration("2h") == 7200
    assert parse_duration(30) == 30.0
    assert parse_duration("45s") == 45
    with pytest.raises(ValueError):
        parse_duration("1y")


def test_recipe_is_frozen(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, BASE))
    with pytest.raises(AttributeError):
        recipe.train = None  # type: ignore[misc]
    assert isinstance(recipe, Recipe)


@pytest.mark.parametrize(
    "train, kind, k",
    [("{}", "last", 5), ("{average: best-3}", "best", 3), ("{average: none}", "none", 0),
     ("{average_last: 4}", "last", 4), ("{average_last: 0}", "none", 0)],
)
def test_average_setting(tmp_path, train, kind, k):
    """train.average_last (models trained before train.average) still loads."""
    text = BASE.replace("train: {max_time: 90m}", f"train: {train}")
    recipe = load_recipe(write_recipe(tmp_path, text))
    assert (recipe.train.average_kind, recipe.train.average_k) == (kind, k)
