"""The body and the answer of `POST /v1/score` (mtkit serve): given translations
scored. Pure, as api.py, whose checks it shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mtkit.serve.api import (
    Limits,
    RequestError,
    _kind,
    _known_fields,
    _object,
    _strings,
    check_sizes,
)


@dataclass(frozen=True)
class ScoreRequest:
    """`POST /v1/score`: given translations to score, as parallel lists."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    tag: str | None  # None: the server's --tag (if any)


SCORE_FIELDS = ("pairs", "source", "target", "tag", "api_key")
# for the OpenAPI page (/docs), beside the app's other request schemas
def score_request(payload: Any, limits: Limits) -> ScoreRequest:
    """`pairs` ([[source, target], ...]) or `source` and `target` (two lists of one
    length), one line per string; `tag` optional. The limits are translate's, a pair
    counting as one line and each side as a line of characters."""
    body = _object(payload)
    _known_fields(body, SCORE_FIELDS)
    if "pairs" in body:
        if "source" in body or "target" in body:
            raise RequestError(422, "give pairs, or source and target, not both")
        pairs = body["pairs"]
        if not isinstance(pairs, list):
            raise RequestError(422, f"pairs: expected a list of [source, target], got "
                                    f"{_kind(pairs)}")
        for index, pair in enumerate(pairs):
            if not isinstance(pair, list) or len(pair) != 2:
                raise RequestError(422, f"pairs[{index}]: expected [source, target]")
            _strings(pair, f"pairs[{index}]")
        sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
        names = [f"pairs[{i}][{side}]" for i in range(len(pairs)) for side in (0, 1)]
    elif "source" in body and "target" in body:
        sources, targets = _strings(body["source"], "source"), _strings(body["target"], "target")
        if len(sources) != len(targets):
            raise RequestError(422, f"source has {len(sources)} items, target "
                                    f"{len(targets)}: give one target per source")
        names = [f"{key}[{i}]" for i in range(len(sources)) for key in ("source", "target")]
    else:
        raise RequestError(422, "pairs (a list of [source, target]), or source and target "
                                "(two lists of strings): required")
    sides = [text for pair in zip(sources, targets) for text in pair]
    for name, text in zip(names, sides):
        if "\n" in text:
            raise RequestError(422, f"{name}: holds a line break; send one line per item")
    check_sizes(sources, limits)
    check_sizes(targets, limits)
    tag = body.get("tag")
    if tag is not None and not isinstance(tag, str):
        raise RequestError(422, f"tag: expected a string, got {_kind(tag)}")
    return ScoreRequest(tuple(sources), tuple(targets), tag)


def score_answer(scores: list[Any], tag: str | None) -> dict[str, Any]:
    """{"scores": [{"total", "per_token", "tokens"}], "tag"}: each pair's natural-log
    probability, that divided by its target tokens with EOS, and that count (a
    decode.scoring.PairScore each); the tag the sources were given."""
    return {"scores": [{"total": s.total, "per_token": s.per_token, "tokens": s.tokens}
                       for s in scores], "tag": tag}
