"""The HTTP API of `mtkit serve`: request bodies checked into typed requests, results
shaped into answers. Pure: no web framework, no model.

Two request shapes: LibreTranslate's `POST /translate` (`q` a string or a list of
strings, each of which may hold several lines) and mtkit's `POST /v1/translate` (`text`,
one line per item, with per-request decode settings); and `POST /v1/score`, given
translations scored (`pairs`, or `source` and `target`: score_api.py); the bodies read
as JSON, or /translate's as LibreTranslate's form fields (bodies.py). Every problem is a
`RequestError`: an HTTP status and one line of text, which the app sends as `{"error":
"..."}`. 400: not JSON, or a value the server does not support; 401: API key; 403: a
regular expression the server does not take; 413: over a size limit; 415: a body neither
JSON nor (/translate) a form; 422: a field missing or of the wrong type or range; 503: the
queue is full.
"""

from __future__ import annotations

import difflib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from mtkit.config import DecodeConfig, Langs, replace_checked
from mtkit.decode.align import UNITS, Links
from mtkit.document.formats import check_format
from mtkit.document.pipeline import DocumentOptions
from mtkit.document.placeholders import protection
from mtkit.errors import ConfigError


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1_000_000  # a request's body
    max_lines: int = 1000  # lines of one request (LibreTranslate texts split at newlines)
    max_chars: int = 10_000  # characters of one line
    max_queue: int = 4096  # lines waiting for the model, all requests together
    max_beam: int = 16  # the largest beam (and nbest) a request may ask for
    # whether a request may bring regular expressions (`protect_regex`): a pattern can be
    # written to take minutes on a short line (catastrophic backtracking), and Python's re
    # cannot be stopped, so only a server whose clients are trusted takes them
    request_regex: bool = False


