import dataclasses
import typing
from pathlib import Path

import pytest
import yaml
from builders import RECIPES, raw_recipe

from mtkit.config import (
    Average,
    Corpus,
    DataConfig,
    DecodeConfig,
    Langs,
    ModelConfig,
    Pair,
    Recipe,
    TokenizerConfig,
    TrainConfig,
    load_recipe,
    parse_duration,
    recipe_from_dict,
    replace_checked,
)
from mtkit.errors import ConfigError


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
    assert recipe.data.train[0].src == tmp_path / "a.es"
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


def load_error(tmp_path: Path, edit: str) -> tuple[Path, str]:
    """The recipe path and the ConfigError of BASE (without its model and train lines)
    plus `edit`."""
    text = BASE.replace("model: {d_model: 64, heads: 4}", "").replace("train: {max_time: 90m}", "")
    path = write_recipe(tmp_path, text + edit + "\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    return path, str(info.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            "model: {d_model: 64, heads: 4, head: 2}",
            "unknown key 'model.head'; did you mean 'heads'?",
        ),
        ("model: {d_model: 64, heads: '8x'}", "model.heads: expected an integer, got '8x'"),
        ("model: {d_model: 64, heads: 4, dropout: 1.5}", "model.dropout: 1.5 is out of range"),
        ("tokenizer: {character_coverage: 0.95}",  # SentencePiece's least is 0.98
         "tokenizer.character_coverage: 0.95 is out of range; expected between 0.98 and 1.0"),
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
        ("decode: {stop: always}", "decode.stop: expected one of early, exact, top, got 'always'"),
    ],
)
def test_validation_errors_name_the_key(tmp_path, edit, message):
    path, error = load_error(tmp_path, edit)
    assert message in error
    assert str(path) in error


def test_missing_data_file(tmp_path):
    path = write_recipe(tmp_path, BASE.replace("valid: {src: a.es", "valid: {src: nope.es"))
    with pytest.raises(ConfigError, match=r"data.valid.src: data file not found: .*nope.es"):
        load_recipe(path)
    assert load_recipe(path, check_files=False).data.valid.src.name == "nope.es"


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    path = write_recipe(tmp_path, "data:\n  train: {src: a.es\n  bad: [\n")
    with pytest.raises(ConfigError, match=r"r.yaml:\d+:\d+: YAML syntax error"):
        load_recipe(path)


@pytest.mark.parametrize("text, message", [
    (BASE + "model: {d_model: 32}\n", "r.yaml:10: duplicate key 'model' (first on line 8); "
                                      "give each key once"),
    (BASE.replace("heads: 4}", "heads: 4, heads: 2}"), "r.yaml:8: duplicate key 'heads'; "
                                                         "give each key once"),
    (BASE.replace("  valid:", "  test: []\n  valid:"), "r.yaml:7: duplicate key 'test' "
                                                        "(first on line 5); give each key once"),
])
def test_duplicate_keys_are_refused_at_every_level(tmp_path, text, message):
    """PyYAML keeps the last of two equal keys: a second `model:` would replace the first."""
    with pytest.raises(ConfigError) as info:
        load_recipe(write_recipe(tmp_path, text))
    assert str(info.value) == f"{tmp_path / message}"


def test_duplicate_keys_in_a_set_value_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^--set data.test=\[\{src: a.es, src: a.en\}\]: "
                                          r"duplicate key 'src'; give each key once$"):
        load_recipe(write_recipe(tmp_path, BASE), ["data.test=[{src: a.es, src: a.en}]"])


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    text = BASE.replace("model: {d_model: 64, heads: 4}",
                        "base: &m {d_model: 32, heads: 4}\nmodel: {<<: *m, d_model: 64}")
    with pytest.raises(ConfigError, match="unknown key 'base'"):  # but not a duplicate
        load_recipe(write_recipe(tmp_path, text))


