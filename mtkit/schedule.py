"""The learning-rate schedule of "Attention Is All You Need", parameterised by its peak."""

from __future__ import annotations

import math


def inverse_sqrt_lr(step: int, peak_lr: float, warmup_steps: int) -> float:
    """Learning rate for update `step` (counted from 1).

        lr = peak_lr * step / warmup                 for step < warmup   (linear warmup)
        lr = peak_lr * sqrt(warmup / step)           for step >= warmup  (inverse sqrt decay)

    The two pieces meet at step == warmup, where lr == peak_lr. warmup_steps 0 means no
    warmup: it is treated as 1, so step 1 gets peak_lr and step s gets peak_lr / sqrt(s).
    """
    warmup = max(warmup_steps, 1)
    step = max(step, 1)
    if step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(warmup / step)
