"""A request body as the JSON value it holds: `parse_json` for every route, and
`parse_form` for LibreTranslate's form-encoded fields. Every problem is a 400
`RequestError` with one line of text."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

from mtkit.serve.api import RequestError


def parse_json(body: bytes) -> Any:
    """The body as JSON: UTF-8 (RFC 8259), standard numbers only (no NaN, Infinity), no
    string holding half a surrogate pair (a \\uD800 escape alone: not a character)."""
    try:
        text = body.decode("utf-8-sig")
        value = json.loads(text, parse_constant=_not_json)
    except UnicodeDecodeError:
        raise RequestError(400, "invalid JSON: the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise RequestError(400, f"invalid JSON: {exc.msg} (line {exc.lineno}, column "
                                f"{exc.colno})") from None
    except ValueError as exc:  # from _not_json
        raise RequestError(400, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(400, "invalid JSON: nested too deeply") from None
    # UTF-8 holds no surrogates: only an escape can bring one, which is rare, so only then
    # are the strings searched
    if _SURROGATE_ESCAPE.search(text):
        half = _half_surrogate(value)
        if half is not None:
            raise RequestError(400, f"invalid JSON: \\u{ord(half):04x} is half of a surrogate "
                                    "pair, not a character; send the text as UTF-8")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _half_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string of a parsed JSON value (keys too), or None.
    A loop, not recursion: the value may be nested as deeply as the parser allowed."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return found.group()
        elif isinstance(item, dict):
            todo.extend(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return None


def parse_form(body: bytes) -> dict[str, Any]:
    """An application/x-www-form-urlencoded body (LibreTranslate's clients send their
    fields so) as the JSON object it stands for: a field given twice, a list of strings;
    `alternatives` a number where it reads as one."""
    try:
        fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                           errors="strict")
    except UnicodeDecodeError:
        raise RequestError(400, "invalid form: the body is not UTF-8") from None
    payload: dict[str, Any] = {}
    for key, value in fields:
        if key in payload:
            before = payload[key]
            payload[key] = [*before, value] if isinstance(before, list) else [before, value]
        else:
            payload[key] = value
    alternatives = payload.get("alternatives")
    if isinstance(alternatives, str) and alternatives.strip().isdigit():
        payload["alternatives"] = int(alternatives)
    return payload


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")
