"""The training corpora: several weighted corpora as one set, each epoch's sample of them,
and, with subword sampling, each epoch's fresh segmentation of their text.

A recipe's `data.train` is one corpus (binarised as split `train`) or a list (splits
`train-1`, `train-2`, ...). Pair i of the set is pair i - start[k] of corpus k. An epoch
takes round(pairs x weight) pairs of each corpus: every pair floor(weight) times, and
the fraction left as a sample drawn afresh each epoch. Everything an epoch holds is a
pure function of (seed, epoch), so a resumed run trains on exactly the same pairs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtkit.config import Corpus, Recipe
from mtkit.data.batching import pair_widths
from mtkit.data.dataset import ParallelData
from mtkit.data.manifest import load_manifest
from mtkit.data.sampling import Sampling
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import DataError
from mtkit.files.textio import file_fingerprint, read_lines

log = logging.getLogger("mtkit")

CHUNK_LINES = 2000  # lines whose n-best segmentations are held at once
Reader = Callable[[int], np.ndarray]  # sentence j of a corpus -> its token ids


def training_splits(recipe: Recipe) -> list[tuple[str, Corpus]]:
    """The binarised split name of each training corpus, in recipe order."""
    corpora = recipe.data.train
    if len(corpora) == 1:
        return [("train", corpora[0])]
    return [(f"train-{i}", corpus) for i, corpus in enumerate(corpora, 1)]


def training_fingerprints(recipe: Recipe, manifest_prints: dict[str, str]) -> dict[str, str]:
    """The manifest's fingerprints of the training data, with what else decides the pairs
    an epoch trains on: weights other than 1 and subword sampling."""
    prints = dict(manifest_prints)
    for name, corpus in training_splits(recipe):
        if corpus.weight != 1.0:
            prints[f"{name}.weight"] = repr(corpus.weight)
    if recipe.tokenizer.sample_alpha:
        prints["sample_alpha"] = repr(recipe.tokenizer.sample_alpha)
    return prints


class TokenArrays:
    """Token ids of n sentences in memory, in ParallelData's layout (offsets + flat ids)."""

    def __init__(self, seqs: list[list[int]]):
        self.lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))  # (n,)
        self.offsets = np.concatenate([[0], np.cumsum(self.lens)])  # (n+1,)
        self.tokens = np.fromiter((t for s in seqs for t in s), dtype=np.int32,
                                  count=int(self.offsets[-1]))

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