def test_missing_recipe_and_required_key(tmp_path):
    with pytest.raises(ConfigError, match="recipe not found"):
        load_recipe(tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match="data: required key is missing"):
        load_recipe(write_recipe(tmp_path, "model: {d_model: 64, heads: 4}\n"))


def test_exponent_numbers_are_read_for_float_keys(tmp_path):
    """YAML 1.1 reads 1e-3 (no dot) as text; a float key takes it as the number it spells."""
    text = BASE.replace("train: {max_time: 90m}",
                        "train: {max_time: 90m, lr: 1e-3, adam_eps: 1E-9, adam_betas: [9e-1, .98]}")
    recipe = load_recipe(write_recipe(tmp_path, text))
    assert (recipe.train.lr, recipe.train.adam_eps) == (1e-3, 1e-9)
    assert recipe.train.adam_betas == (0.9, 0.98)
    assert isinstance(recipe.train.lr, float)
    recipe = load_recipe(write_recipe(tmp_path, BASE),
                         ["train.lr=2e-4", "train.ema=+9.99e-1", "decode.tune_lenpen=[5e-1, 1]"])
    assert (recipe.train.lr, recipe.train.ema) == (2e-4, 0.999)
    assert recipe.decode.tune_lenpen == (0.5, 1.0)
    path, error = load_error(tmp_path, "train: {lr: 2e1}")
    assert error == f"{path}: train.lr: 20.0 is out of range; expected between 0.0 and 10.0"
    for bad in ("1e", "e-3", "1e-3x", "nan", "inf"):
        path, error = load_error(tmp_path, f"train: {{lr: '{bad}'}}")
        assert error == f"{path}: train.lr: expected a number, got '{bad}'"


def test_exponent_numbers_are_read_for_integer_and_duration_keys(tmp_path):
    """1e3 as train.lr's 1e-3 is: a number (YAML 1.1 leaves it text); for an integer key
    only a whole one."""
    recipe = load_recipe(write_recipe(tmp_path, BASE),
                         ["train.max_steps=1e3", "train.max_time=1.5e3", "train.seed=2E1"])
    assert (recipe.train.max_steps, recipe.train.max_time, recipe.train.seed) == (1000, 1500.0,
                                                                                   20)
    assert isinstance(recipe.train.max_steps, int)
    path, error = load_error(tmp_path, "train: {max_steps: 1e-3, max_time: 2e1m}")
    assert error == f"{path}: train.max_steps: expected an integer, got '1e-3'"
    assert load_recipe(write_recipe(tmp_path, BASE.replace("90m", "2e1m"))).train.max_time == 1200


@pytest.mark.parametrize("override, message", [
    ("train.lr=abc", "--set train.lr: expected a number, got 'abc'"),
    ("train.max_steps=-1", "--set train.max_steps: -1 is out of range; expected at least 0"),
    ("data.train=[{src: a.es, tgt: a.en, weight: 0}]",
     "--set data.train: data.train[0].weight: 0 is not above 0"),
    ("inherited=[model]", "--set inherited=[model]: unknown key 'inherited'; known keys: data, "
                          "tokenizer, model, train, decode"),
])
def test_a_bad_set_value_is_blamed_on_set(tmp_path, override, message):
    """Not on the recipe file, which holds no such value; internal keys are unknown."""
    with pytest.raises(ConfigError) as info:
        load_recipe(write_recipe(tmp_path, BASE), [override])
    assert str(info.value).startswith(message)


