"""top_k: the k largest values of each row found through the maxima of blocks, against
torch's own top-k."""

from __future__ import annotations

import pytest
import torch

from mtkit.decode import topk
from mtkit.decode.topk import BLOCK, top_k


def reference_check(x: torch.Tensor, k: int) -> None:
    values, indices = top_k(x, k)
    expected, expected_indices = x.topk(k)
    assert torch.equal(values, expected)
    assert torch.equal(indices, expected_indices)


@pytest.mark.parametrize("shape", [(3, 5, 20_000), (2, 12_800), (65_001,), (4, 2, 12_300)])
@pytest.mark.parametrize("k", [1, 10])
def test_equals_torchs_top_k_on_distinct_values(shape, k):
    """Whole blocks only (12,800) or a partial block after them; any leading shape."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k))
    assert shape[-1] >= max(k * BLOCK / topk.MOST, topk.MIN_LENGTH)  # the blocks are used
    reference_check(x, k)


def test_finds_the_best_values_in_one_block_and_in_the_partial_block():
    """All k best in a single block, or in the row's partial last block, with never-emitted
    tokens at -inf elsewhere."""
    x = torch.randn(3, 20_000, generator=torch.Generator().manual_seed(0))
    x[:, :4] = float("-inf")
    x[0, 300:310] = torch.arange(10.0) + 10  # one block (the third)
    x[1, -10:] = torch.arange(10.0) + 10  # the partial block: 20,000 = 156 x 128 + 32
    x[2, 128 * 7 + 5] = 50.0  # one value far ahead, the rest spread
    reference_check(x, 10)


def test_equal_values_give_the_same_values_and_indices_of_equal_values():
    x = torch.zeros(2, 15_000)
    x[0, 1000] = x[0, 9000] = 1.0  # ties at the top
    values, indices = top_k(x, 10)
    assert torch.equal(values, x.topk(10).values)
    assert torch.equal(x.gather(1, indices), values)
    assert len(set(indices[0].tolist())) == 10  # each value once


def test_short_rows_use_torchs_top_k(monkeypatch):
    """Below the length where blocks pay, nothing but torch's top-k runs."""
    monkeypatch.setattr(torch.Tensor, "amax", lambda *a, **k: pytest.fail("blocks used"))
    reference_check(torch.randn(5, 4000), 1)
    reference_check(torch.randn(5, 20_000), 40)  # 40 blocks: more than a quarter
