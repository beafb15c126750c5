"""The lists of strings the Python API takes (`Translator.translate`, `.score`, ...),
checked where they come in: anything else would fail deep in the tokenizer or the search
with an error that names neither the argument nor the item."""

from __future__ import annotations

from collections.abc import Iterable

from mtkit.errors import ConfigError


def checked_texts(value: object, what: str) -> list[str]:
    """`value` (a list, tuple or other iterable of strings) as a list, or a ConfigError
    naming `what` and the first item that is not a string."""
    if isinstance(value, str):
        raise ConfigError(f"{what}: one string where a list of strings is wanted (one per "
                          "line); put it in a list")
    if isinstance(value, (bytes, bytearray)):
        raise ConfigError(f"{what}: bytes; give text, e.g. data.decode('utf-8').split('\\n')")
    if not isinstance(value, Iterable):
        raise ConfigError(f"{what}: {type(value).__name__}, not a list of strings")
    texts = list(value)
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"{what}[{k}]: {type(text).__name__} {text!r:.40}, not a "
                              "string; give strings")
    return texts


def checked_lines(lines: object, prefixes: object = None
                  ) -> tuple[list[str], list[str] | None]:
    """A call's lines and its prefixes (None: none), checked as `checked_texts`."""
    return (checked_texts(lines, "lines"),
            None if prefixes is None else checked_texts(prefixes, "prefixes"))