def test_an_unquoted_no_is_read_as_false_and_the_error_says_so(tmp_path):
    text = BASE.replace("tgt: en}", "tgt: no}")
    with pytest.raises(ConfigError) as info:
        load_recipe(write_recipe(tmp_path, text))
    assert str(info.value) == (
        f"{tmp_path / 'r.yaml'}: data.langs.tgt: expected a string, got False (YAML reads an "
        "unquoted no, off or false as false); quote it, e.g. 'no'")
    # values that come typed (flags, JSON requests) are not read from text
    with pytest.raises(ConfigError, match="decode.lenpen: expected a number, got '1e-1'"):
        replace_checked(DecodeConfig(), {"lenpen": "1e-1"})
    # text keys keep the text as written
    text = BASE.replace("langs: {src: es, tgt: en}", "langs: {src: 1e3, tgt: en}")
    assert load_recipe(write_recipe(tmp_path, text)).data.langs.src == "1e3"


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
    assert (recipe.train.average.kind, recipe.train.average.k) == (kind, k)


def test_average_parse_and_str_round_trip():
    for text, value in [("last-5", Average("last", 5)), ("best-3", Average("best", 3)),
                        ("none", Average("none"))]:
        assert Average.parse(text) == value
        assert str(value) == text
    assert TrainConfig().average == Average("last", 5)
    for bad in ("top-3", "last-0", "best-", "last-5 ", "", 5):
        with pytest.raises(ValueError, match="expected best-K, last-K"):
            Average.parse(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as info:
        Average.parse("top-3")
    assert str(info.value) == "expected best-K, last-K (K >= 1) or none, got 'top-3'"


def test_to_dict_writes_average_as_its_yaml_spelling(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, BASE))
    assert recipe.to_dict()["train"]["average"] == "last-5"
    assert yaml.safe_load(recipe.to_yaml())["train"]["average"] == "last-5"
    best = load_recipe(write_recipe(tmp_path, BASE), ["train.average=best-2"])
    assert best.train.average == Average("best", 2)
    assert recipe_from_dict(best.to_dict(), name=best.name) == best


def test_old_key_is_read_into_the_new_one(tmp_path):
    text = BASE.replace("train: {max_time: 90m}", "train: {average_last: 3}")
    recipe = load_recipe(write_recipe(tmp_path, text))
    assert recipe.train.average == Average("last", 3)
    assert "average_last" not in recipe.to_dict()["train"]
    with pytest.raises(ConfigError) as info:
        recipe_from_dict(raw_recipe("a", "b", train={"average": "none", "average_last": 2}))
    assert str(info.value) == ("recipe: train.average_last is the old name of train.average; "
                               "keep only train.average")


def test_a_single_mapping_is_a_list_of_one(tmp_path):
    text = BASE.replace("  test:\n    - {src: a.es, tgt: a.en}", "  test: {src: a.es, tgt: a.en}")
    assert "test: {src" in text
    recipe = load_recipe(write_recipe(tmp_path, text))
    assert recipe.data.test == (Pair(tmp_path / "a.es", tmp_path / "a.en"),)
    with pytest.raises(ConfigError, match="data.test: expected a list, got 'a.es'"):
        load_recipe(write_recipe(tmp_path, text.replace("test: {src: a.es, tgt: a.en}",
                                                        "test: a.es")))
    # only lists of mappings: a list of numbers still wants a list
    with pytest.raises(ConfigError, match="decode.tune_beam: expected a list, got 4"):
        load_recipe(write_recipe(tmp_path, BASE + "decode: {tune_beam: 4}\n"))


