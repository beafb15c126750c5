"""A forced prefix and sampling through the Translator and TorchEngine on scripted models
(the line contract around them, line numbers as the samples' keys), and the checks of the
settings that choose them. (The searches themselves: test_prefix.py, test_sampling.py.)"""

from __future__ import annotations

import pytest
from builders import ScriptedModel, raw_recipe
from test_search import random_probs
from test_translator import LetterTokenizer, scripted_engine

from mtkit.config import DecodeConfig, Sampling, recipe_from_dict, replace_checked
from mtkit.decode.choices import OPTION_NAMES
from mtkit.decode.engine import TorchEngine
from mtkit.decode.search import Hypothesis
from mtkit.decode.stream import Prefixes
from mtkit.decode.translate import Translator
from mtkit.document.pipeline import DocumentOptions
from mtkit.errors import ConfigError

LINES = ["a b", "", "c", "d d a", "b", "a", "c c c", "d"]


def translator(seed: int = 31, **settings) -> Translator:
    engine = TorchEngine([ScriptedModel(random_probs(seed))], LetterTokenizer(),
                         recipe_from_dict(raw_recipe("a", "b")), "cpu")
    return Translator(engine, DecodeConfig(**settings))


SAMPLING = {"sampling": Sampling.parse("full"), "temperature": 1.5, "seed": 4, "nbest": 2}


def test_prefixes_start_the_translations_and_empty_lines_stay_empty():
    prefixes = ["b a", "c", "", "d", "", "", "", ""]
    forced = LetterTokenizer().encode_tgt(prefixes)
    for settings in ({"beam": 1}, {"beam": 3, "nbest": 2}, SAMPLING):
        found = translator(**settings).search(LINES, prefixes=prefixes)
        assert found[1] == [Hypothesis([], 0.0, 0.0)]  # the empty line, whatever its prefix
        for line, hyps, ids in zip(LINES, found, forced, strict=True):
            assert not line or all(h.tokens[: len(ids)] == ids for h in hyps), settings
    engine, _ = scripted_engine()  # its outputs are words a b c d
    assert Translator(engine, DecodeConfig(beam=1)).translate("a b", prefixes="c d") == "c d"
    with pytest.raises(ConfigError, match="2 prefixes for 8 lines"):
        translator().search(LINES, prefixes=["a", "b"])


@pytest.mark.parametrize("call", ["translate", "translate_aligned", "search"])
def test_one_string_of_prefixes_for_a_list_of_lines_is_refused(call):
    """A string as long as the list is not one prefix per character: each line would be
    forced to start with one letter of it, silently."""
    lines = ["a b", "c"]
    with pytest.raises(ConfigError, match="prefixes: one string where a list"):
        getattr(translator(beam=1), call)(lines, prefixes="ab")


@pytest.mark.parametrize(("call", "args", "message"), [
    ("translate", ([None],), r"lines\[0\]: NoneType None, not a string"),
    ("translate", (["a", 1],), r"lines\[1\]: int 1, not a string"),
    ("translate", (b"a b",), "lines: bytes; give text"),
    ("translate", (7,), "lines: int, not a list of strings"),
    ("translate_aligned", ([b"a"],), r"lines\[0\]: bytes"),
    ("translate_documents", (["a", None],), r"lines\[1\]: NoneType"),
    ("search", (["a"], None, [3]), r"prefixes\[0\]: int 3"),
    ("score", (["a"], [None]), r"target\[0\]: NoneType"),
    ("score", ("a", ["b"]), "source: one string where a list"),
])
def test_what_is_not_a_list_of_strings_is_a_config_error(call, args, message):
    """The Python API's inputs are checked where they come in: an int or None in the list
    failed deep in the tokenizer (a TypeError naming no line)."""
    with pytest.raises(ConfigError, match=message):
        getattr(translator(beam=1), call)(*args)


def test_any_iterable_of_strings_is_taken():
    lines = ["a b", "", "c"]
    expected = translator(beam=1).search(lines)
    assert translator(beam=1).search(line for line in lines) == expected
    assert translator(beam=1).search(tuple(lines)) == expected


class DottedTokenizer(LetterTokenizer):
    """Sentences for the splitter: each word is its first letter's token (Abe: a), and
    any token sampled is written as its id."""

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[self.ids[word[0].lower()] for word in line.split()] for line in lines]

    encode_tgt = encode_src

    def decode_tgt(self, sequences: list[list[int]]) -> list[str]:
        return [" ".join(str(token) for token in seq) for seq in sequences]  # any token


