"""Streaming text through a `Translator`: input read in buffers as it comes (a pipe
answers each line at once, a file is read in full buffers), each buffer translated and
written, flushed, in input order; the prefixes of a whole input kept by line number.
"""

from __future__ import annotations

import logging
import math
import os
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from mtkit.decode.align import Links, pharaoh
from mtkit.decode.search import Hypothesis
from mtkit.decode.stats import Stats
from mtkit.decode.translate import Translator
from mtkit.document.pipeline import Translated
from mtkit.errors import ConfigError
from mtkit.progress import progress_bar

log = logging.getLogger("mtkit")


def read_line_buffers(fd: int, max_lines: int, byte_limit: int | None = None
                      ) -> Iterator[list[bytes]]:
    """Yield lists of raw lines (split on b'\\n' only) as soon as input pauses or
    `max_lines` are waiting, so interactive use answers each line at once while a
    pipe or file is processed in full buffers. `byte_limit`: read no more than that
    (a shard of a file, from where fd stands)."""
    pending = b""
    lines: list[bytes] = []
    left = byte_limit if byte_limit is not None else math.inf
    while left > 0:
        while len(lines) >= max_lines:
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if lines and not _readable_now(fd):
            yield lines
            lines = []
        chunk = os.read(fd, int(min(left, 1 << 16)))
        if not chunk:
            break
        left -= len(chunk)
        pending += chunk
        if b"\n" in chunk:
            *complete, pending = pending.split(b"\n")
            lines.extend(complete)
    if pending:
        lines.append(pending)
    while lines:
        yield lines[:max_lines]
        lines = lines[max_lines:]


def _readable_now(fd: int) -> bool:
    try:
        ready, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def decode_lines(raw: list[bytes], stats: Stats) -> list[str]:
    lines = []
    for line in raw:
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            stats.invalid_utf8 += 1
            lines.append(line.decode("utf-8", errors="replace"))
    return lines


@dataclass(frozen=True)
class Prefixes:
    """A whole input's prefixes, one per input line ("" for none), for `translate_stream`."""

    lines: tuple[str, ...]
    name: str  # the file they come from
    input_name: str  # the input's file, or stdin

    def mismatch(self, input_lines: int | str) -> ConfigError:
        return ConfigError(f"--prefix {self.name} has {len(self.lines)} lines, "
                           f"{self.input_name} {input_lines}: give one prefix per input line "
                           "(an empty line for none)")

    def of(self, first: int, count: int) -> tuple[str, ...]:
        """The prefixes of input lines first .. first + count - 1."""
        chosen = self.lines[first : first + count]
        if len(chosen) < count:
            raise self.mismatch("more")
        return chosen


def document_line(translated: Translated, scores: bool, links: bool) -> str:
    """A line of `translate_documents` as `output_lines` writes a search's."""
    line = translated.text
    if scores:
        line += f"\t{translated.score if translated.score is not None else 0.0:.4f}"
    return line + ("\t" + pharaoh(translated.links) if links else "")


def translate_whole(translator: Translator, in_fd: int, out: BinaryIO) -> Stats:
    """Everything readable from in_fd as one document (`translator.document.format` html:
    one HTML fragment, newlines and all), its translation written when it is done."""
    start = time.perf_counter()
    data = b"".join(iter(lambda: os.read(in_fd, 1 << 20), b""))
    text = decode_lines([data], translator.stats)[0] if data else ""
    done = translator.translate_documents([text], first_line=0)
    out.write(done[0].text.encode("utf-8"))
    out.flush()
    translator.stats.seconds = time.perf_counter() - start
    return translator.stats


def translate_stream(
    translator: Translator, in_fd: int, out: BinaryIO, buffer_lines: int = 2000,
    scores: bool = False, total_lines: int | None = None, progress: bool = False,
    first_line: int = 0, byte_limit: int | None = None, prefixes: Prefixes | None = None,
    alignments: str | None = None,
) -> Stats:
    """Translate everything readable from in_fd to out, flushing after every buffer.
    `progress`: a bar on stderr when it is a terminal (with an ETA given `total_lines`).
    A shard of a file: in_fd stands at its line `first_line`, `byte_limit` bytes long.
    `prefixes`: the whole input's, by line number (a shard takes its own lines').
    `alignments`: a unit (word, subword) to add every line's links in, or None."""
    start = time.perf_counter()
    index = first_line
    bar = progress_bar(total_lines, "line", enabled=progress)
    for raw in read_line_buffers(in_fd, buffer_lines, byte_limit):
        lines = decode_lines(raw, translator.stats)
        chosen = prefixes.of(index, len(lines)) if prefixes is not None else None
        if translator.documents_apply(chosen) and alignments in (None, "word"):
            done = translator.translate_documents(lines, alignments is not None, index)
            text = "".join(document_line(each, scores, alignments is not None) + "\n"
                           for each in done)
        else:
            results = translator.search(lines, index, prefixes=chosen)
            links = None if alignments is None else translator.align(lines, results, alignments)
            text = "".join(line + "\n" for line in output_lines(translator, results, index, scores,
                                                                    links))
        out.write(text.encode("utf-8"))
        out.flush()
        index += len(lines)
        if bar is not None:
            bar.update(len(lines))
    if bar is not None:
        bar.close()
    if prefixes is not None and byte_limit is None and index != len(prefixes.lines):
        raise prefixes.mismatch(index)  # (a file's lines were counted before: stdin's)
    translator.stats.seconds = time.perf_counter() - start
    if translator.stats.invalid_utf8:
        log.warning(
            "%d input lines had invalid UTF-8; bad bytes were replaced with U+FFFD",
            translator.stats.invalid_utf8,
        )
    return translator.stats


def output_lines(translator: Translator, hyps_per_line: list[list[Hypothesis]],
                 first_index: int, scores: bool = False,
                 links: list[list[Links]] | None = None) -> list[str]:
    """`translate`'s output lines: one per input (TAB + score with `scores`), or, for
    nbest > 1, `index<TAB>score<TAB>text` rows; `links` (`Translator.align`'s) add TAB +
    Pharaoh links as the last column of every line or row, empty where a line has none."""
    out = []
    for offset, hyps in enumerate(hyps_per_line):
        texts = translator.texts(hyps)
        tails = [""] * len(hyps) if links is None else [
            "\t" + pharaoh(each) for each in links[offset]]
        if translator.settings.nbest > 1:
            out += [f"{first_index + offset}\t{h.score:.4f}\t{t}{tail}"
                    for h, t, tail in zip(hyps, texts, tails)]
        elif scores:
            out.append(f"{texts[0]}\t{hyps[0].score:.4f}{tails[0]}")
        else:
            out.append(texts[0] + tails[0])
    return out