class RequestError(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after  # seconds, for 503


@dataclass(frozen=True)
class Translation:
    """One line's hypotheses, best first (an empty line: one empty hypothesis, score 0)."""

    texts: tuple[str, ...]
    scores: tuple[float, ...]
    tokens: int  # target tokens of the best hypothesis
    links: tuple[Links, ...] | None = None  # each hypothesis's alignment, when asked for


@dataclass(frozen=True)
class DocumentFields:
    """What a request asks of its lines as documents (mtkit.document); None: the
    server's decode settings (its model's recipe) decide."""

    split: bool | None = None
    protect: bool | None = None
    rules: tuple[str, ...] = ()  # placeholder rules beyond the server's
    patterns: tuple[str, ...] = ()  # placeholder patterns beyond the server's
    format: str = "text"  # html: each line (LibreTranslate: each text) an HTML fragment

    def options(self, settings: DecodeConfig) -> DocumentOptions:
        """The request's options over the server's settings (languages: not yet set)."""
        return DocumentOptions(
            format=self.format, split=settings.split if self.split is None else self.split,
            protection=protection(settings.protect if self.protect is None else self.protect,
                                  (*settings.protect_rules, *self.rules),
                                  (*settings.protect_regex, *self.patterns)))


@dataclass(frozen=True)
class LibreRequest:
    texts: tuple[str, ...]  # the q items
    single: bool  # q was one string (the answer is one string too)
    alternatives: int  # further translations per text
    lines: tuple[str, ...]  # every text's lines, text after text
    line_counts: tuple[int, ...]  # lines per text
    pair: tuple[str | None, str | None] = (None, None)  # a multilingual model's choice
    # LibreTranslate splits sentences; alternatives come from whole lines' n-best
    document: DocumentFields = DocumentFields(split=True)


@dataclass(frozen=True)
class NativeRequest:
    lines: tuple[str, ...]
    beam: int | None
    lenpen: float | None
    nbest: int | None
    scores: bool
    prefixes: tuple[str, ...] | None = None  # one per line ("" for none), or None
    # as sent, checked by native_settings: a rule (none, full, topk:K, topp:P), T, seed
    sampling: Any = None
    temperature: Any = None
    seed: Any = None
    alignments: str | None = None  # the unit to align in (word, subword), or None
    document: DocumentFields = DocumentFields()


NATIVE_FIELDS = ("text", "beam", "lenpen", "nbest", "scores", "prefix", "sampling",
                 "temperature", "seed", "alignments", "alignment_unit", "split", "protect",
                 "protect_rules", "protect_regex", "format", "api_key")
DECODE_FIELDS = ("beam", "lenpen", "nbest", "sampling", "temperature", "seed")
DECODE_NAMES = {name: name for name in DECODE_FIELDS}  # errors name the request's fields


# --------------------------------------------------------------------------- common


def check_api_key(expected: str | None, payload: Any, authorization: str | None) -> None:
    """401 unless the key is in the body (`api_key`) or `Authorization: Bearer KEY`."""
    if expected is None:
        return
    given = []
    if authorization and authorization[:7].lower() == "bearer ":
        given.append(authorization[7:].strip())
    if isinstance(payload, dict) and isinstance(payload.get("api_key"), str):
        given.append(payload["api_key"])
    if not any(hmac.compare_digest(key.encode(), expected.encode()) for key in given):
        what = "a wrong API key" if given else "no API key"
        raise RequestError(401, f"{what}: send it as api_key in the body or as "
                                "'Authorization: Bearer KEY'")


def split_lines(text: str) -> list[str]:
    """Lines as `mtkit translate` reads them: only \\n ends a line, a CR before it goes."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def check_sizes(lines: list[str], limits: Limits) -> None:
    if len(lines) > limits.max_lines:
        raise RequestError(413, f"{len(lines)} lines: a request may have at most "
                                f"{limits.max_lines}")
    for index, line in enumerate(lines):
        if len(line) > limits.max_chars:
            raise RequestError(413, f"line {index + 1} has {len(line)} characters: a line "
                                    f"may have at most {limits.max_chars}")


def decode_settings(base: DecodeConfig, limits: Limits, **changes: Any) -> DecodeConfig:
    """The server's settings with a request's changes (DECODE_FIELDS; None: not given),
    checked like command-line options."""
    try:
        settings = replace_checked(base, changes, DECODE_NAMES, where="request")
    except ConfigError as exc:
        raise RequestError(422, str(exc)) from None
    for name in ("beam", "nbest"):  # nbest: samples, which no beam bounds
        value, most = getattr(settings, name), max(limits.max_beam, getattr(base, name))
        if value > most:
            raise RequestError(422, f"{name} {value}: this server allows at most {most}")
    return settings


def _object(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise RequestError(422, f"the body must be a JSON object, got {_kind(payload)}")
    return payload


def _known_fields(body: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in body:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise RequestError(422, f"unknown field {key!r}; {hint}")


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _string(payload: dict[str, Any], key: str, default: str | None = None) -> str:
    value = payload.get(key, default)
    if value is None:
        raise RequestError(422, f"{key}: required")
    if not isinstance(value, str):
        raise RequestError(422, f"{key}: expected a string, got {_kind(value)}")
    return value


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list):
        raise RequestError(422, f"{key}: expected a list of strings, got {_kind(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise RequestError(422, f"{key}[{index}]: expected a string, got {_kind(item)}")
    return value


# --------------------------------------------------------------------------- LibreTranslate


def libre_request(payload: Any, langs: Langs, limits: Limits,
                  languages: tuple[str, ...] = ()) -> LibreRequest:
    """The request checked; `languages`: a multilingual model's codes, any two of which
    `source` and `target` may name (source auto: the model's default)."""
    body = _object(payload)
    if "q" not in body:
        raise RequestError(422, "q: required (a string or a list of strings)")
    single = isinstance(body["q"], str)
    if not single and not isinstance(body["q"], list):
        raise RequestError(422, f"q: expected a string or a list of strings, got "
                                f"{_kind(body['q'])}")
    texts = [body["q"]] if single else _strings(body["q"], "q")
    source, target = _string(body, "source"), _string(body, "target")
    if languages:
        for key, code in (("source", source), ("target", target)):
            if code not in languages and not (key == "source" and code == "auto"):
                close = difflib.get_close_matches(code, languages, n=3, cutoff=0.5)
                hint = f" (closest: {', '.join(close)})" if close else " (see /languages)"
                raise RequestError(400, f"{key} {code}: not a language of this model{hint}")
    elif source not in ("auto", langs.src) or target != langs.tgt:
        raise RequestError(400, f"{source} -> {target} is not supported: this server "
                                f"translates {langs.src} -> {langs.tgt}")
    text_format = _format(body)
    alternatives = body.get("alternatives", 0)
    if isinstance(alternatives, bool) or not isinstance(alternatives, int):
        raise RequestError(422, f"alternatives: expected an integer, got {_kind(alternatives)}")
    if not 0 <= alternatives < limits.max_beam:
        raise RequestError(422, f"alternatives {alternatives}: expected between 0 and "
                                f"{limits.max_beam - 1}")
    if alternatives and text_format == "html":
        raise RequestError(400, "alternatives: not with format html (each text's best "
                                "translation goes into its markup)")
    per_text = [split_lines(text) for text in texts]
    check_sizes([line for text_lines in per_text for line in text_lines], limits)
    if text_format == "html":  # a text is one fragment; the limits still count its lines
        per_text = [[text] for text in texts]
    lines = [line for text_lines in per_text for line in text_lines]
    pair = (None if source == "auto" else source, target) if languages else (None, None)
    return LibreRequest(tuple(texts), single, alternatives, tuple(lines),
                        tuple(len(t) for t in per_text), pair,
                        DocumentFields(split=not alternatives, format=text_format))


def _format(body: dict[str, Any]) -> str:
    """`format`: text or html (absent, null or empty: text); anything else, 400 (as
    LibreTranslate)."""
    text_format = "text" if body.get("format") in (None, "") else _string(body, "format")
    try:
        return check_format(text_format, "format")
    except ConfigError as exc:
        raise RequestError(400, str(exc)) from None


def libre_settings(base: DecodeConfig, request: LibreRequest, limits: Limits) -> DecodeConfig:
    """n alternatives: the n + 1 best of a beam at least that wide."""
    if not request.alternatives:
        return base
    nbest = request.alternatives + 1
    return decode_settings(base, limits, beam=max(base.beam, nbest), nbest=nbest)


def libre_answer(request: LibreRequest, results: list[Translation]) -> dict[str, Any]:
    """{"translatedText": str | [str]} and, when asked for, "alternatives": [str] | [[str]]
    (the k-th alternative of a text of several lines joins their k-th hypotheses)."""
    translated, alternatives, start = [], [], 0
    for count in request.line_counts:
        lines = results[start : start + count]
        start += count
        best = "\n".join(line.texts[0] for line in lines)
        translated.append(best)
        others: list[str] = []
        for k in range(1, request.alternatives + 1):
            text = "\n".join(line.texts[min(k, len(line.texts) - 1)] for line in lines)
            if text != best and text not in others:  # a beam can spell one text twice
                others.append(text)
        alternatives.append(others)
    answer: dict[str, Any] = {"translatedText": translated[0] if request.single else translated}
    if request.alternatives:
        answer["alternatives"] = alternatives[0] if request.single else alternatives
    return answer


# --------------------------------------------------------------------------- native


def native_request(payload: Any, limits: Limits) -> NativeRequest:
    body = _object(payload)
    _known_fields(body, NATIVE_FIELDS)
    if "text" not in body:
        raise RequestError(422, "text: required (a list of strings, one line each)")
    lines = _strings(body["text"], "text")
    html = _format(body) == "html"  # an HTML fragment may span lines
    for index, line in enumerate(lines):
        if "\n" in line and not html:
            raise RequestError(422, f"text[{index}]: holds a line break; send one line per item")
    check_sizes([part for line in lines for part in split_lines(line)] if html else lines,
                limits)
    scores = body.get("scores", False)
    if not isinstance(scores, bool):
        raise RequestError(422, f"scores: expected true or false, got {_kind(scores)}")
    return NativeRequest(tuple(lines), body.get("beam"), body.get("lenpen"), body.get("nbest"),
                         scores, _prefixes(body.get("prefix"), len(lines), limits),
                         body.get("sampling"), body.get("temperature"), body.get("seed"),
                         _alignments(body), _document(body, limits))


def _document(body: dict[str, Any], limits: Limits) -> DocumentFields:
    """`split`, `protect` (true or false; absent: the server's), `protect_rules` (rule
    names to switch on) and `protect_regex` (further patterns, where the server takes
    them: `Limits.request_regex`), checked."""
    for key in ("split", "protect"):
        if not isinstance(body.get(key, False), bool):
            raise RequestError(422, f"{key}: expected true or false, got {_kind(body[key])}")
    rules = tuple(_strings(body.get("protect_rules", []), "protect_rules"))
    patterns = tuple(_strings(body.get("protect_regex", []), "protect_regex"))
    if patterns and not limits.request_regex:
        raise RequestError(403, "protect_regex: this server takes no regular expressions "
                                "in requests (its operator may allow them: serve "
                                "--request-regex, or give the patterns to serve "
                                "--protect-regex)")
    try:
        protection(True, rules, patterns, names=("protect_rules", "protect_regex"))
    except ConfigError as exc:
        raise RequestError(422, str(exc)) from None
    return DocumentFields(body.get("split"), body.get("protect"), rules, patterns,
                          _format(body))


def documents_apply(request: NativeRequest, settings: DecodeConfig,
                    options: DocumentOptions) -> bool:
    """Whether the request's lines go through mtkit.document (`options`: the request's
    over the server's): its best translation of lines without prefixes, aligned in words
    if at all; `split` with anything else: 422 (protection alone is left out then: the
    lines go as they are)."""
    if options.split or options.format == "html":
        what, why = (("format html", "each text's best translation goes into its markup")
                     if options.format == "html" else
                     ("split", "a line's sentences are translated one by one"))
        for conflict, name in ((settings.nbest > 1, "nbest > 1"), (request.scores, "scores"),
                               (request.prefixes is not None, "prefix"),
                               (request.alignments == "subword", "alignment_unit subword"),
                               (options.format == "html" and request.alignments is not None,
                                "alignments")):
            if conflict:
                raise RequestError(422, f"{what}: not with {name} ({why})")
    return options.active and settings.nbest == 1 and request.prefixes is None \
        and request.alignments != "subword"


def _alignments(body: dict[str, Any]) -> str | None:
    """`alignments` true: the unit of `alignment_unit` (default word); None otherwise."""
    wanted, unit = body.get("alignments", False), body.get("alignment_unit")
    if not isinstance(wanted, bool):
        raise RequestError(422, f"alignments: expected true or false, got {_kind(wanted)}")
    if unit is not None and unit not in UNITS:
        raise RequestError(422, f"alignment_unit: expected {' or '.join(UNITS)}, got "
                                f"{json.dumps(unit)}")
    if unit is not None and not wanted:
        raise RequestError(422, "alignment_unit: give alignments: true too")
    return (unit or "word") if wanted else None


def _prefixes(value: Any, lines: int, limits: Limits) -> tuple[str, ...] | None:
    """`prefix`: null, or one string per line of `text` ("" for none), each a line of
    at most `--max-chars` (encoded and forced as a target line is)."""
    if value is None:
        return None
    prefixes = _strings(value, "prefix")
    if len(prefixes) != lines:
        raise RequestError(422, f"prefix: {len(prefixes)} items for {lines} lines of text; "
                                'give one per line ("" for none)')
    for index, prefix in enumerate(prefixes):
        if "\n" in prefix:
            raise RequestError(422, f"prefix[{index}]: holds a line break")
        if len(prefix) > limits.max_chars:
            raise RequestError(413, f"prefix[{index}] has {len(prefix)} characters: a line "
                                    f"may have at most {limits.max_chars}")
    return tuple(prefixes)


def native_settings(base: DecodeConfig, request: NativeRequest, limits: Limits) -> DecodeConfig:
    return decode_settings(base, limits, **{name: getattr(request, name)
                                            for name in DECODE_FIELDS})


def native_answer(settings: DecodeConfig, results: list[Translation], scores: bool,
                  truncated: int) -> dict[str, Any]:
    """{"translations": [{"text": best, "hypotheses": [{"text", "score"?, "alignment"?}]}],
    where "alignment" (when asked for) is a list of [i, j] links; the settings
    used (sampling's only when sampling), and how many lines were truncated to the model's
    length}. Samples come in the engine's order (mtkit's: as drawn), not ranked."""
    translations = []
    for line in results:
        hypotheses: list[dict[str, Any]] = [
            {"text": text, "score": score} if scores else {"text": text}
            for text, score in zip(line.texts, line.scores)]
        for hypothesis, links in zip(hypotheses, line.links or ()):
            hypothesis["alignment"] = [list(pair) for pair in links]
        translations.append({"text": line.texts[0], "hypotheses": hypotheses})
    answer = {"translations": translations, "beam": settings.beam, "lenpen": settings.lenpen,
              "nbest": settings.nbest, "truncated": truncated}
    if settings.sampling.kind != "none":
        answer.update(sampling=str(settings.sampling), temperature=settings.temperature,
                      seed=settings.seed)
    return answer