@pytest.mark.parametrize(
    "edit, message",
    [
        ("tokenizer: {vocab_size: 4}",
         "tokenizer.vocab_size: 4 is out of range; expected between 8 and 1000000"),
        ("model: {d_model: 64, heads: 4, dropout: 1.5}",
         "model.dropout: 1.5 is out of range; expected between 0.0 and 0.99"),
        ("train: {max_tokens: 8}", "train.max_tokens: 8 is out of range; expected at least 16"),
        ("train: {max_time: -5}", "train.max_time: -5.0 is out of range; expected at least 0"),
        ("decode: {tune_beam: [2, 0]}",
         "decode.tune_beam[1]: 0 is out of range; expected between 1 and 1000"),
        ("decode: {tune_lenpen: [1.0, 11]}",
         "decode.tune_lenpen[1]: 11.0 is out of range; expected between 0.0 and 10.0"),
        ("decode: {nbest: 0}", "decode.nbest: 0 is out of range; expected between 1 and 1000"),
        ("decode: {beam: 2, nbest: 3}", "decode.nbest (3) must not exceed decode.beam (2)"),
        ("train: {lr: .nan}", "train.lr: expected a finite number, got nan"),
        ("decode: {tune_lenpen: [1.0, .inf]}",
         "decode.tune_lenpen[1]: expected a finite number, got inf"),
        # refused here, not with a traceback from SentencePiece, numpy or torch's Adam
        ("tokenizer: {seed: -1}",
         "tokenizer.seed: -1 is out of range; expected between 0 and 4294967295"),
        ("train: {seed: 99999999999999999999}",
         "train.seed: 99999999999999999999 is out of range; expected between 0 and 4294967295"),
        ("train: {adam_betas: [0.9, 1.0]}",
         "train.adam_betas[1]: 1.0 is out of range; expected between 0.0 and 0.999999"),
        ("decode: {temperature: 0}",
         "decode.temperature: 0.0 is out of range; expected above 0.0"),
    ],
)
def test_ranges_and_checks(tmp_path, edit, message):
    path, error = load_error(tmp_path, edit)
    assert error == f"{path}: {message}"


@pytest.mark.parametrize("code", ["en/x", "", "e n", "x" * 33])
def test_a_language_code_is_one_short_word(tmp_path, code):
    """A code names eval's files: 'en/x' wrote into a subdirectory, '' a name ending in '.'."""
    path = write_recipe(tmp_path, BASE)
    assert load_recipe(path, ["data.langs.tgt=pt-BR"]).data.langs.tgt == "pt-BR"
    with pytest.raises(ConfigError, match=f"data.langs.tgt: '{code}' is not a language code"):
        load_recipe(path, [f"data.langs.tgt='{code}'"])


def test_the_ends_of_the_seed_and_adam_ranges_are_taken_by_what_uses_them():
    import numpy as np
    import sentencepiece as spm
    import torch

    def ends(cls, name):
        return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["range"]

    for cls in (TokenizerConfig, TrainConfig, DecodeConfig):
        for seed in ends(cls, "seed"):
            spm.set_random_generator_seed(seed)
            torch.manual_seed(seed)
            np.random.default_rng([seed, 0])
    weight = torch.nn.Parameter(torch.ones(2))
    for beta in ends(TrainConfig, "adam_betas"):
        torch.optim.AdamW([weight], betas=(beta, beta)).step()  # no ValueError


def test_ranges_are_declared_beside_their_fields():
    meta = {f.name: f.metadata for f in dataclasses.fields(ModelConfig)}
    assert meta["dropout"]["range"] == (0.0, 0.99)
    assert {f.name: f.metadata for f in dataclasses.fields(DecodeConfig)}["nbest"]["range"] == (
        1, 1000)


def _is_numeric(tp) -> bool:
    if typing.get_origin(tp) is tuple:
        return all(_is_numeric(a) for a in typing.get_args(tp) if a is not Ellipsis)
    return tp in (int, float)


@pytest.mark.parametrize(
    "cls",
    [Langs, Pair, Corpus, DataConfig, TokenizerConfig, ModelConfig, TrainConfig, DecodeConfig],
)
def test_every_number_declares_a_range(cls):
    hints = typing.get_type_hints(cls)
    numeric = [f for f in dataclasses.fields(cls) if _is_numeric(hints[f.name])]
    assert all("range" in f.metadata for f in numeric), [
        f.name for f in numeric if "range" not in f.metadata
    ]
    if cls in (ModelConfig, TrainConfig, DecodeConfig):
        assert numeric


