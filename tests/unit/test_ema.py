"""The weights' moving average (train.ema): its update rule, swapping it in and out,
tied matrices, and its saved state."""

from __future__ import annotations

import pytest
import torch

from mtkit.config import ModelConfig
from mtkit.model.transformer import Transformer
from mtkit.train.ema import WeightEMA


def test_the_shadow_moves_towards_the_weights():
    layer = torch.nn.Linear(3, 2)
    start = {k: v.clone() for k, v in layer.named_parameters()}
    ema = WeightEMA(layer, decay=0.9)
    with torch.no_grad():
        layer.weight.add_(1.0)
    ema.update(layer)
    assert torch.allclose(ema.shadow["weight"], start["weight"] + 0.1)  # 0.9 old + 0.1 new
    assert torch.equal(ema.shadow["bias"], start["bias"])
    for _ in range(200):
        ema.update(layer)
    assert torch.allclose(ema.shadow["weight"], layer.weight, atol=1e-6)


def test_swapped_in_restores_the_weights_and_follows_tied_matrices():
    model = Transformer(ModelConfig(enc_layers=1, dec_layers=1, d_model=8, heads=2, ffn_dim=16,
                                    tie_embeddings="all"), 20, 20, 0)
    ema = WeightEMA(model, decay=0.5)
    own = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    ema.update(model)  # shadow = (own + 3 own) / 2 = 2 own
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    with ema.swapped_in(model):
        inside = model.state_dict()
        for key, value in own.items():
            assert torch.allclose(inside[key], 2 * value), key  # tied keys included
    after = model.state_dict()
    assert all(torch.equal(after[k], moved[k]) for k in moved)


def test_state_round_trip_and_a_foreign_state():
    layer = torch.nn.Linear(3, 2)
    ema = WeightEMA(layer, decay=0.99)
    with torch.no_grad():
        layer.weight.add_(1.0)
    ema.update(layer)
    again = WeightEMA(torch.nn.Linear(3, 2), decay=0.99)
    again.load_state_dict(ema.state_dict())
    assert all(torch.equal(again.shadow[k], ema.shadow[k]) for k in ema.shadow)
    with pytest.raises(ValueError, match="belongs to another model"):
        WeightEMA(torch.nn.Linear(3, 2, bias=False), 0.99).load_state_dict(ema.state_dict())
