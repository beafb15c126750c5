"""Request checking and answer shaping of `mtkit serve` (mtkit/serve_api.py), pure: every
bad body gets its status and a one-line message; good bodies become typed requests; the
answers have LibreTranslate's and the native shape, and /v1/score's."""

from __future__ import annotations

import json

import pytest

from mtkit.config import DecodeConfig, Langs
from mtkit.serve.api import (
    Limits,
    RequestError,
    Translation,
    check_api_key,
    documents_apply,
    libre_answer,
    libre_request,
    libre_settings,
    native_answer,
    native_request,
    native_settings,
    split_lines,
)
from mtkit.serve.bodies import parse_form, parse_json
from mtkit.serve.score_api import score_answer, score_request

LANGS = Langs("es", "en")
LIMITS = Limits(max_body_bytes=1000, max_lines=4, max_chars=20, max_queue=10, max_beam=8,
                request_regex=True)
BASE = DecodeConfig(beam=2, lenpen=1.0)


def error(call, *args) -> RequestError:
    with pytest.raises(RequestError) as caught:
        call(*args)
    assert "\n" not in caught.value.message
    return caught.value


def libre(**body):
    return libre_request({"source": "es", "target": "en", **body}, LANGS, LIMITS)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("body, needle", [
    (b"{", "invalid JSON: Expecting property name"),
    (b"", "invalid JSON: Expecting value (line 1, column 1)"),
    (b'{"q": "a",}', "invalid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"\xc3", "not UTF-8"),
    (b"NaN?", "invalid JSON"),
    (b'{"lenpen": NaN}', "invalid JSON: NaN is not a JSON number"),
    (b'{"lenpen": -Infinity}', "-Infinity is not a JSON number"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON: nested too deeply"),
    (b'{"q": "a', "invalid JSON: Unterminated string starting at (line 1, column 7)"),
    # half a surrogate pair is no character: not in a text, a key, or deep in a list
    (b'{"q": "Hola \\ud800 mundo"}', "\\ud800 is half of a surrogate pair"),
    (b'{"q": ["a", ["\\udfff"]]}', "\\udfff is half of a surrogate pair"),
    (b'{"\\udc00": 1}', "\\udc00 is half"),
    (b'{"q": "\\ude00\\ud83d"}', "\\ude00 is half"),  # a pair in the wrong order
])
def test_invalid_json_is_400(body, needle):
    found = error(parse_json, body)
    assert found.status == 400 and needle in found.message, found.message


def test_json_bodies():
    assert parse_json(b'{"q": "\\u00e1", "n": 1e400}') == {"q": "\u00e1", "n": float("inf")}
    assert parse_json(b'{"q": "\\ud83d\\ude00"}') == {"q": "\U0001f600"}  # a whole pair
    assert parse_json(b'{"q": "\\\\ud800"}') == {"q": "\\ud800"}  # an escaped backslash
    assert parse_json("\ufeff[1]".encode()) == [1]  # a UTF-8 byte order mark is harmless


@pytest.mark.parametrize("payload, status, needle", [
    ([], 422, "the body must be a JSON object, got a list"),
    ("q", 422, "got a string"),
    ({"source": "es", "target": "en"}, 422, "q: required"),
    ({"q": 5, "source": "es", "target": "en"}, 422,
     "q: expected a string or a list of strings, got a number"),
    ({"q": ["a", None], "source": "es", "target": "en"}, 422, "q[1]: expected a string, got null"),
    ({"q": "a", "target": "en"}, 422, "source: required"),
    ({"q": "a", "source": "es"}, 422, "target: required"),
    ({"q": "a", "source": 1, "target": "en"}, 422, "source: expected a string"),
    ({"q": "a", "source": "fr", "target": "en"}, 400, "fr -> en is not supported: this "
                                                      "server translates es -> en"),
    ({"q": "a", "source": "es", "target": "de"}, 400, "es -> de is not supported"),
    ({"q": "a", "source": "es", "target": "en", "format": "xml"}, 400,
     "format xml: expected text or html"),
    ({"q": "a", "source": "es", "target": "en", "format": "htm"}, 400, "did you mean html?"),
    ({"q": "a", "source": "es", "target": "en", "format": "html", "alternatives": 1}, 400,
     "alternatives: not with format html"),
    ({"q": "<p>a</p>\n<p>b</p>\n<p>c</p>\n<p>d</p>\n<p>e</p>", "source": "es",
      "target": "en", "format": "html"}, 413, "5 lines"),  # a page's lines count
    ({"q": "a", "source": "es", "target": "en", "alternatives": "2"}, 422,
     "alternatives: expected an integer, got a string"),
    ({"q": "a", "source": "es", "target": "en", "alternatives": True}, 422,
     "got a boolean"),
    ({"q": "a", "source": "es", "target": "en", "alternatives": 8}, 422,
     "alternatives 8: expected between 0 and 7"),
    ({"q": "a", "source": "es", "target": "en", "alternatives": -1}, 422, "alternatives -1"),
    ({"q": "a\nb\nc\nd\ne", "source": "es", "target": "en"}, 413,
     "5 lines: a request may have at most 4"),
    ({"q": ["a\nb", "c\nd", "e"], "source": "es", "target": "en"}, 413, "5 lines"),
    ({"q": ["short", "x" * 21], "source": "es", "target": "en"}, 413,
     "line 2 has 21 characters: a line may have at most 20"),
])
def test_bad_libretranslate_bodies(payload, status, needle):
    found = error(libre_request, payload, LANGS, LIMITS)
    assert (found.status, needle in found.message) == (status, True), found.message


@pytest.mark.parametrize("payload, status, needle", [
    ({"q": "a"}, 422, "unknown field 'q'; known: text, beam"),
    ({"text": ["a"], "nbets": 2}, 422, "unknown field 'nbets'; did you mean 'nbest'?"),
    ({}, 422, "text: required"),
    ({"text": "a"}, 422, "text: expected a list of strings, got a string"),
    ({"text": [1]}, 422, "text[0]: expected a string, got a number"),
    ({"text": ["a", "b\nc"]}, 422, "text[1]: holds a line break"),
    ({"text": ["a"] * 5}, 413, "5 lines"),
    ({"text": ["x" * 21]}, 413, "line 1 has 21 characters"),
    ({"text": ["a"], "scores": "yes"}, 422, "scores: expected true or false, got a string"),
    ({"text": ["a", "b"], "prefix": ["x"]}, 422, "prefix: 1 items for 2 lines of text"),
    ({"text": ["a"], "prefix": "x"}, 422, "prefix: expected a list of strings"),
    ({"text": ["a"], "prefix": [3]}, 422, "prefix[0]: expected a string, got a number"),
    ({"text": ["a"], "prefix": ["x\ny"]}, 422, "prefix[0]: holds a line break"),
    ({"text": ["a", "b"], "prefix": ["", "x" * 21]}, 413,
     "prefix[1] has 21 characters: a line may have at most 20"),
    ({"text": ["a"], "sampel": "full"}, 422, "did you mean 'sampling'?"),
    ({"text": ["a"], "alignments": "word"}, 422, "alignments: expected true or false"),
    ({"text": ["a"], "alignments": True, "alignment_unit": "char"}, 422,
     'alignment_unit: expected word or subword, got "char"'),
    ({"text": ["a"], "alignment_unit": "subword"}, 422,
     "alignment_unit: give alignments: true too"),
    ({"text": ["a"], "alignment": True}, 422, "did you mean 'alignments'?"),
    ({"text": ["a"], "split": "yes"}, 422, "split: expected true or false, got a string"),
    ({"text": ["a"], "protect": 1}, 422, "protect: expected true or false, got a number"),
    ({"text": ["a"], "protect_rules": "number"}, 422, "protect_rules: expected a list"),
    ({"text": ["a"], "protect_rules": ["dates"]}, 422,
     "protect_rules dates: not a placeholder rule; expected printf"),
    ({"text": ["a"], "protect_regex": ["(x"]}, 422,
     "protect_regex '(x': not a valid regular expression"),
    ({"text": ["a"], "protect_regex": [""]}, 422, "matches empty text"),
    ({"text": ["a"], "splt": True}, 422, "did you mean 'split'?"),
    ({"text": ["a"], "format": "xml"}, 400, "format xml: expected text or html"),
    ({"text": ["a"], "format": 1}, 422, "format: expected a string"),
    ({"text": ["<p>a</p>\n" * 5], "format": "html"}, 413, "6 lines"),
])
def test_bad_native_bodies(payload, status, needle):
    found = error(native_request, payload, LIMITS)
    assert (found.status, needle in found.message) == (status, True), found.message


@pytest.mark.parametrize("changes, needle", [
    ({"beam": 0}, "beam 0: 0 is out of range; expected between 1 and 1000"),
    ({"beam": "wide"}, "beam wide: expected an integer"),
    ({"beam": True}, "expected an integer"),
    ({"beam": 2.5}, "expected an integer"),
    ({"lenpen": "1"}, "lenpen 1: expected a number"),
    ({"lenpen": -1}, "lenpen -1: -1.0 is out of range"),
    ({"nbest": 3}, "nbest (3) must not exceed beam (2)"),
    ({"beam": 9}, "beam 9: this server allows at most 8"),
    ({"sampling": "topp:0"}, "sampling topp:0: topp:P needs a number 0 < P <= 1"),
    ({"sampling": "topk:-1"}, "sampling topk:-1: topk:K needs a whole number K >= 1"),
    ({"sampling": 5}, "sampling 5: expected none, full, topk:K or topp:P"),
    ({"temperature": 0}, "temperature 0: 0.0 is out of range; expected above 0.0"),
    ({"temperature": "hot"}, "temperature hot: expected a number"),
    ({"seed": -1}, "seed -1: -1 is out of range"),
    ({"seed": 1.5}, "seed 1.5: expected an integer"),
    ({"sampling": "full", "nbest": 9}, "nbest 9: this server allows at most 8"),
])
def test_bad_decode_settings_are_422_naming_the_field(changes, needle):
    request = native_request({"text": ["a"], **changes}, LIMITS)
    found = error(native_settings, BASE, request, LIMITS)
    assert found.status == 422 and needle in found.message, found.message


def test_a_request_may_sample_and_force_prefixes():
    request = native_request({"text": ["a", "b"], "prefix": ["x y", ""], "sampling": "topk:5",
                              "temperature": 0.7, "seed": 12, "nbest": 4}, LIMITS)
    assert request.prefixes == ("x y", "")
    settings = native_settings(BASE, request, LIMITS)
    assert (str(settings.sampling), settings.temperature, settings.seed) == ("topk:5", 0.7, 12)
    assert (settings.nbest, settings.beam) == (4, 2)  # samples: more than the beam
    answer = native_answer(settings, [line("one")], scores=False, truncated=0)
    assert (answer["sampling"], answer["temperature"], answer["seed"]) == ("topk:5", 0.7, 12)
    assert native_request({"text": ["a"], "prefix": None}, LIMITS).prefixes is None


def test_a_request_may_ask_for_alignments():
    assert native_request({"text": ["a"]}, LIMITS).alignments is None
    assert native_request({"text": ["a"], "alignments": True}, LIMITS).alignments == "word"
    request = native_request({"text": ["a", ""], "alignments": True,
                              "alignment_unit": "subword"}, LIMITS)
    assert request.alignments == "subword"
    aligned = Translation(("x y", "y"), (-1.0, -2.0), 2, (((0, 1), (1, 0)), ((0, 0),)))
    empty = Translation(("",), (0.0,), 0, ((),))
    answer = native_answer(BASE, [aligned, empty], scores=True, truncated=0)
    first, second = answer["translations"]
    assert first["hypotheses"] == [{"text": "x y", "score": -1.0, "alignment": [[0, 1], [1, 0]]},
                                   {"text": "y", "score": -2.0, "alignment": [[0, 0]]}]
    assert second["hypotheses"] == [{"text": "", "score": 0.0, "alignment": []}]
    assert "alignment" not in native_answer(BASE, [line("x")], False, 0)[
        "translations"][0]["hypotheses"][0]


def test_a_request_may_split_and_choose_its_placeholders():
    def applies(request) -> bool:
        settings = native_settings(BASE, request, LIMITS)
        return documents_apply(request, settings, request.document.options(settings))

    default = native_request({"text": ["a"]}, LIMITS)
    options = default.document.options(BASE)
    assert not options.split and options.protection.enabled
    assert applies(default)  # protection is on by default
    request = native_request({"text": ["a"], "split": True, "protect_rules": ["number"],
                              "protect_regex": ["ID-\\d+"]}, LIMITS)
    options = request.document.options(DecodeConfig(protect_regex=("X",)))
    assert options.split and "number" in options.protection.rules
    assert options.protection.patterns == ("X", "ID-\\d+")  # the server's and the request's
    assert not native_request({"text": ["a"]}, LIMITS).document.options(
        DecodeConfig(protect=False)).protection.enabled  # the server's settings by default
    off = native_request({"text": ["a"], "protect": False}, LIMITS)
    assert not applies(off)  # nothing to do: lines go as they are
    for fields, name in (({"nbest": 2}, "nbest > 1"), ({"scores": True}, "scores"),
                         ({"prefix": ["x"]}, "prefix"),
                         ({"alignments": True, "alignment_unit": "subword"},
                          "alignment_unit subword")):
        split = native_request({"text": ["a"], "split": True, **fields}, LIMITS)
        found = error(applies, split)
        assert found.status == 422 and f"split: not with {name}" in found.message
        alone = native_request({"text": ["a"], **fields}, LIMITS)  # placeholders: kept
        assert applies(alone) == (name == "scores")  # (a line's score: its masked line's)
    assert libre(q="a").document.split and not libre(q="a", alternatives=1).document.split


def test_html_requests_keep_each_text_whole_and_go_through_the_documents():
    request = libre(q=["<p>uno</p>\n<p>dos</p>", "tres"], format="html")
    assert request.lines == ("<p>uno</p>\n<p>dos</p>", "tres")  # one fragment per text
    assert request.line_counts == (1, 1) and request.document.format == "html"
    assert libre_answer(request, [line("<p>one</p>\n<p>two</p>"), line("three")]) == {
        "translatedText": ["<p>one</p>\n<p>two</p>", "three"]}
    native = native_request({"text": ["<p>a</p>\n<p>b</p>"], "format": "html"}, LIMITS)
    settings = native_settings(BASE, native, LIMITS)
    options = native.document.options(settings)
    assert options.format == "html" and documents_apply(native, settings, options)
    for fields, name in (({"nbest": 2}, "nbest > 1"), ({"scores": True}, "scores"),
                         ({"prefix": ["x"]}, "prefix"), ({"alignments": True}, "alignments")):
        request = native_request({"text": ["a"], "format": "html", **fields}, LIMITS)
        settings = native_settings(BASE, request, LIMITS)
        found = error(documents_apply, request, settings, request.document.options(settings))
        assert found.status == 422 and f"format html: not with {name}" in found.message


def test_decode_settings_a_request_may_change():
    request = native_request({"text": ["a"], "beam": 4, "lenpen": 0.6, "nbest": 3}, LIMITS)
    settings = native_settings(BASE, request, LIMITS)
    assert (settings.beam, settings.lenpen, settings.nbest) == (4, 0.6, 3)
    assert settings.max_len_a == BASE.max_len_a  # the rest stays the server's
    assert native_settings(BASE, native_request({"text": []}, LIMITS), LIMITS) == BASE
    wide = DecodeConfig(beam=12)  # a server started wider than --max-beam keeps its beam
    assert libre_settings(wide, libre(q="a", alternatives=2), LIMITS).beam == 12


# --------------------------------------------------------------------------- API key

@pytest.mark.parametrize("payload, header, ok", [
    ({"api_key": "s3cret"}, None, True),
    ({}, "Bearer s3cret", True),
    ({}, "bearer s3cret", True),
    ({"api_key": "wrong"}, "Bearer s3cret", True),
    ({}, None, False),
    ({"api_key": "wrong"}, None, False),
    ({}, "Bearer wrong", False),
    ({}, "Basic s3cret", False),
    ({"api_key": 5}, None, False),
    ([], None, False),
])
def test_api_key(payload, header, ok):
    if ok:
        check_api_key("s3cret", payload, header)
    else:
        found = error(check_api_key, "s3cret", payload, header)
        assert found.status == 401 and "Authorization: Bearer KEY" in found.message
    check_api_key(None, payload, header)  # no key set: anything goes


# --------------------------------------------------------------------------- good input


def test_libretranslate_text_is_split_into_lines_as_translate_reads_them():
    assert split_lines("a\r\nb\n\nc\r") == ["a", "b", "", "c\r"[:-1]]
    request = libre(q=["uno\r\ndos", "tres", ""])
    assert request.lines == ("uno", "dos", "tres", "")
    assert request.line_counts == (2, 1, 1)
    assert not request.single
    assert libre(q="uno").single
    assert libre(q="uno", source="auto").lines == ("uno",)
    assert libre(q=[]).lines == ()


def line(*texts: str) -> Translation:
    return Translation(texts, tuple(-0.5 * i for i in range(len(texts))), 3)


def test_libretranslate_answers():
    request = libre(q="uno\ndos")
    assert libre_answer(request, [line("one"), line("two")]) == {"translatedText": "one\ntwo"}
    request = libre(q=["uno", "dos", ""])
    assert libre_answer(request, [line("one"), line("two"), line("")]) == {
        "translatedText": ["one", "two", ""]}


def test_libretranslate_alternatives():
    request = libre(q="uno", alternatives=2)
    settings = libre_settings(BASE, request, LIMITS)
    assert (settings.beam, settings.nbest) == (3, 3)  # the 3 best of a beam of 3
    assert libre_answer(request, [line("one", "a one", "the one")]) == {
        "translatedText": "one", "alternatives": ["a one", "the one"]}
    # a beam can spell one text twice: alternatives are distinct, and not the translation
    assert libre_answer(request, [line("one", "one", "uno")])["alternatives"] == ["uno"]
    request = libre(q=["uno\ndos", "tres"], alternatives=1)
    answer = libre_answer(request, [line("one", "1"), line("two", "2"), line("three", "3")])
    assert answer == {"translatedText": ["one\ntwo", "three"],
                      "alternatives": [["1\n2"], ["3"]]}
    # an empty line has one hypothesis: it stays empty in every alternative
    request = libre(q="uno\n", alternatives=1)
    assert libre_answer(request, [line("one", "1"), line("")])["alternatives"] == ["1\n"]


def test_native_answers():
    results = [line("one", "a one"), line("")]
    settings = DecodeConfig(beam=2, nbest=2)
    answer = native_answer(settings, results, scores=True, truncated=1)
    assert answer == {
        "translations": [
            {"text": "one", "hypotheses": [{"text": "one", "score": 0.0},
                                           {"text": "a one", "score": -0.5}]},
            {"text": "", "hypotheses": [{"text": "", "score": 0.0}]}],
        "beam": 2, "lenpen": 1.0, "nbest": 2, "truncated": 1}
    plain = native_answer(settings, results, scores=False, truncated=0)
    assert plain["translations"][0]["hypotheses"] == [{"text": "one"}, {"text": "a one"}]
    json.dumps(answer)  # JSON-ready as it is


def test_score_requests_take_pairs_or_parallel_lists():
    pairs = score_request({"pairs": [["uno", "one"], ["", ""]], "tag": "BT"}, LIMITS)
    lists = score_request({"source": ["uno", ""], "target": ["one", ""], "tag": "BT"}, LIMITS)
    assert pairs == lists
    assert (pairs.sources, pairs.targets, pairs.tag) == (("uno", ""), ("one", ""), "BT")
    assert score_request({"pairs": []}, LIMITS).tag is None


@pytest.mark.parametrize("payload, status, needle", [
    ({}, 422, "pairs (a list of [source, target]), or source and target"),
    ({"source": ["a"]}, 422, "or source and target"),
    ({"pairs": [["a", "b"]], "source": ["a"]}, 422, "not both"),
    ({"pairs": "a"}, 422, "pairs: expected a list of [source, target], got a string"),
    ({"pairs": [["a"]]}, 422, "pairs[0]: expected [source, target]"),
    ({"pairs": [["a", 1]]}, 422, "pairs[0][1]: expected a string, got a number"),
    ({"pairs": [["a", "b\nc"]]}, 422, "pairs[0][1]: holds a line break"),
    ({"source": ["a", "b"], "target": ["a"]}, 422, "source has 2 items, target 1"),
    ({"source": ["a\nb"], "target": ["a"]}, 422, "source[0]: holds a line break"),
    ({"pairs": [["a", "b"]] * 5}, 413, "5 lines"),
    ({"pairs": [["a", "x" * 21]]}, 413, "line 1 has 21 characters"),
    ({"pairs": [], "tag": 3}, 422, "tag: expected a string, got a number"),
    ({"pairs": [], "tags": "BT"}, 422, "unknown field 'tags'; did you mean 'tag'?"),
])
def test_bad_score_bodies(payload, status, needle):
    found = error(score_request, payload, LIMITS)
    assert (found.status, needle in found.message) == (status, True), found.message


def test_score_answers():
    from mtkit.decode.scoring import PairScore

    scores = [PairScore((-1.0, -0.5, -1.5)), PairScore((-0.25,))]
    answer = score_answer(scores, None)
    assert answer == {"scores": [{"total": -3.0, "per_token": -1.0, "tokens": 3},
                                 {"total": -0.25, "per_token": -0.25, "tokens": 1}],
                      "tag": None}
    assert scores[0].line() == "-3.0000\t-1.0000"
    json.dumps(answer)


def test_an_empty_or_null_format_is_text_as_in_libretranslate():
    for value in (None, ""):
        assert libre(q="a", format=value).document.format == "text"
        assert native_request({"text": ["a"], "format": value}, LIMITS).document.format == "text"


def test_form_bodies_read_as_the_json_object_they_stand_for():
    body = b"q=Hola+mundo&source=es&target=en&format=&alternatives=2&api_key=k%26y"
    assert parse_form(body) == {"q": "Hola mundo", "source": "es", "target": "en",
                                "format": "", "alternatives": 2, "api_key": "k&y"}
    assert parse_form(b"q=a&q=b&q=c")["q"] == ["a", "b", "c"]  # repeated: a list
    assert parse_form(b"alternatives=two")["alternatives"] == "two"  # left for the check
    assert parse_form(b"") == {}
    request = libre_request({**parse_form(b"q=a%0Ab&source=es&target=en")}, LANGS, LIMITS)
    assert request.lines == ("a", "b") and request.single
    found = error(parse_form, b"q=%FF")
    assert found.status == 400 and "not UTF-8" in found.message


def test_request_regexes_need_the_servers_consent():
    body = {"text": ["a"], "protect_regex": ["ID-\\d+"]}
    found = error(native_request, body, Limits())
    assert found.status == 403 and "serve --request-regex" in found.message
    assert native_request({"text": ["a"], "protect_regex": []}, Limits()).document.patterns == ()
    assert native_request(body, LIMITS).document.patterns == ("ID-\\d+",)