@pytest.mark.parametrize("cls", [TokenizerConfig, ModelConfig, TrainConfig, DecodeConfig])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_no_float_key_takes_nan_or_infinity(cls, value):
    """NaN passes every range comparison: each float key refuses it (and infinities)."""
    hints = typing.get_type_hints(cls)
    floats = [f.name for f in dataclasses.fields(cls) if hints[f.name] in (float, float | None)]
    for name in floats:
        with pytest.raises(ConfigError, match=f"{name}: expected a finite number"):
            replace_checked(cls(), {name: value})


def test_sections_of_the_recipe_are_all_checked_above():
    hints = typing.get_type_hints(Recipe)
    sections = {hints[f.name] for f in dataclasses.fields(Recipe)
                if not f.metadata.get("internal")}
    assert sections == {DataConfig, TokenizerConfig, ModelConfig, TrainConfig, DecodeConfig}


def test_nbest_defaults_to_one_and_follows_stop():
    names = [f.name for f in dataclasses.fields(DecodeConfig)]
    assert names[names.index("stop") + 1] == "nbest"
    assert DecodeConfig().nbest == 1
    recipe = recipe_from_dict(raw_recipe("a", "b", decode={"beam": 4, "nbest": 4}))
    assert recipe.decode.nbest == 4


def test_replace_checked_returns_a_replaced_copy():
    base = DecodeConfig()
    new = replace_checked(base, {"beam": 8, "lenpen": 1, "stop": None, "nbest": 2})
    assert new == dataclasses.replace(base, beam=8, lenpen=1.0, nbest=2)
    assert isinstance(new.lenpen, float)
    assert new is not base and base.beam == 5
    assert replace_checked(base, {"beam": None}) == base
    train = replace_checked(TrainConfig(), {"max_time": "2h", "average": "best-3"})
    assert (train.max_time, train.average) == (7200.0, Average("best", 3))
    assert replace_checked(TrainConfig(), {"average": Average("none")}).average.kind == "none"


@pytest.mark.parametrize(
    "section, changes, names, message",
    [
        (DecodeConfig(), {"beam": 0}, {"beam": "--beam"},
         "--beam 0: 0 is out of range; expected between 1 and 1000"),
        (DecodeConfig(), {"beam": 0}, None,
         "command line: decode.beam: 0 is out of range; expected between 1 and 1000"),
        (DecodeConfig(), {"lenpen": float("nan")}, {"lenpen": "--lenpen"},
         "--lenpen nan: expected a finite number, got nan"),
        (DecodeConfig(), {"stop": "never"}, {"stop": "--stop"},
         "--stop never: expected one of early, exact, top, got 'never'"),
        (DecodeConfig(), {"stop": "never"}, {},
         "command line: decode.stop: expected one of early, exact, top, got 'never'"),
        (DecodeConfig(beam=2), {"nbest": 3}, {"nbest": "--nbest", "beam": "--beam"},
         "--nbest (3) must not exceed --beam (2)"),
        (DecodeConfig(), {"beam": 2, "nbest": 3}, None,
         "command line: decode.nbest (3) must not exceed decode.beam (2)"),
        (DecodeConfig(), {"tune_beam": (4, 0)}, {"tune_beam": "--tune-beam"},
         "--tune-beam (4, 0): 0 is out of range; expected between 1 and 1000"),
        (TrainConfig(), {"average": "top-3"}, {"average": "--average"},
         "--average top-3: expected best-K, last-K (K >= 1) or none, got 'top-3'"),
        (TrainConfig(), {"max_time": "soon"}, None,
         "command line: train.max_time: expected seconds or a duration like 90m or 2h, "
         "got 'soon'"),
        (ModelConfig(), {"heads": 3}, {"heads": "--heads"},
         "model.d_model (512) must be divisible by --heads (3)"),
        (ModelConfig(), {"heads": 3}, {"d_model": "--d-model"},
         "--d-model (512) must be divisible by model.heads (3)"),
        (ModelConfig(), {"heads": 3}, {"dropout": "--dropout"},
         "command line: model.d_model (512) must be divisible by model.heads (3)"),
    ],
)
def test_replace_checked_errors(section, changes, names, message):
    with pytest.raises(ConfigError) as info:
        replace_checked(section, changes, names)
    assert str(info.value) == message


