"""Thread settings per batch: CTranslate2's inter/intra-op threads (ct2.choose_threads).
(An export decoding with them: tests/integration/test_ct2_threads.py.)"""

from __future__ import annotations

import pytest

from mtkit.decode.ct2 import LARGE_BATCH, choose_threads


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_small_batches_get_one_thread_and_a_worker_per_core(cores):
    # one sentence on one thread (2 OpenMP threads on 2 cores ran one verse 3x slower);
    # other callers' batches meanwhile on the other cores
    for sentences in (1, 2, LARGE_BATCH - 1):
        assert choose_threads(sentences, cores) == (cores, 1)


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_large_batches_get_every_core_intra_op(cores):
    for sentences in (LARGE_BATCH, 130, 10_000):
        assert choose_threads(sentences, cores) == (1, cores)


def test_threads_given_are_intra_op_threads_for_every_batch():
    for sentences in (1, LARGE_BATCH, 500):
        assert choose_threads(sentences, cores=8, threads=3) == (1, 3)
