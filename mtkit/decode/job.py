"""One `mtkit translate` run: a file or stdin translated to a file or stdout, whole or
one share of it (`--shard I/N`, or one rank of a torchrun job; see shard.py).

Under torchrun every rank loads the model and translates its share; the other ranks
spool theirs to a temporary file and send it to rank 0, which writes its own share, then
theirs in rank order, so the output is byte-identical to one process's. An output file
is written atomically: it appears whole or not at all.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mtkit.decode.align import UNITS
from mtkit.decode.choices import OPTION_NAMES, DecodeChoices
from mtkit.decode.shard import Shard, line_range, receive_shares, send_share
from mtkit.decode.stats import Stats, counted
from mtkit.decode.stream import Prefixes, decode_lines, translate_stream, translate_whole
from mtkit.decode.translate import Translator
from mtkit.document.formats import check_format
from mtkit.document.split import require_splitter
from mtkit.errors import ConfigError
from mtkit.files.atomic import atomic_write
from mtkit.files.textio import count_lines
from mtkit.progress import on_terminal
from mtkit.runtime import distributed as dist

log = logging.getLogger("mtkit")


@dataclass(frozen=True)
class TranslateJob:
    models: tuple[Path, ...]  # several: an ensemble
    input_file: Path | None = None  # None: stdin
    output_file: Path | None = None  # None: stdout
    shard: Shard | None = None  # this job's share of input_file; None: all of it
    decode: DecodeChoices = DecodeChoices()
    max_tokens: int = 4096  # source tokens per batch
    device: str = "auto"
    threads: int = 0  # 0: the engine chooses
    quantize: str = "none"
    engine: str = "auto"
    tag: str | None = None  # a corpus tag to start every line with
    scores: bool = False  # append TAB + score to every output line
    quiet: bool = False  # no progress bar
    prefix_file: Path | None = None  # one target prefix per input line ("" for none)
    alignments: str | None = None  # word or subword: append each line's links; None: none
    langs: tuple[str | None, str | None] = (None, None)  # a multilingual model's pair
    format: str = "text"  # html: each line an HTML fragment (mtkit.document.formats)
    whole_file: bool = False  # the whole input one document (html: one fragment)


def translate_job(job: TranslateJob) -> Stats | None:
    """Run the job; the whole job's Stats in the process that wrote the output, None in
    the other ranks of a torchrun job. A closed stdout raises BrokenPipeError."""
    shard = _checked_shard(job)
    if job.alignments is not None and job.alignments not in UNITS:
        raise ConfigError(f"--alignment-unit {job.alignments}: expected {' or '.join(UNITS)}")
    prefixes = read_prefixes(job.prefix_file, job.input_file)  # before the model: errors first
    if job.decode.split:
        _check_split(job)
    _check_format(job)
    device = str(dist.setup(job.device, timeout_s=600, threads=job.threads))
    if dist.launched():
        shard = Shard(dist.rank(), dist.world_size())
    translator = Translator.load(
        job.models, device=device, threads=job.threads, quantize=job.quantize,
        engine=job.engine, max_tokens=job.max_tokens, option_names=OPTION_NAMES,
        tag=job.tag, src_lang=job.langs[0], tgt_lang=job.langs[1],
        **dataclasses.asdict(job.decode),
    )  # a tag or a language the model lacks: an error
    translator.document = dataclasses.replace(translator.document, format=job.format)
    translator.checked_format(None)  # (a recipe's decode.nbest above 1: an error for html)
    if translator.document.split:
        _check_split(job)  # (a recipe's decode.split: checked now)
    if translator.document.split and translator.settings.nbest > 1:
        raise ConfigError("--split: translates the best translation of each sentence; "
                          "leave out --nbest (or give --nbest 1)")
    in_fd = open_input(job.input_file)
    try:
        return _translate_shares(job, translator, in_fd, shard, prefixes)
    finally:
        if job.input_file is not None:
            os.close(in_fd)


def open_input(path: Path | None) -> int:
    """A file descriptor to read `path` from (stdin's for None), or a one-line error."""
    if path is None:
        return sys.stdin.fileno()
    if path.is_dir():
        raise ConfigError(f"--input {path}: is a directory, expected a text file")
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"--input {path}: cannot read ({exc.strerror})") from None


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_prefixes(path: Path | None, input_file: Path | None) -> Prefixes | None:
    """--prefix FILE's lines, read as translate reads its input, or a one-line error; for
    an input file, its line count checked against theirs (stdin's: as it is read)."""
    if path is None:
        return None
    if path.is_dir():
        raise ConfigError(f"--prefix {path}: is a directory, expected a text file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--prefix {path}: cannot read ({exc.strerror})") from None
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # after the last line's newline (or an empty file)
    read = Stats()
    prefixes = Prefixes(tuple(decode_lines(raw, read)), str(path),
                        str(input_file) if input_file is not None else "stdin")
    if read.invalid_utf8:  # said as the input's are: a replaced byte is forced as <unk>
        first = next(n for n, line in enumerate(raw, 1) if not _is_utf8(line))
        log.warning("--prefix %s: %s had invalid UTF-8 (first: line %d); bad bytes were "
                    "replaced with U+FFFD", path, counted(read.invalid_utf8, "line"), first)
    if input_file is not None and input_file.is_file():  # (open_input words the others)
        count = count_lines(input_file, decompress=False)  # as translate reads it: raw
        if count != len(prefixes.lines):
            raise prefixes.mismatch(count)
    return prefixes


