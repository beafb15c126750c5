"""Input formats: what a line of input is, and how it is put back after translation.

`text`: a line is one text, translated as it is. `html`: a line is one HTML fragment
(markup.py), taken apart into its texts (one per block) and put back with each
translation's tags placed by its word links. In the order of work (pipeline.py), `unpack`
comes first and `repack` last:

    unpacked = unpack(lines, "html")
    done = ...                     # each of unpacked.texts translated, with its links
    repack(unpacked, done)         # one line per input line
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mtkit.document.markup import Fragment, parse_fragment, render
from mtkit.errors import ConfigError

FORMATS = ("text", "html")


class Linked(Protocol):
    """A translation with its links (i, j) to its source text's words: `Aligned`,
    `Translated`, or any object with these two fields."""

    @property
    def text(self) -> str: ...

    @property
    def links(self) -> Sequence[tuple[int, int]]: ...


@dataclass(frozen=True)
class Unpacked:
    """Lines taken apart: `texts` to translate, every line's after the line before's."""

    format: str
    fragments: tuple[Fragment, ...]  # html: one per line; text: none
    texts: tuple[str, ...]
    lines: tuple[int, ...]  # the input line of each text

    @property
    def needs_links(self) -> bool:
        return self.format == "html"


def check_format(name: str, option: str = "--format") -> str:
    """The format, or a one-line error naming the option and the formats there are."""
    if name in FORMATS:
        return name
    close = difflib.get_close_matches(name, FORMATS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(f"{option} {name}: expected {' or '.join(FORMATS)}{hint}")


def unpack(lines: Sequence[str], format: str = "text") -> Unpacked:
    if check_format(format) == "text":
        return Unpacked(format, (), tuple(lines), tuple(range(len(lines))))
    fragments = tuple(parse_fragment(line) for line in lines)
    return Unpacked(format, fragments, tuple(t for f in fragments for t in f.texts),
                    tuple(k for k, f in enumerate(fragments) for _ in f.texts))


def repack(unpacked: Unpacked, translated: Sequence[Linked],
           kept: Sequence[tuple[str, ...]] = ()) -> list[str]:
    """One output line per input line: the translations of its texts, put back; `kept`,
    per text, the strings (placeholders) no tag may cut."""
    if len(translated) != len(unpacked.texts):
        raise ValueError(f"{len(translated)} translations for {len(unpacked.texts)} texts")
    if unpacked.format == "text":
        return [each.text for each in translated]
    lines, at = [], 0
    for fragment in unpacked.fragments:
        mine = translated[at:at + len(fragment.texts)]
        lines.append(render(fragment, [t.text for t in mine], [t.links for t in mine],
                            kept[at:at + len(fragment.texts)] if kept else ()))
        at += len(fragment.texts)
    return lines
