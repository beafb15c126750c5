"""One `mtkit score-pairs` run: two line-aligned files scored pair by pair, to a file or
stdout.

The files are read in step, a buffer of lines at a time (constant memory however long
they are), each buffer scored in token-bounded, length-sorted batches and written in
input order, flushed. Their line counts are compared before the model is loaded, so a
mismatch costs nothing; an output file is written atomically (whole or not at all).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import BinaryIO

from mtkit.decode.engine import load_engine
from mtkit.decode.scoring import UNSCORED
from mtkit.decode.translate import Translator, model_file
from mtkit.errors import DataError
from mtkit.files.atomic import atomic_write
from mtkit.files.textio import count_lines, read_lines
from mtkit.progress import progress_bar
from mtkit.runtime.devices import resolve_device, set_threads


@dataclass(frozen=True)
class ScoreJob:
    models: tuple[Path, ...]  # several: an ensemble
    src_file: Path
    tgt_file: Path
    output_file: Path | None = None  # None: stdout
    tag: str | None = None  # a corpus tag to start every source line with
    max_tokens: int = 4096  # padded tokens per batch (a pair's longer side)
    device: str = "auto"
    threads: int = 0
    quantize: str = "none"
    engine: str = "auto"
    quiet: bool = False  # no progress bar
    skip_long: bool = False  # a pair over the model's length scores -inf, not an error


@dataclass
class ScoreStats:
    pairs: int = 0
    tokens: int = 0  # target tokens scored, EOS included
    seconds: float = 0.0
    skipped: int = 0  # pairs over the model's length, given -inf (--skip-long)

    def summary(self) -> str:
        rate = self.pairs / max(self.seconds, 1e-9)
        skipped = f"; {self.skipped} over the model's length given -inf" if self.skipped else ""
        return (f"scored {self.pairs} pairs, {self.tokens} target tokens (EOS included) in "
                f"{self.seconds:.1f}s ({rate:.1f} pairs/s){skipped}")


def score_job(job: ScoreJob) -> ScoreStats:
    """Run the job; a closed stdout raises BrokenPipeError."""
    total = checked_line_count(job.src_file, job.tgt_file)  # before the model: errors first
    set_threads(job.threads)
    engine = load_engine([model_file(p) for p in job.models], job.engine, job.quantize,
                         resolve_device(job.device), job.threads)
    # nothing is searched: the recipe's decode settings only travel along, with a stop
    # rule the engine has (or the Translator would warn about one it lacks)
    settings = dataclasses.replace(engine.recipe.decode, stop=engine.stop_rules[0])
    translator = Translator(engine, settings, job.max_tokens, job.tag)  # an unknown tag: error

    def write(out: BinaryIO) -> ScoreStats:
        return score_stream(translator, job.src_file, job.tgt_file, out,
                            total_lines=total, progress=not job.quiet, skip_long=job.skip_long)

    if job.output_file is None:
        return write(sys.stdout.buffer)
    stats: list[ScoreStats] = []
    atomic_write(job.output_file, lambda out: stats.append(write(out)))
    return stats[0]


def checked_line_count(src_file: Path, tgt_file: Path) -> int | None:
    """The files' common line count, or a one-line error naming both; None when one is
    a pipe (`<(...)`, /dev/stdin), which reads once: scoring checks it as it goes."""
    if not all(map(_read_twice, (src_file, tgt_file))):
        return None
    counts = [count_lines(path) for path in (src_file, tgt_file)]
    if counts[0] != counts[1]:
        raise DataError(f"--src {src_file} has {counts[0]} lines, --tgt {tgt_file} "
                        f"{counts[1]}: give one target line per source line")
    return counts[0]


def _read_twice(path: Path) -> bool:
    """Whether the file can be counted and then read: not a pipe (a missing file or a
    directory: yes, so that counting says what is wrong before the model loads)."""
    return path.is_file() or path.is_dir() or not path.exists()


def score_stream(translator: Translator, src_file: Path, tgt_file: Path, out: BinaryIO,
                 buffer_lines: int = 2000, total_lines: int | None = None,
                 progress: bool = False, skip_long: bool = False) -> ScoreStats:
    """Score the files' pairs to `out`, `total<TAB>per_token` a line, a buffer at a time."""
    start, stats = time.perf_counter(), ScoreStats()
    names = (f"--src {src_file}", f"--tgt {tgt_file}")
    sources, targets = read_lines(src_file), read_lines(tgt_file)
    bar = progress_bar(total_lines, "pair", enabled=progress)
    while True:
        src, tgt = list(islice(sources, buffer_lines)), list(islice(targets, buffer_lines))
        if len(src) != len(tgt):  # counted equal before (unless a pipe), or changed since
            if checked_line_count(src_file, tgt_file) is None:
                raise DataError(f"--src {src_file} and --tgt {tgt_file} differ in length: "
                                f"one ends after line {stats.pairs + min(len(src), len(tgt))}"
                                "; give one target line per source line")
            raise DataError(f"--src {src_file} and --tgt {tgt_file} changed while read")
        if not src:
            break
        scores = translator.score(src, tgt, first_line=stats.pairs, names=names,
                                  skip_long=skip_long)
        out.write("".join(score.line() + "\n" for score in scores).encode("utf-8"))
        out.flush()
        stats.pairs += len(scores)
        stats.skipped += sum(score is UNSCORED for score in scores)
        stats.tokens += sum(score.tokens for score in scores if score is not UNSCORED)
        if bar is not None:
            bar.update(len(scores))
    if bar is not None:
        bar.close()
    stats.seconds = time.perf_counter() - start
    return stats
