"""Documents through a sentence-level model: the fixed order of work, one line at a time.

    markup parsed into text runs (format html: formats.py, markup.py)
      -> placeholders masked             (placeholders.py)
      -> sentences split                 (split.py; with `split`)
      -> translated                      (the caller's `translate_sentences`)
      -> joined                          (split.py)
      -> placeholders restored           (placeholders.py)
      -> tags placed, serialised         (format html)

Masking comes before splitting so that a URL or an e-mail address is never split at its
dots; restoring comes after joining so that a placeholder the model lost is put back by
the links of the whole line. Each line gives one result (the line contract holds): its
text and its links to the source line's whitespace words, which tags are placed by (an
HTML line gives its translated HTML, without links).

A line with nothing to do (no placeholder, one sentence or no `split`) goes to the model
as it is, and links are asked for only where restoring needs them or the caller wants
them (`DocumentOptions.links`), since aligning costs a forced pass: such a line is
translated exactly as without this module. The work is cut in two, `prepare` and
`finish`, so that a server can queue the sentences of many requests together.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mtkit.document.formats import Unpacked, repack, unpack
from mtkit.document.placeholders import Links, Masked, Protection, mask, restore
from mtkit.document.split import Piece, join_translations, no_space, split_sentences


@dataclass(frozen=True)
class DocumentOptions:
    split: bool = False  # split lines into sentences (source language: src_lang)
    protection: Protection = Protection()  # Protection(enabled=False): protect nothing
    src_lang: str | None = None  # the splitter's language (None: generic rules)
    tgt_lang: str | None = None  # the target's: joined without spaces for zh, ja, th
    links: bool = False  # every line's links wanted (markup, alignments), not only some
    format: str = "text"  # html: each line an HTML fragment, its texts translated (formats.py)

    @property
    def active(self) -> bool:
        """False when no line could differ from a plain translation (nor need links)."""
        return self.split or self.protection.active or self.links or self.format != "text"


@dataclass(frozen=True)
class Translated:
    """A translation and its links (source word i, output word j), or () when none were
    asked for; the model's score of it, where there is one (a line of several sentences
    has none)."""

    text: str
    links: Links = ()
    score: float | None = None


# (sentences, links wanted per sentence) -> one Translated per sentence, in order
TranslateSentences = Callable[[list[str], list[bool]], list[Translated]]


@dataclass(frozen=True)
class LinePlan:
    masked: Masked | None  # None: no placeholder
    pieces: tuple[Piece, ...]  # its sentences (one: the line, or its masked text, whole)
    first: int  # where its first sentence is in `Prepared.sentences`
    line: int = 0  # the input line it is, or (html: a line of several texts) is part of


@dataclass(frozen=True)
class Prepared:
    """Lines ready for the model: their plans and every sentence of them, flat."""

    plans: tuple[LinePlan, ...]
    sentences: tuple[str, ...]
    want_links: tuple[bool, ...]  # per sentence
    unpacked: Unpacked | None = None  # the lines taken apart into the texts plans are of


def prepare(lines: Sequence[str], options: DocumentOptions) -> Prepared:
    """Take each line apart (html: into its texts), mask and split each text; a text that
    splits into one sentence stays whole."""
    unpacked = unpack(lines, options.format)
    plans, sentences, want = [], [], []
    for line, source in zip(unpacked.lines, unpacked.texts):
        masked = mask(source, options.protection)
        text = masked.text if masked is not None else source
        pieces = split_sentences(text, options.src_lang) if options.split and text.strip() \
            else []
        if len(pieces) <= 1:
            pieces = [Piece(text, "")]
        plans.append(LinePlan(masked, tuple(pieces), len(sentences), line))
        sentences += [piece.text for piece in pieces]
        want += [masked is not None or options.links or unpacked.needs_links] * len(pieces)
    return Prepared(tuple(plans), tuple(sentences), tuple(want), unpacked)


def finish(prepared: Prepared, translated: Sequence[Translated], options: DocumentOptions
           ) -> list[Translated]:
    """Join each text's sentences, restore its placeholders, put each line back together
    (html: its tags placed by the links): one result per input line."""
    if len(translated) != len(prepared.sentences):
        raise ValueError(f"{len(translated)} translations for {len(prepared.sentences)} "
                         "sentences")
    results = []
    for plan in prepared.plans:
        mine = list(translated[plan.first : plan.first + len(plan.pieces)])
        result = mine[0] if len(mine) == 1 else _joined(plan.pieces, mine, options.tgt_lang)
        if plan.masked is not None:
            text, links = restore(plan.masked, result.text, result.links,
                                  no_space(options.tgt_lang))
            result = Translated(text, links, result.score)
        results.append(result)
    if prepared.unpacked is not None and prepared.unpacked.format == "html":
        kept = [tuple(p.text for p in plan.masked.placeholders) if plan.masked else ()
                for plan in prepared.plans]  # no tag goes inside a placeholder
        return [Translated(line) for line in repack(prepared.unpacked, results, kept)]
    return results


def translate_documents(lines: Sequence[str], translate_sentences: TranslateSentences,
                        options: DocumentOptions) -> list[Translated]:
    """Each line through the order of work; `translate_sentences` is called once, with
    every sentence of every line."""
    prepared = prepare(lines, options)
    translated = translate_sentences(list(prepared.sentences), list(prepared.want_links))
    return finish(prepared, translated, options)


def _joined(pieces: Sequence[Piece], translated: list[Translated], tgt_lang: str | None
            ) -> Translated:
    """One line of a line's translated sentences; links from each sentence's words to
    the line's, offset by where each sentence and each translation starts."""
    text = join_translations([t.text for t in translated], list(pieces), tgt_lang)
    source_words = _word_starts("".join(p.text + p.gap for p in pieces))
    output_words = _word_starts(text)
    links: set[tuple[int, int]] = set()
    at_source = at_output = 0
    for piece, each in zip(pieces, translated, strict=True):
        mine = [at_source + m.start() for m in re.finditer(r"\S+", piece.text)]
        start = text.find(each.text.strip(), at_output) if each.text.strip() else -1
        theirs = [] if start < 0 else [start + m.start()
                                       for m in re.finditer(r"\S+", each.text.strip())]
        for i, j in each.links:
            if i < len(mine) and j < len(theirs):
                links.add((_word_at(source_words, mine[i]), _word_at(output_words, theirs[j])))
        at_source += len(piece.text) + len(piece.gap)
        at_output = max(at_output, start + len(each.text.strip())) if start >= 0 else at_output
    return Translated(text, tuple(sorted(links)))


def _word_starts(text: str) -> list[int]:
    return [m.start() for m in re.finditer(r"\S+", text)]


def _word_at(starts: list[int], offset: int) -> int:
    """The whitespace word holding the character at `offset`, given each word's start."""
    return bisect.bisect_right(starts, offset) - 1
