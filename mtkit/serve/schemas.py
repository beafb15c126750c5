"""The request bodies of `mtkit serve`'s POST routes, as OpenAPI schemas for /docs.

The routes read their bodies themselves (to bound them and word every error: api.py), so
FastAPI cannot derive these from them: they are written out here.
"""

from __future__ import annotations

from typing import Any

LIBRE_SCHEMA = {
    "type": "object", "required": ["q", "source", "target"],
    "properties": {
        "q": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
              "description": "Text (lines separated by \\n), or a list of texts."},
        "source": {"type": "string", "description": "The model's source language, or auto."},
        "target": {"type": "string", "description": "The model's target language."},
        "format": {"type": "string", "enum": ["text", "html"], "default": "text",
                   "description": "html: each text is an HTML fragment (or page): its "
                   "text translated, its tags kept."},
        "alternatives": {"type": "integer", "minimum": 0, "default": 0,
                         "description": "Further translations per text (from the n-best)."},
        "api_key": {"type": "string"},
    },
    "example": {"q": "En el principio creó Dios los cielos y la tierra.", "source": "es",
                "target": "en", "format": "text"},
}
NATIVE_SCHEMA = {
    "type": "object", "required": ["text"],
    "properties": {
        "text": {"type": "array", "items": {"type": "string"}, "description": "One line each "
                 "(format html: one HTML fragment each)."},
        "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
        "beam": {"type": "integer", "minimum": 1},
        "lenpen": {"type": "number", "minimum": 0},
        "nbest": {"type": "integer", "minimum": 1, "description": "At most beam."},
        "scores": {"type": "boolean", "default": False},
        "prefix": {"type": "array", "items": {"type": "string"},
                   "description": "One per line of text (\"\" for none): the start each "
                   "translation must have."},
        "sampling": {"type": "string", "description": "none (beam search), full, topk:K or "
                     "topp:P: draw nbest translations per line at random."},
        "temperature": {"type": "number", "exclusiveMinimum": 0},
        "seed": {"type": "integer", "minimum": 0, "description": "The same seed repeats the "
                 "same samples of a line."},
        "alignments": {"type": "boolean", "default": False, "description": "Each hypothesis "
                       "with its alignment: [i, j] links, source word i to output word j."},
        "alignment_unit": {"type": "string", "enum": ["word", "subword"], "default": "word",
                           "description": "What i and j count: whitespace words or pieces."},
        "api_key": {"type": "string"},
    },
    "example": {"text": ["Hola.", "¿Qué tal?"], "nbest": 2, "beam": 4, "scores": True},
}


SCORE_SCHEMA = {
    "type": "object",
    "properties": {
        "pairs": {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                             "minItems": 2, "maxItems": 2},
                  "description": "[source, target] pairs, one line each (or source and "
                  "target)."},
        "source": {"type": "array", "items": {"type": "string"}},
        "target": {"type": "array", "items": {"type": "string"},
                   "description": "One translation per item of source."},
        "tag": {"type": "string", "description": "A corpus tag before every source "
                "(default: the server's --tag)."},
        "api_key": {"type": "string"},
    },
    "example": {"pairs": [["Hola.", "Hello."], ["¿Qué tal?", "How are you?"]]},
}


def body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A route's `openapi_extra`: its JSON body described by `schema`."""
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}