def test_split_lines_fed_in_pieces_are_numbered_as_one_input():
    """Lines are numbered by the lines translated so far, not by their sentences: a
    translator fed a file in pieces draws the samples of one fed it whole."""
    lines = ["Abe bo. Cid do.", "Cid.", "Dan ab. Bo.", "Abe."]

    def sampler() -> tuple[Translator, list[list[int]]]:
        engine = TorchEngine([ScriptedModel(random_probs(31))], DottedTokenizer(),
                             recipe_from_dict(raw_recipe("a", "b")), "cpu")
        chosen = Translator(engine, DecodeConfig(sampling=Sampling.parse("full"), seed=4))
        chosen.document = DocumentOptions(split=True)
        numbers: list[list[int]] = []
        search = engine.search

        def recorded(*args, lines=None, **kwargs):
            numbers.append(list(lines))
            return search(*args, lines=lines, **kwargs)

        engine.search = recorded
        return chosen, numbers

    whole, whole_numbers = sampler()
    expected = whole.translate(lines)
    parts, part_numbers = sampler()
    assert parts.translate(lines[:1]) + parts.translate(lines[1:3]) + \
        parts.translate(lines[3:]) == expected
    assert sorted(sum(part_numbers, [])) == sorted(sum(whole_numbers, [])) == \
        [0, 0, 1, 2, 2, 3]


def test_samples_are_the_same_whatever_the_batching():
    """Lines numbered as in their input (first_line) get the same samples in one call, in
    several, or in batches of any size."""
    whole = translator(**SAMPLING).search(LINES, 0)
    small = translator(**SAMPLING)
    small.max_tokens = 4  # a batch or two of lines at a time
    assert small.search(LINES, 0) == whole
    parts = translator(**SAMPLING)
    assert parts.search(LINES[:3], 0) + parts.search(LINES[3:], 3) == whole
    numbered = translator(**SAMPLING).search(LINES[::-1], numbers=range(7, -1, -1))
    assert numbered == whole[::-1]
    assert translator(**{**SAMPLING, "seed": 5}).search(LINES, 0) != whole
    assert all(len(hyps) == 2 for line, hyps in zip(LINES, whole, strict=True) if line)


def test_top_k_one_through_the_engine_is_greedy():
    greedy = translator(beam=1).search(LINES)
    one = translator(sampling=Sampling.parse("topk:1"), nbest=1).search(LINES)
    assert one == greedy


@pytest.mark.parametrize("changes, needle", [
    ({"sampling": "topp:0"}, "--sampling topp:0: topp:P needs a number 0 < P <= 1"),
    ({"sampling": "topp:1.5"}, "--sampling topp:1.5: topp:P needs"),
    ({"sampling": "topk:0"}, "--sampling topk:0: topk:K needs a whole number K >= 1"),
    ({"sampling": "topk:-1"}, "--sampling topk:-1: topk:K needs"),
    ({"sampling": "nucleus"}, "--sampling nucleus: expected none, full, topk:K or topp:P"),
    ({"temperature": 0.0}, "--temperature 0.0: 0.0 is out of range; expected above 0.0"),
    ({"temperature": -1.0}, "--temperature -1.0: -1.0 is out of range"),
    ({"seed": -3}, "--seed -3: -3 is out of range"),
    ({"nbest": 4, "beam": 2}, "--nbest (4) must not exceed --beam (2)"),
])
def test_bad_sampling_settings_are_one_line_errors_naming_the_option(changes, needle):
    with pytest.raises(ConfigError) as caught:
        replace_checked(DecodeConfig(), changes, OPTION_NAMES)
    assert needle in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_samples_need_no_beam_for_their_number():
    settings = replace_checked(DecodeConfig(beam=1), {"sampling": "topp:0.9", "nbest": 8},
                               OPTION_NAMES)
    assert (settings.sampling, settings.nbest, settings.beam) == (Sampling("topp", p=0.9), 8, 1)
    assert str(settings.sampling) == "topp:0.9"


def test_a_prefix_file_of_another_length_is_named_with_both_counts():
    prefixes = Prefixes(("a", "", "b"), "p.txt", "in.txt")
    assert prefixes.of(1, 2) == ("", "b")
    with pytest.raises(ConfigError, match=r"--prefix p.txt has 3 lines, in.txt more"):
        prefixes.of(2, 2)
    assert str(prefixes.mismatch(5)) == ("--prefix p.txt has 3 lines, in.txt 5: give one "
                                         "prefix per input line (an empty line for none)")
