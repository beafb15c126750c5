"""Subword sampling (Kudo 2018): a segmentation of each line drawn afresh, not the best one.

Tokenizer.encode_src / encode_tgt take a Sampling to draw; dev and test text never does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import sentencepiece as spm


@dataclass
class Sampling:
    """Subword sampling (Kudo 2018, its l-best form): each line's segmentation is drawn
    from its SAMPLE_NBEST best with probability proportional to P(segmentation)^alpha.
    Our own generator draws, not spm's, whose samples differ from process to process
    whatever its seed, so that a resumed run sees the same segmentations."""

    alpha: float
    rng: np.random.Generator


SAMPLE_NBEST = 16


def sample_segmentations(proc: spm.SentencePieceProcessor, lines: list[str],
                         sampling: Sampling, scores: np.ndarray) -> list[list[int]]:
    """One segmentation per line, drawn from its SAMPLE_NBEST best; `scores`: piece_scores."""
    nbests = proc.nbest_encode(lines, nbest_size=SAMPLE_NBEST, out_type=int)
    segments = [seg for nbest in nbests for seg in nbest]
    lens = np.fromiter(map(len, segments), dtype=np.int64, count=len(segments))
    flat = np.fromiter(itertools.chain.from_iterable(segments), dtype=np.int64,
                       count=int(lens.sum()))
    # a unigram model's log P(segmentation) is the sum of its pieces' scores
    cumulative = np.concatenate([[0.0], np.cumsum(scores[flat])])
    ends = np.cumsum(lens)
    log_p = cumulative[ends] - cumulative[ends - lens]  # (segments,)
    # Gumbel-max: the argmax of alpha * log P + Gumbel noise is a draw from the softmax
    keys = sampling.alpha * log_p + sampling.rng.gumbel(size=len(segments))
    picked, start = [], 0
    for nbest in nbests:
        picked.append(nbest[int(np.argmax(keys[start : start + len(nbest)]))])
        start += len(nbest)
    return picked


def piece_scores(proc: spm.SentencePieceProcessor) -> np.ndarray:
    """Each piece's log-probability in a unigram model, by id."""
    return np.array([proc.get_score(i) for i in range(proc.vocab_size())])
