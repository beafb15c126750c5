"""One decode step: a new position per row through the decoder, on a lean path of its own.

decode_step runs one new position per row, a handful of rows when one sentence is
translated. There the step is bound by reading the weights and by launching operators,
not by arithmetic, so it has its own path: (rows, D) tensors throughout, one copy writes
a position's K and V into the cache, no module calls, and on the CPU the weights are kept
transposed (see StepLinear). `Transformer.decode` stays the reference it is tested against.

`StepWeights` gathers what the step reads from the decoder's modules. It is a snapshot
(the CPU's transposed weights are copies): whoever decodes builds it from the weights as
they are then (an engine when it is made, `Transformer.init_cache` when given none), and
nothing has to be told when the weights change later.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.model.layers import DecoderLayer, attention, feed_forward, residual


class StepLinear:
    """A linear layer as decode_step applies it to (rows, in) inputs.

    On the CPU the weight is held transposed, (in, out) and contiguous: MKL multiplies a
    few rows by it faster than by nn.Linear's (out, in) layout (docs/benchmarks.md). The
    copy costs memory the size of the decoder's weights, so other devices use the weight
    as it is.
    """

    def __init__(self, linear: nn.Linear) -> None:
        weight = linear.weight.detach()
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.transposed = weight.device.type == "cpu"
        self.weight = weight.t().contiguous() if self.transposed else weight  # (in, out)

    def __call__(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        if not self.transposed:
            return F.linear(x, self.weight, self.bias)
        if self.bias is None:
            return torch.mm(x, self.weight)
        return torch.addmm(self.bias, x, self.weight)


def step_linear(module: nn.Module) -> Callable[[Tensor], Tensor]:
    """What decode_step calls for a linear: a StepLinear, or a replacement module (such as
    an int8 linear) as it is."""
    return StepLinear(module) if type(module) is nn.Linear else module


class LayerStep:
    """One decoder layer's weights, gathered for `layer_step`."""

    def __init__(self, layer: DecoderLayer) -> None:
        self.pre_norm = layer.pre_norm
        self.heads = layer.self_attn.heads
        self.activation = layer.ffn.activation
        self.norms = [step_norm(n) for n in (layer.norm1, layer.norm2, layer.norm3)]
        self.qkv, self.self_out = step_linear(layer.self_attn.qkv), step_linear(layer.self_attn.out)
        self.q, self.cross_out = step_linear(layer.cross_attn.q), step_linear(layer.cross_attn.out)
        self.w_in, self.w_out = step_linear(layer.ffn.w_in), step_linear(layer.ffn.w_out)


def step_norm(norm: nn.LayerNorm) -> Callable[[Tensor], Tensor]:
    """The LayerNorm as a plain function of its detached weights."""
    return functools.partial(F.layer_norm, normalized_shape=norm.normalized_shape,
                             weight=norm.weight.detach(), bias=norm.bias.detach(), eps=norm.eps)


def layer_step(w: LayerStep, x: Tensor, kv: Tensor, step: int, cross_k: Tensor,
               cross_v: Tensor, src_keep: Tensor | None) -> Tensor:
    """One new position through one decoder layer: x (rows, D) -> (rows, D).

    kv: the layer's self-attention buffer (2, >= rows, H, max_len, dh), K and V of the
    positions < step filled; this position's are written at `step`. cross_k/cross_v
    (n, H, S, dh) for n sentences of rows / n beam rows each.
    """
    rows, dim = x.shape
    heads = w.heads

    def self_attn(h: Tensor) -> Tensor:
        qkv = w.qkv(h).view(rows, 3, heads, -1)  # (rows, 3, H, dh)
        kv[:, :rows, :, step] = qkv[:, 1:].transpose(0, 1)  # K and V in one copy
        q = qkv[:, 0].unsqueeze(2)  # (rows, H, 1, dh)
        # every cached position is in the past: no mask
        y = attention(q, kv[0, :rows, :, : step + 1], kv[1, :rows, :, : step + 1], None, 0.0)
        return w.self_out(y.reshape(rows, dim))  # (rows, H, 1, dh) -> (rows, D): a view

    def cross_attn(h: Tensor) -> Tensor:
        # a sentence's beam rows are query positions against its one copy of K/V
        n = cross_k.size(0)
        q = w.q(h).view(n, rows // n, heads, -1).transpose(1, 2)  # (n, H, beam, dh)
        y = attention(q, cross_k, cross_v, src_keep, 0.0)  # (n, H, beam, dh)
        return w.cross_out(y.transpose(1, 2).reshape(rows, dim))

    def ffn(h: Tensor) -> Tensor:
        return feed_forward(h, w.w_in, w.w_out, w.activation)

    # `residual` at inference: no dropout
    x = residual(x, self_attn, w.norms[0], 0.0, w.pre_norm, False)
    x = residual(x, cross_attn, w.norms[1], 0.0, w.pre_norm, False)
    return residual(x, ffn, w.norms[2], 0.0, w.pre_norm, False)



class StepWeights:
    """Everything of the decoder that decode_step reads: the target embedding
    (`StepEmbedding`), per layer (`LayerStep`), the final norm (None after a post-norm
    stack) and the output projection."""

    def __init__(self, embed: StepEmbedding, layers: list[LayerStep],
                 final_norm: Callable[[Tensor], Tensor] | None,
                 out_proj: Callable[[Tensor], Tensor]) -> None:
        self.embed = embed
        self.layers = layers
        self.final_norm = final_norm
        self.out_proj = out_proj

    @classmethod
    def gather(cls, embedding: nn.Embedding, scale: float, positions: Tensor,
               decoder: nn.ModuleList, final_norm: nn.LayerNorm | None,
               out_proj: nn.Module) -> StepWeights:
        """From the modules' weights as they are now; `positions` (max_positions, D) the
        position table (fixed or learned)."""
        # Plain tensors even under inference_mode, so that a later call outside it (with
        # autograd on) may use them.
        with torch.inference_mode(False), torch.no_grad():
            embed = StepEmbedding(embedding.weight.detach(), scale, positions.detach())
            return cls(embed, [LayerStep(layer) for layer in decoder],
                       None if final_norm is None else step_norm(final_norm),
                       step_linear(out_proj))


class StepEmbedding:
    """One position's input to the decoder: table[token] * scale + positions[step], as
    `Transformer._embed` computes it, without its module call and checks (decode_step
    checks the position against its cache, which init_cache checked against the table)."""

    def __init__(self, table: Tensor, scale: float, positions: Tensor) -> None:
        self.table = table  # (V, D)
        self.scale = scale
        self.positions = positions  # (max_positions, D)

    def __call__(self, tokens: Tensor, step: int) -> Tensor:  # (rows,) -> (rows, D)
        return F.embedding(tokens, self.table).mul_(self.scale).add_(self.positions[step])