def _check_split(job: TranslateJob) -> None:
    """--split with what it cannot join: a one-line error (and sentencex missing)."""
    for given, flag in ((job.prefix_file, "--prefix"), (job.scores, "--scores"),
                        (job.alignments == "subword", "--alignment-unit subword")):
        if given:
            raise ConfigError(f"--split: not with {flag} (a line's sentences are translated "
                              "one by one); leave one of them out")
    require_splitter()


def _check_format(job: TranslateJob) -> None:
    """--format and --whole-file with what they cannot do: a one-line error."""
    check_format(job.format)
    if job.whole_file and job.format != "html":
        raise ConfigError("--whole-file: reads the input as one HTML document; give "
                          "--format html too")
    if job.whole_file and (job.shard is not None or dist.launched()):
        raise ConfigError("--whole-file: one document is not shared out; leave out --shard "
                          "(and torchrun)")
    if job.format == "html":
        for given, flag in ((job.prefix_file, "--prefix"), (job.scores, "--scores"),
                            (job.alignments, "--alignments"),
                            ((job.decode.nbest or 1) > 1, "--nbest")):
            if given:
                raise ConfigError(f"--format html: not with {flag} (each text's best "
                                  "translation goes into the markup); leave one out")


def _checked_shard(job: TranslateJob) -> Shard | None:
    if job.shard is not None and dist.launched():
        raise ConfigError("--shard: not under torchrun, whose ranks share the input already")
    if (job.shard is not None or dist.launched()) and job.input_file is None:
        raise ConfigError(f"{'--shard' if job.shard else 'torchrun'}: needs --input FILE "
                          "(a file's lines can be shared out; stdin's cannot)")
    return job.shard


def _translate_shares(job: TranslateJob, translator: Translator, in_fd: int,
                      shard: Shard | None, prefixes: Prefixes | None) -> Stats | None:
    """This process's share of the input (all of it without a shard) from `in_fd`, and,
    in rank 0 of a torchrun job, the other ranks' shares after it."""
    lines = line_range(job.input_file, shard) if shard is not None else None
    if lines is not None:
        os.lseek(in_fd, lines.start, os.SEEK_SET)
    # a bar only for a file (its length is known; interactive input needs none), and the
    # extra pass over the file only when a bar will be seen
    bar = job.input_file is not None and not job.quiet and on_terminal() and dist.is_main()
    total = None if not bar else count_lines(job.input_file) if lines is None else lines.count

    def translate_share(out: BinaryIO) -> Stats:
        if job.whole_file:
            return translate_whole(translator, in_fd, out)
        return translate_stream(
            translator, in_fd, out, scores=job.scores, total_lines=total, progress=bar,
            first_line=lines.first if lines is not None else 0,
            byte_limit=lines.end - lines.start if lines is not None else None,
            prefixes=prefixes, alignments=job.alignments,
        )

    def write_all(out: BinaryIO) -> None:
        translate_share(out)
        if dist.launched():
            receive_shares(out, translator.stats)  # after rank 0's own, in rank order

    begun, main = time.perf_counter(), dist.is_main()  # (after shutdown every rank is "0")
    try:
        if not main:
            with tempfile.TemporaryFile() as spool:
                send_share(translate_share, spool)
        elif job.output_file is not None:
            atomic_write(job.output_file, write_all)
        else:
            write_all(sys.stdout.buffer)
        dist.wait_for_main()
    finally:
        dist.shutdown()
    if dist.launched():
        translator.stats.seconds = time.perf_counter() - begun  # the job's, not one share's
    return translator.stats if main else None