@dataclass
class EpochData:
    """One epoch's pairs: what to train on (items, repeats allowed), and its token ids."""

    items: np.ndarray  # (m,) indices into the set
    widths: np.ndarray  # (m,) padded positions of each item
    sampled: list[int]  # pairs drawn from each corpus
    starts: np.ndarray  # (k+1,) first index of each corpus; the last is the set's size
    sources: list[tuple[Reader, Reader, Reader]]  # per corpus: its src(j), tgt(j), links(j)

    def _find(self, i: int) -> tuple[int, int]:
        corpus = int(np.searchsorted(self.starts, i, side="right")) - 1
        return corpus, i - int(self.starts[corpus])

    def src(self, i: int) -> np.ndarray:
        corpus, j = self._find(i)
        return self.sources[corpus][0](j)

    def tgt(self, i: int) -> np.ndarray:
        corpus, j = self._find(i)
        return self.sources[corpus][1](j)

    def links(self, i: int) -> np.ndarray:
        """(K, 2) piece links of the pair (dataset.ParallelData.links)."""
        corpus, j = self._find(i)
        return self.sources[corpus][2](j)

    def lengths(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The (src, tgt) token counts of the pairs at `indices`, each (len(indices),)."""
        return (np.array([len(self.src(i)) for i in indices], dtype=np.int64),
                np.array([len(self.tgt(i)) for i in indices], dtype=np.int64))


class TrainingSet:
    """The recipe's training corpora in a binarised data directory, epoch by epoch."""

    def __init__(self, data_dir: Path, recipe: Recipe, tokenizer: Tokenizer,
                 announce: bool = True):
        self.data_dir = Path(data_dir)
        self.splits = training_splits(recipe)
        self.parts = [ParallelData(self.data_dir, name) for name, _ in self.splits]
        self.seed = recipe.train.seed
        self.sample_alpha = recipe.tokenizer.sample_alpha
        self.tokenizer = tokenizer
        self.announce = announce  # log each epoch's counts (rank 0 of a job)
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])])
        self.has_links = any(part.has_links for part in self.parts)
        self._epoch: tuple[int, EpochData] | None = None
        if self.sample_alpha:
            self._check_sources()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def epoch(self, epoch: int) -> EpochData:
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, self._make_epoch(epoch))
        return self._epoch[1]

    def epoch_items(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """For batching.BatchSampler."""
        data = self.epoch(epoch)
        return data.items, data.widths

    def _make_epoch(self, epoch: int) -> EpochData:
        start = time.perf_counter()
        sources, src_lens, tgt_lens = [], [], []
        for k, part in enumerate(self.parts):
            if self.sample_alpha:
                src, tgt = self._resegment(k, epoch)
                sources.append((src.__getitem__, tgt.__getitem__, part.links))
                src_lens.append(src.lens)
                tgt_lens.append(tgt.lens)
            else:
                sources.append((part.src, part.tgt, part.links))
                src_lens.append(part.src_lens)
                tgt_lens.append(part.tgt_lens)
        widths_all = pair_widths(np.concatenate(src_lens), np.concatenate(tgt_lens))  # (n,)
        picks = [self._sample(k, epoch) + self.starts[k] for k in range(len(self.parts))]
        items = np.concatenate(picks)  # (m,)
        data = EpochData(items, widths_all[items], [len(p) for p in picks], self.starts, sources)
        if self.announce and (len(self.parts) > 1 or self.sample_alpha):
            self._log(epoch, data, time.perf_counter() - start)
        return data

    def _sample(self, k: int, epoch: int) -> np.ndarray:
        """Corpus k's pairs for this epoch (local indices): weight 2.5 = each pair twice,
        and half of them a third time, a different half each epoch."""
        n, weight = len(self.parts[k]), self.splits[k][1].weight
        count = max(1, round(n * weight))
        whole, rest = divmod(count, n)
        rng = np.random.default_rng([self.seed, epoch, k, 1])
        extra = np.sort(rng.choice(n, size=rest, replace=False))
        return np.concatenate([np.tile(np.arange(n), whole), extra]).astype(np.int64)

    def _resegment(self, k: int, epoch: int) -> tuple[TokenArrays, TokenArrays]:
        """Corpus k's kept pairs, segmented afresh by sampling, with its tag."""
        name, corpus = self.splits[k]
        lines = np.fromfile(self.data_dir / f"{name}.lines", dtype=np.int64)  # (n,)
        tokenizer = self.tokenizer.tagged(corpus.tag)
        sides = []
        for side, path in enumerate((corpus.src, corpus.tgt)):
            text = _pick_lines(Path(path), lines)
            encode = tokenizer.encode_tgt if side else tokenizer.encode_src
            sampling = Sampling(self.sample_alpha,
                                np.random.default_rng([self.seed, epoch, k, side, 2]))
            seqs: list[list[int]] = []
            for begin in range(0, len(text), CHUNK_LINES):  # n-best lists of a chunk at a time
                seqs += encode(text[begin : begin + CHUNK_LINES], sampling)
            sides.append(TokenArrays(seqs))
        return sides[0], sides[1]

    def _check_sources(self) -> None:
        """Subword sampling reads the text again each epoch: it must be what was binarised."""
        manifest = load_manifest(self.data_dir)
        for name, corpus in self.splits:
            info = manifest.splits[name]
            for stored, path in ((info.src, corpus.src), (info.tgt, corpus.tgt)):
                if stored.fingerprint != file_fingerprint(path):
                    raise DataError(f"{path}: changed since it was binarised; run mtkit train "
                                    "again to binarise it anew")
            if not (self.data_dir / f"{name}.lines").is_file():
                raise DataError(f"{self.data_dir}: {name} was binarised by an earlier mtkit "
                                "(no line numbers for subword sampling); binarise again")

    def _log(self, epoch: int, data: EpochData, seconds: float) -> None:
        parts = ", ".join(
            f"{name} {count} of {len(part)}" + (f" (x{corpus.weight:g})" if corpus.weight != 1
                                                 else "")
            for (name, corpus), part, count in zip(self.splits, self.parts, data.sampled)
        )
        how = f"; segmented afresh in {seconds:.1f}s" if self.sample_alpha else ""
        log.info("epoch %d: %d pairs: %s%s", epoch, len(data.items), parts, how)


def _pick_lines(path: Path, numbers: np.ndarray) -> list[str]:
    """The lines of `path` at the ascending line `numbers`."""
    wanted, picked = iter(numbers.tolist()), []
    target = next(wanted, None)
    for number, line in enumerate(read_lines(path)):
        if number == target:
            picked.append(line)
            target = next(wanted, None)
            if target is None:
                break
    if len(picked) != len(numbers):
        raise DataError(f"{path}: has fewer lines than when it was binarised; binarise again")
    return picked
