"""Label-smoothed loss against hand computations; the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch

from mtkit.loss import label_smoothed_nll
from mtkit.schedule import inverse_sqrt_lr

PAD = 0


def test_eps_zero_is_plain_nll_by_hand():
    logits = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    target = torch.tensor([2, 1])
    # -log softmax by hand: row 0 target logit 2 over (0, 1, 2); row 1 target logit 0.
    lse0 = math.log(math.exp(0) + math.exp(1) + math.exp(2))
    lse1 = math.log(math.exp(3) + 2 * math.exp(0))
    expected = (lse0 - 2.0) + (lse1 - 0.0)
    loss, nll, ntokens = label_smoothed_nll(logits, target, 0.0, pad_id=-1)
    assert ntokens == 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert nll.item() == pytest.approx(expected, rel=1e-6)


def test_smoothing_matches_a_dense_target():
    torch.manual_seed(0)
    vocab, eps = 7, 0.2
    logits = torch.randn(2, 4, vocab)
    target = torch.tensor([[3, 5, 1, PAD], [2, PAD, PAD, PAD]])
    loss, nll, ntokens = label_smoothed_nll(logits, target, eps, PAD)

    logp = logits.log_softmax(-1)
    dense = torch.full_like(logp, eps / vocab)  # eps spread over all V, reference included
    dense.scatter_add_(-1, target[..., None], torch.full(target[..., None].shape, 1 - eps))
    keep = target != PAD
    assert ntokens == 4
    torch.testing.assert_close(loss, -(dense * logp).sum(-1)[keep].sum())
    torch.testing.assert_close(nll, -logp.gather(-1, target[..., None])[..., 0][keep].sum())


def test_pad_positions_are_ignored_and_dtype_is_fp32():
    torch.manual_seed(0)
    logits = torch.randn(3, 5)
    target = torch.tensor([4, PAD, 2])
    loss, nll, ntokens = label_smoothed_nll(logits, target, 0.1, PAD)
    changed = logits.clone()
    changed[1] = 100 * torch.randn(5)  # anything at a pad position
    loss2, nll2, _ = label_smoothed_nll(changed.bfloat16(), target, 0.1, PAD)
    assert ntokens == 2
    assert loss2.dtype == torch.float32
    torch.testing.assert_close(loss2, loss, atol=0.05, rtol=0)  # bf16 inputs, same positions
    torch.testing.assert_close(nll2, nll, atol=0.05, rtol=0)
    all_pad = label_smoothed_nll(logits, torch.full((3,), PAD), 0.1, PAD)
    assert all_pad[0].item() == 0.0 and all_pad[2] == 0


def test_loss_has_gradients():
    logits = torch.randn(4, 6, requires_grad=True)
    loss, _, _ = label_smoothed_nll(logits, torch.tensor([1, 2, PAD, 3]), 0.1, PAD)
    loss.backward()
    assert logits.grad[2].abs().sum() == 0  # the pad row gets nothing
    assert logits.grad[0].abs().sum() > 0


def test_schedule_warmup_peak_and_decay():
    peak, warmup = 1e-3, 100
    assert inverse_sqrt_lr(1, peak, warmup) == pytest.approx(peak / 100)
    assert inverse_sqrt_lr(50, peak, warmup) == pytest.approx(peak / 2)
    assert inverse_sqrt_lr(100, peak, warmup) == pytest.approx(peak)
    assert inverse_sqrt_lr(400, peak, warmup) == pytest.approx(peak / 2)
    assert inverse_sqrt_lr(10_000, peak, warmup) == pytest.approx(peak / 10)
    rates = [inverse_sqrt_lr(s, peak, warmup) for s in range(1, 300)]
    assert max(rates) == pytest.approx(peak) and rates.index(max(rates)) == 99


def test_schedule_without_warmup():
    assert inverse_sqrt_lr(1, 0.5, 0) == pytest.approx(0.5)
    assert inverse_sqrt_lr(4, 0.5, 0) == pytest.approx(0.25)
    assert inverse_sqrt_lr(1, 0.5, 1) == pytest.approx(0.5)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_gradient_matches_autograd_of_the_dense_formula(eps):
    torch.manual_seed(1)
    vocab = 11
    logits = torch.randn(6, vocab, requires_grad=True)
    target = torch.tensor([1, 4, PAD, 10, 3, PAD])
    loss, nll, _ = label_smoothed_nll(logits, target, eps, PAD)
    (loss + 0.5 * nll).backward()
    fused = logits.grad.clone()

    logits.grad = None
    logp = logits.log_softmax(-1)
    dense = torch.full_like(logp, eps / vocab)
    dense.scatter_add_(-1, target[:, None], torch.full((6, 1), 1 - eps))
    keep = (target != PAD).float()
    ref_loss = (-(dense * logp).sum(-1) * keep).sum()
    ref_nll = (-logp.gather(-1, target[:, None])[:, 0] * keep).sum()
    (ref_loss + 0.5 * ref_nll).backward()
    torch.testing.assert_close(fused, logits.grad)
