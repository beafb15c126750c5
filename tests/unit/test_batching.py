from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mtkit.data.batching import BatchSampler, make_batch, token_batches
from mtkit.data.binarize import binarize
from mtkit.data.dataset import ParallelData
from mtkit.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SpecialIds, Tokenizer
from mtkit.decode.forced import pad_sources
from mtkit.decode.search import source_lengths


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = rng.integers(0, 60, size=500)
    tgt = rng.integers(1, 60, size=500)
    src[7] = 400  # longer than the whole budget: a batch of its own
    return src, tgt


def _epoch(sampler: BatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_batches_respect_the_budget_and_cover_every_pair(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3)
    batches = _epoch(sampler, 0)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for batch in batches:
        width = max(max(src[i], tgt[i]) + 1 for i in batch)
        assert len(batch) * width <= 300 or batch == [7]
    assert [7] in batches


def test_epochs_differ_but_are_reproducible(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3)
    first, second = _epoch(sampler, 0), _epoch(sampler, 1)
    assert first != second
    assert _epoch(BatchSampler.fixed(src, tgt, max_tokens=300, seed=3), 1) == second
    assert _epoch(BatchSampler.fixed(src, tgt, max_tokens=300, seed=4), 1) != second


def test_restoring_a_position_continues_the_same_sequence(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3)
    sampler.set_epoch(2)
    iterator = iter(sampler)
    seen = [next(iterator) for _ in range(5)]
    state = sampler.state_dict()
    assert state == {"epoch": 2, "position": 5}
    rest = list(iterator)
    assert sampler.state_dict() == {"epoch": 3, "position": 0}  # a finished epoch moves on
    next_epoch = list(sampler)

    restored = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3)
    restored.load_state_dict(state)
    restored.set_epoch(2)  # a training loop calls this on resume; it must keep the position
    assert list(restored) == rest
    restored.set_epoch(3)
    assert list(restored) == next_epoch
    assert seen + rest == _epoch(BatchSampler.fixed(src, tgt, 300, seed=3), 2)


def test_take_walks_the_epoch_in_groups(lengths) -> None:
    """Updates take the epoch's batches in groups (update_freq x world_size); positions
    count from 0, the last group is short, and then the epoch has nothing left."""
    src, tgt = lengths
    full = _epoch(BatchSampler.fixed(src, tgt, max_tokens=300, seed=3), 0)
    sampler = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3)
    groups = []
    while group := sampler.take(3):
        groups.append(group)
    assert [p for g in groups for p, _ in g] == list(range(len(full)))
    assert [b for g in groups for _, b in g] == full
    assert all(len(g) == 3 for g in groups[:-1]) and 1 <= len(groups[-1]) <= 3
    assert sampler.state_dict() == {"epoch": 0, "position": len(full)}
    sampler.set_epoch(1)
    fresh = BatchSampler.fixed(src, tgt, 300, seed=3)
    assert sampler.take(2) == list(enumerate(_epoch(fresh, 1)[:2]))


def test_unshuffled_batches_are_sorted_and_fixed(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler.fixed(src, tgt, max_tokens=300, seed=3, shuffle=False)
    first, again = list(sampler), list(sampler)  # reusable, e.g. for every validation
    assert first == again == _epoch(BatchSampler.fixed(src, tgt, 300, seed=9, shuffle=False), 5)
    widths = [max(max(src[i], tgt[i]) for i in b) for b in first]
    assert widths == sorted(widths)


def test_token_batches() -> None:
    lengths = [5, 50, 0, 12, 12, 7, 200, 3]
    batches = token_batches(lengths, max_tokens=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [6]  # longest first; too long for the budget, so alone
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 60 or len(batch) == 1
    order = [i for b in batches for i in b]
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)


def test_make_batch(tokenizer: Tokenizer, tmp_path: Path) -> None:
    src, tgt = tmp_path / "s", tmp_path / "t"
    src.write_text("y fue la luz\n\nen el principio crió Dios\n", encoding="utf-8")
    tgt.write_text("and there was light\nempty source\n\n", encoding="utf-8")
    binarize(tokenizer, {"dev": (src, tgt)}, tmp_path / "out", workers=1)
    data = ParallelData(tmp_path / "out", "dev")
    assert tokenizer.specials == SpecialIds(pad=PAD_ID, unk=1, start=BOS_ID, eos=EOS_ID)
    batch = make_batch(data, [0, 1, 2], tokenizer.specials)
    s_len, t_len = data.src_lens.tolist(), data.tgt_lens.tolist()
    assert batch.src.shape == (3, max(s_len) + 1) and batch.src.dtype == torch.long
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, max(t_len) + 1)
    assert batch.ntokens == sum(t_len) + 3 == int((batch.tgt_out != PAD_ID).sum())
    for row in range(3):
        ids, n = data.src(row).tolist(), s_len[row]
        assert batch.src[row].tolist() == ids + [EOS_ID] + [PAD_ID] * (batch.src.shape[1] - n - 1)
        ids, m = data.tgt(row).tolist(), t_len[row]
        pad = [PAD_ID] * (batch.tgt_out.shape[1] - m - 1)
        assert batch.tgt_in[row].tolist() == [BOS_ID] + ids + pad
        assert batch.tgt_out[row].tolist() == ids + [EOS_ID] + pad
    assert batch.src[1].tolist()[:1] == [EOS_ID]  # empty source line: EOS only
    assert len(batch.to("cpu")) == 3