CORPORA = """
data:
  train:
    - {src: a.es, tgt: a.en}
    - {src: a.es, tgt: a.en, weight: 4, tag: BT}
"""


def test_a_list_of_weighted_tagged_corpora(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, CORPORA))
    first, second = recipe.data.train
    assert (first.weight, first.tag) == (1.0, None)
    assert (second.src, second.weight, second.tag) == (tmp_path / "a.es", 4.0, "BT")
    assert recipe.data.tags == ("BT",)
    # --set reaches into a list of one, not into a longer list
    one = load_recipe(write_recipe(tmp_path, BASE), ["data.train.weight=2"])
    assert one.data.train[0].weight == 2.0
    with pytest.raises(ConfigError, match=r"--set data.train.weight=2: data.train is a list "
                                          r"of 2; edit its items in the recipe"):
        load_recipe(write_recipe(tmp_path, CORPORA), ["data.train.weight=2"])


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{src: a.es}", "data.train[1].tgt: required key is missing"),
        ("{src: a.es, tgt: a.en, weight: 0}", "data.train[1].weight: 0 is not above 0"),
        ("{src: a.es, tgt: a.en, weight: -1}", "data.train[1].weight: -1 is not above 0"),
        ("{src: a.es, tgt: a.en, tag: 'b t'}", "data.train[1].tag: 'b t' is not a valid tag"),
        ("{src: a.es, tgt: a.en, tag: unk}", "data.train[1].tag: 'unk' is taken by the "
                                              "tokenizer's <unk>"),
        ("{src: a.es, tgt: nope.en}", "data.train[1].tgt: data file not found"),
    ],
)
def test_bad_corpus_entries_name_their_key(tmp_path, entry, message):
    text = f"data:\n  train:\n    - {{src: a.es, tgt: a.en}}\n    - {entry}\n"
    path = write_recipe(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_sample_alpha_is_between_0_and_1(tmp_path):
    path, error = load_error(tmp_path, "tokenizer: {sample_alpha: 1.5}")
    assert error == (f"{path}: tokenizer.sample_alpha: 1.5 is out of range; "
                     "expected between 0.0 and 1.0")
    with pytest.raises(ConfigError, match="data.train: list at least one corpus"):
        load_recipe(write_recipe(tmp_path, "data: {train: []}\n"))


def test_tokenizer_model_and_init_from_exclude_each_other(tmp_path):
    (tmp_path / "m.model").write_bytes(b"")
    (tmp_path / "p.pt").write_bytes(b"")
    path, error = load_error(tmp_path, "tokenizer: {model: m.model}\ntrain: {init_from: p.pt}")
    assert error == (f"{path}: tokenizer.model: train.init_from brings the parent's "
                     "SentencePiece model; leave tokenizer.model out")


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_every_shipped_recipe_is_valid(name):
    load_recipe(RECIPES / name, check_files=False)


def test_the_cpu_recipe_takes_another_pair_by_its_data_paths_alone(tmp_path, monkeypatch):
    """recipes/cpu-30m.yaml's second-pair check: `--set` on the data paths, nothing else."""
    monkeypatch.chdir(tmp_path)
    sets = []
    for split in ("train", "valid", "test"):
        for side, lang in (("src", "es"), ("tgt", "en")):
            (tmp_path / f"{split}.{lang}").write_text("hola\n", encoding="utf-8")
            sets.append(f"data.{split}.{side}={split}.{lang}")
    shipped = load_recipe(RECIPES / "cpu-30m.yaml", check_files=False)
    other = load_recipe(RECIPES / "cpu-30m.yaml", sets)
    assert other.data.train[0].src == tmp_path / "train.es"
    assert (other.data.valid.tgt, other.data.test[0].tgt) == (tmp_path / "valid.en",
                                                              tmp_path / "test.en")
    assert dataclasses.replace(other, data=shipped.data) == shipped


@pytest.mark.parametrize("value", [
    "data.train=[{src: a.es, tgt: a.en}, {src: b.es, tgt: b.en, weight: 2}]",
    "data.train={src: a.es, tgt: b.en}",
    "data={train: {src: a.es, tgt: a.en}, test: [{src: b.es, tgt: b.en}]}",
])
def test_set_paths_in_a_list_or_mapping_are_read_from_the_current_directory(
        tmp_path, monkeypatch, value):
    """As the scalar form (data.train.src=a.es) reads them: a recipe in r/ whose own paths
    are ../a.es does not read a --set value's a.es as r/a.es."""
    write_recipe(tmp_path, "")
    for name in ("b.es", "b.en"):
        (tmp_path / name).write_text("adios\n", encoding="utf-8")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.yaml").write_text(BASE.replace("a.e", "../a.e"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    recipe = load_recipe(Path("r/x.yaml"), [value])
    files = {tmp_path / p for pair in (*recipe.data.train, *recipe.data.test)
             for p in (pair.src, pair.tgt)}  # the recipe's own are relative to here too
    assert files <= {tmp_path / name for name in ("a.es", "a.en", "b.es", "b.en")}
    assert recipe.data.train[0].src == tmp_path / "a.es"


@pytest.mark.parametrize("value, key", [
    ("data.train=[{src: nope.es, tgt: a.en}]", "data.train[0].src"),
    ("data.train={src: nope.es, tgt: a.en}", "data.train.src"),
    ("data.train.src=nope.es", "data.train.src"),
])
def test_a_missing_training_file_is_named_as_the_recipe_gives_it(tmp_path, monkeypatch,
                                                                 value, key):
    path = write_recipe(tmp_path, BASE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_recipe(path, [value])
    assert str(info.value) == f"{path}: {key}: data file not found: {tmp_path / 'nope.es'}"


def test_upgrade_renames_old_keys_and_leaves_the_rest():
    from mtkit.config.upgrade import upgrade_recipe

    raw = {"data": {"train": {"src": "a", "tgt": "b"}}, "train": {"average_last": 1, "lr": 1}}
    assert upgrade_recipe(raw, "r") == {"data": raw["data"], "train": {"lr": 1, "average": "none"}}
    assert raw["train"] == {"average_last": 1, "lr": 1}  # the caller's dict is left as it was
    assert upgrade_recipe({"train": "x"}, "r") == {"train": "x"}  # the walker reports that


def test_a_fine_tuning_recipe_may_leave_model_and_tokenizer_to_its_parent(tmp_path):
    (tmp_path / "p.pt").write_bytes(b"")
    body = "data: {train: {src: a, tgt: b}}\ntrain: {init_from: p.pt}\n"
    recipe = load_recipe(write_recipe(tmp_path, body), check_files=False)
    assert recipe.inherited == ("tokenizer", "model")
    assert "inherited" not in recipe.to_dict()
    mine = load_recipe(write_recipe(tmp_path, body + "model: {d_model: 64, heads: 4}\n"),
                       check_files=False)
    assert mine.inherited == ("tokenizer",)
    alone = load_recipe(write_recipe(tmp_path, "data: {train: {src: a, tgt: b}}\n"),
                        check_files=False)
    assert alone.inherited == ()  # without a parent, the defaults
    with pytest.raises(ConfigError, match="tokenizer.kind: vocab is an imported model's"):
        load_recipe(write_recipe(tmp_path, "data: {train: {src: a, tgt: b}}\n"
                                 "tokenizer: {kind: vocab}\n"), check_files=False)
