"""The lines the batcher carries for translation requests, and a request's documents
cut into them: each line, or each sentence of a line (`mtkit.document.pipeline`), is
one `SourceLine` among other requests' lines, so a document's sentences join the same
batches as everyone's lines; their translations are joined back into one per line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mtkit.config import DecodeConfig
from mtkit.decode.align import Links
from mtkit.decode.search import Hypothesis
from mtkit.decode.translate import Translator
from mtkit.document.pipeline import DocumentOptions, Prepared, Translated, finish, prepare
from mtkit.document.split import INSTALL
from mtkit.serve.api import DocumentFields, RequestError, Translation


@dataclass(frozen=True)
class SourceLine:
    """One line of a request as the batcher carries it, among other requests' lines."""

    text: str
    prefix: str = ""  # the start its translation must have ("" for none)
    number: int = 0  # its place in its request: the key of its samples' random streams
    alignments: str | None = None  # the unit to align its hypotheses in, or None
    pair: tuple[str | None, str | None] = (None, None)  # a multilingual model's languages


def source_lines(lines: list[str], prefixes: tuple[str, ...] | None = None,
                 alignments: str | None = None,
                 pair: tuple[str | None, str | None] = (None, None)) -> list[SourceLine]:
    return [SourceLine(text, prefixes[i] if prefixes else "", i, alignments, pair)
            for i, text in enumerate(lines)]


def prepared_lines(lines: list[str], options: DocumentOptions, max_queue: int) -> Prepared:
    """The request's lines masked and split; 413 when their sentences alone would
    overfill the queue (the request limits count lines; the queue counts sentences)."""
    prepared = prepare(lines, options)
    if len(prepared.sentences) > max_queue:
        raise RequestError(413, f"{len(prepared.sentences)} sentences: more than the "
                                f"server's queue holds ({max_queue}); send less text")
    return prepared


def document_options(fields: DocumentFields, settings: DecodeConfig, langs: tuple[str, str],
                     splitter: bool, strict: bool) -> DocumentOptions:
    """A request's options over the server's settings, with the languages it translates
    between (`langs`); without the splitter, `split` is a 400 (`strict`) or left out."""
    options = fields.options(settings)
    if options.split and not splitter:
        if strict:
            raise RequestError(400, f"split: this server cannot split sentences ({INSTALL})")
        options = dataclasses.replace(options, split=False)
    return dataclasses.replace(options, src_lang=langs[0], tgt_lang=langs[1])


def document_lines(prepared: Prepared, alignments: str | None,
                   pair: tuple[str | None, str | None] = (None, None)) -> list[SourceLine]:
    """The sentences of prepared lines, each numbered by its line (so a line of one
    sentence is the line it would be without splitting), aligned in words where the
    request or restoring its placeholders needs links."""
    numbers = [plan.line for plan in prepared.plans for _ in plan.pieces]
    return [SourceLine(text, "", number, "word" if want or alignments else None, pair)
            for text, want, number in zip(prepared.sentences, prepared.want_links, numbers)]


def document_results(prepared: Prepared, results: list[Translation],
                     options: DocumentOptions, alignments: str | None) -> list[Translation]:
    """One Translation per line from its sentences' (a line of several sentences has
    score 0: requests for scores do not split; an HTML line has several texts)."""
    translated = [Translated(r.texts[0], r.links[0] if r.links else (), r.scores[0])
                  for r in results]
    done = finish(prepared, translated, options)
    tokens = [0] * len(done)
    for plan in prepared.plans:
        tokens[plan.line] += sum(r.tokens for r in
                                 results[plan.first : plan.first + len(plan.pieces)])
    return [Translation((line.text,), (line.score or 0.0,), count,
                        (line.links,) if alignments else None)
            for line, count in zip(done, tokens, strict=True)]


def line_links(translator: Translator, lines: list[SourceLine],
               found: list[list[Hypothesis]]) -> list[tuple[Links, ...] | None]:
    """The links of each line's hypotheses, for the lines that asked (None for the rest):
    lines that did not ask, in the same batch, cost no pass."""
    out: list[tuple[Links, ...] | None] = [None] * len(lines)
    groups = {(line.alignments, line.pair) for line in lines if line.alignments is not None}
    for unit, pair in groups:  # each unit and language pair in one pass
        chosen = [k for k, line in enumerate(lines)
                  if (line.alignments, line.pair) == (unit, pair)]
        links = translator.align([lines[k].text for k in chosen], [found[k] for k in chosen],
                                 unit, *pair)
        for k, each in zip(chosen, links, strict=True):
            out[k] = tuple(each)
    return out
