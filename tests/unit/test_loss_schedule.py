"""Label-smoothed loss against hand computations; the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch

from mtkit.model import loss as loss_module
from mtkit.model.loss import label_smoothed_nll
from mtkit.train.schedule import estimate_horizon, inverse_sqrt_lr, learning_rate

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_rows_equal_one_pass(monkeypatch, dtype):
    """The loss walks the logits in chunks of rows (a few rows each here, the last one
    short); loss, nll and gradient equal one pass over all rows, in fp32 and from bf16
    logits (whose maths runs in fp32, the gradient coming back in bf16)."""
    torch.manual_seed(2)
    logits = torch.randn(23, 13).to(dtype).requires_grad_()
    target = torch.randint(0, 13, (23,))
    target[::5] = PAD
    results = []
    for chunk in (10**9, 13 * 4):  # one chunk; 4 rows a chunk
        monkeypatch.setattr(loss_module, "CHUNK_VALUES", chunk)
        logits.grad = None
        loss, nll, _ = label_smoothed_nll(logits, target, 0.1, PAD)
        (loss + 0.3 * nll).backward()
        assert loss.dtype == torch.float32 and logits.grad.dtype == dtype
        results.append((loss.detach(), nll.detach(), logits.grad.clone()))
    for one, chunked in zip(*results):
        torch.testing.assert_close(chunked, one, atol=1e-5, rtol=0)
    # and bf16 logits give what their fp32 values give
    reference = logits.detach().float().requires_grad_()
    loss, nll, _ = label_smoothed_nll(reference, target, 0.1, PAD)
    (loss + 0.3 * nll).backward()
    torch.testing.assert_close(results[1][0], loss.detach(), atol=1e-4, rtol=0)
    torch.testing.assert_close(results[1][2].float(), reference.grad,
                               atol=0.01 if dtype == torch.bfloat16 else 1e-6, rtol=0)


# --------------------------------------------------------------------------- train.schedule


@pytest.mark.parametrize("schedule", ["linear", "cosine", "wsd"])
def test_decaying_schedules_warm_up_then_reach_the_floor_at_the_horizon(schedule):
    peak, floor, warmup, horizon = 1e-3, 1e-5, 10, 100
    rates = [learning_rate(schedule, s, peak, warmup, horizon, floor, 0.3)
             for s in range(1, 131)]
    assert rates[:warmup] == pytest.approx([peak * s / warmup for s in range(1, warmup + 1)])
    after = rates[warmup - 1 : horizon]
    assert all(a >= b for a, b in zip(after, after[1:]))  # never rises after the peak
    assert rates[horizon - 1] == pytest.approx(floor)  # update `horizon` runs at the floor
    assert rates[horizon:] == [floor] * 30  # and so does every update past it
    assert rates[horizon - 2] > floor


def test_schedule_values():
    peak, warmup, horizon = 1.0, 10, 110
    assert learning_rate("linear", 60, peak, warmup, horizon) == pytest.approx(0.5)
    assert learning_rate("cosine", 60, peak, warmup, horizon) == pytest.approx(0.5)
    assert learning_rate("cosine", 35, peak, warmup, horizon) == pytest.approx(
        0.5 * (1 + math.cos(math.pi / 4)))
    # wsd, decay over the last 20% (22 updates): the peak until update 88, half at 99
    assert learning_rate("wsd", 88, peak, warmup, horizon, 0.0, 0.2) == pytest.approx(1.0)
    assert learning_rate("wsd", 99, peak, warmup, horizon, 0.0, 0.2) == pytest.approx(0.5)
    assert learning_rate("wsd", 50, peak, warmup, horizon, 0.0, 0.2) == 1.0
    # no horizon yet (a max_time budget before its estimate): the peak after the warmup
    assert learning_rate("linear", 500, peak, warmup, 0) == 1.0
    # inverse-sqrt ignores the horizon: today's schedule, unchanged
    assert learning_rate("inverse-sqrt", 40, peak, warmup, 50) == inverse_sqrt_lr(40, peak, 10)


def test_estimate_horizon():
    assert estimate_horizon(step=100, elapsed=50.0, budget=600.0) == 1200
    assert estimate_horizon(step=100, elapsed=700.0, budget=600.0) == 101  # over budget


def test_a_decaying_schedule_needs_a_horizon():
    from mtkit.config import recipe_from_dict
    from mtkit.errors import ConfigError

    raw = {"data": {"train": {"src": "a", "tgt": "b"}}, "train": {"schedule": "cosine"}}
    with pytest.raises(ConfigError, match="train.schedule cosine decays to train.min_lr at a "
                                          "horizon: set train.max_steps or train.max_time"):
        recipe_from_dict(raw)
    raw["train"].update(max_time="30m", min_lr=0.1, lr=0.01)
    with pytest.raises(ConfigError, match=r"train.min_lr \(0.1\) must not exceed train.lr"):
        recipe_from_dict(raw)
