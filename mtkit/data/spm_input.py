"""What SentencePiece training reads, and how its failures read: the corpus lines as a
stream that remembers read errors, a seeded sample of them, and spm's errors as one line."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from mtkit.errors import DataError
from mtkit.files.textio import read_lines, require_text_file


class CorpusStream:
    """Iterates the lines of several files, remembering read errors spm would swallow."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.nonempty = 0
        self.error: DataError | None = None

    def __iter__(self) -> Iterator[str]:
        try:
            for path in self.paths:
                for line in read_lines(path):
                    if line.strip():
                        self.nonempty += 1
                        yield line
        except DataError as exc:
            # spm turns an exception in its input iterator into an opaque RuntimeError
            self.error = exc


def reservoir_sample(lines: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of `size` lines in one pass (algorithm R), fixed by `seed`."""
    rng = random.Random(seed)
    sample: list[str] = []
    for seen, line in enumerate(lines):
        if seen < size:
            sample.append(line)
        else:
            slot = rng.randrange(seen + 1)
            if slot < size:
                sample[slot] = line
    return sample


def existing_inputs(inputs: list[Path]) -> list[Path]:
    """The inputs as paths; DataError for none, or one that is not a regular file."""
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise DataError("no input files to train the tokenizer on")
    for path in inputs:
        require_text_file(path)
    return inputs


def training_sentences(lines: CorpusStream, size: int, seed: int) -> Iterable[str]:
    """The lines the trainer sees: a sample of `size` fixed by `seed`, or all (size 0).

    We sample ourselves: spm's own sampler ignores set_random_generator_seed, so its
    models would differ from run to run whenever the corpus exceeds the sample size.
    """
    if size <= 0:
        return lines  # streamed
    sample = reservoir_sample(lines, size, seed)
    if lines.error is not None:
        raise lines.error
    return sample


_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


# how a recipe spells the tokenizer settings that errors name (spm-train's flags differ)
RECIPE_KEYS = {"vocab_size": "tokenizer.vocab_size",
               "character_coverage": "tokenizer.character_coverage",
               "input_sentence_size": "tokenizer.input_sentence_size"}


def training_error(message: str, vocab_size: int, where: str,
                   names: dict[str, str] | None = None, sample: str = "") -> DataError:
    """spm's failure as one line naming the settings as the user gave them (`names`:
    setting -> key or flag); `sample` says how many lines were sampled when not all were."""
    names = {**RECIPE_KEYS, **(names or {})}
    if match := _TOO_HIGH.search(message):
        more = (f", or sample more lines ({sample}, {names['input_sentence_size']})"
                if sample else "")
        return DataError(
            f"{where}: vocab_size {match.group(1)} is too large for this corpus; "
            f"use at most {match.group(2)} ({names['vocab_size']}){more}"
        )
    if match := _TOO_LOW.search(message):
        return DataError(
            f"{where}: vocab_size {vocab_size} is too small for this corpus; it needs at least "
            f"{match.group(2)} ({names['vocab_size']}), or a lower "
            f"{names['character_coverage']} (down to 0.98, SentencePiece's least)"
        )
    # drop spm's "INTERNAL: src/file.cc(123) [check] " prefix; keep its explanation
    detail = re.sub(r"^.*?\] ", "", message.splitlines()[0]).strip() or message.strip()
    return DataError(f"{where}: SentencePiece training failed: {detail}")
