"""An exponential moving average of the weights (`train.ema`), kept beside training.

After every update each parameter's shadow moves towards it: shadow += (1 - decay) x
(parameter - shadow), so with decay 0.999 it averages roughly the last thousand updates.
The shadow is part of the training state (resumed bit-exactly), is validated beside the
weights, and is saved as checkpoint_ema.pt, a candidate for model.pt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class WeightEMA:
    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        # named_parameters lists a tied matrix once; the shadow follows that one Parameter
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        names = list(self.shadow)
        params = dict(model.named_parameters())
        torch._foreach_lerp_([self.shadow[n] for n in names], [params[n] for n in names],
                             1.0 - self.decay)

    @contextmanager
    @torch.no_grad()
    def swapped_in(self, model: torch.nn.Module) -> Iterator[None]:
        """The model holds the averaged weights inside the block, its own after it."""
        params = dict(model.named_parameters())
        own = {name: params[name].detach().clone() for name in self.shadow}
        for name, value in self.shadow.items():
            params[name].copy_(value)
        try:
            yield
        finally:
            for name, value in own.items():
                params[name].copy_(value)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: value.detach().cpu() for name, value in self.shadow.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if state.keys() != self.shadow.keys():
            raise ValueError("the saved weight average belongs to another model")
        for name, value in state.items():
            self.shadow[name].copy_(value)