class ListPairs:
    """Pairs from lists of ids (the `Pairs` protocol), for batches without files."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]) -> None:
        self._src, self._tgt = src, tgt

    def src(self, i: int) -> np.ndarray:
        return np.array(self._src[i], dtype=np.int64)

    def tgt(self, i: int) -> np.ndarray:
        return np.array(self._tgt[i], dtype=np.int64)


@pytest.mark.parametrize("specials", [
    SpecialIds(pad=9, unk=1, start=9, eos=0),  # a decoder that starts from pad (Marian's)
    SpecialIds(pad=1, unk=3, start=2, eos=2),  # one that starts from eos (M2M100's, NLLB's)
])
def test_make_batch_takes_the_special_ids_it_is_given(specials: SpecialIds) -> None:
    data = ListPairs(src=[[5, 6, 7], [8]], tgt=[[4, 5], [6, 7, 8]])
    batch = make_batch(data, [0, 1], specials)
    pad, eos, start = specials.pad, specials.eos, specials.start
    assert batch.src.tolist() == [[5, 6, 7, eos], [8, eos, pad, pad]]
    assert torch.equal(batch.src, pad_sources([[5, 6, 7], [8]], specials))
    assert batch.tgt_out.tolist() == [[4, 5, eos, pad], [6, 7, 8, eos]]
    assert batch.tgt_in.tolist() == [[start, 4, 5, pad], [start, 6, 7, 8]]
    assert batch.ntokens == 7


class LinkedPairs(ListPairs):
    def __init__(self, src: list[list[int]], tgt: list[list[int]],
                 links: list[list[tuple[int, int]]]) -> None:
        super().__init__(src, tgt)
        self._links = links

    def links(self, i: int) -> np.ndarray:
        return np.array(self._links[i], dtype=np.int64).reshape(-1, 2)


def test_a_language_token_after_eos_survives_the_cut_and_moves_the_links() -> None:
    """NLLB's legacy_behaviour (tag_after_eos): sources `[lang] pieces` are read as
    `pieces </s> [lang]`, cut to max_len before the move (the language token kept), and a
    link's source position follows its piece to where the encoder reads it."""
    specials = SpecialIds(pad=1, unk=3, start=2, eos=2, tag_after_eos=True)
    lang = 40
    assert specials.source_input([lang, 5, 6]) == [5, 6, 2, lang]
    assert specials.source_input([]) == [2]
    ended = specials.source_input([lang, 5, 6])
    assert [ended[p] for p in specials.source_positions(3)] == [lang, 5, 6, 2]
    plain = SpecialIds(pad=1, unk=3, start=2, eos=2)
    assert plain.source_positions(3) == [0, 1, 2, 3]
    data = LinkedPairs(src=[[lang, 5, 6, 7], [lang, 8]], tgt=[[4, 5], [6]],
                       links=[[(1, 0), (3, 1)], [(1, 0)]])
    batch = make_batch(data, [0, 1], specials, max_len=3, links=True)
    assert batch.src.tolist() == [[5, 6, 2, lang], [8, 2, lang, 1]]
    # piece 5 (source position 1) is read at 0; piece 7 was cut, its link with it
    assert batch.links.tolist() == [[0, 0, 0], [1, 0, 0]]
    assert torch.equal(batch.src, pad_sources([[lang, 5, 6], [lang, 8]], specials))
    # the search's length caps count the same real tokens in either order
    for either in (specials, plain):
        lengths = source_lengths(pad_sources([[lang, 5, 6], [lang]], either), either)
        assert lengths.tolist() == [3, 1]
