"""One decode step: a new position per row through the decoder, on a lean path of its own.

decode_step runs one new position per row, a handful of rows when one sentence is
translated. There the step is bound by reading the weights and by launching operators,
not by arithmetic, so it has its own path: (rows, D) tensors throughout, one copy writes
a position's K and V into the cache, and on the CPU the weights are kept transposed (see
StepLinear). `Transformer.decode` stays the reference it is tested against.

`StepWeights` gathers what the step reads from the decoder's modules, and its forward is
the step. It is a snapshot (the CPU's transposed weights are copies): whoever decodes
builds it from the weights as they are then (an engine when it is made,
`Transformer.init_cache` when given none), and nothing has to be told when the weights
change later.

The step is written in the Python TorchScript compiles, so that an engine on the CPU can
run it compiled (`StepWeights.script`, runtime/compiled.py). Run as plain Python it is
the same computation; the modules' `__call__` is their forward, without nn.Module's hook
machinery, which nothing sets on them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.model.layers import DecoderLayer, inference_attention
from mtkit.runtime.compiled import script


class StepLinear(nn.Module):
    """A linear layer as decode_step applies it to (rows, in) inputs.

    On the CPU the weight's memory is laid out transposed, (in, out) and contiguous: MKL
    multiplies a few rows by it faster than by nn.Linear's (out, in) layout
    (docs/benchmarks.md). `weight` is an (out, in) view of it, so that F.linear (one
    operator, as plain Python and compiled: TorchScript would split an addmm in two,
    rounding differently) multiplies by that memory as it lies. The copy costs memory the
    size of the decoder's weights, so other devices use the weight as it is.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = weight  # (out, in)
        self.bias = bias

    @classmethod
    def of(cls, linear: nn.Linear) -> StepLinear:
        return cls.laid_out(linear.weight.detach(),
                            None if linear.bias is None else linear.bias.detach())

    @classmethod
    def laid_out(cls, weight: Tensor, bias: Tensor | None) -> StepLinear:
        """weight (out, in), copied into the CPU's layout on the CPU."""
        if weight.device.type == "cpu":
            weight = weight.t().contiguous().t()
        return cls(weight, bias)

    def forward(self, x: Tensor) -> Tensor:  # (rows, in) -> (rows, out)
        return F.linear(x, self.weight, self.bias)

    __call__ = forward


def step_linear(module: nn.Module) -> nn.Module:
    """What decode_step calls for a linear: a StepLinear, or a replacement module (such as
    an int8 linear) as it is."""
    return StepLinear.of(module) if type(module) is nn.Linear else module


def scriptable_linear(module: nn.Module) -> nn.Module:
    """A step linear as the compiled step holds it. A linear whose kernel depends on
    torch's thread count, which compiled code cannot ask, offers `scriptable()`: its
    kernels fixed at today's threads."""
    fixed = getattr(module, "scriptable", None)
    return module if fixed is None else fixed()


class StepNorm(nn.Module):
    """A LayerNorm's detached weights, applied as the module does."""

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.shape = list(norm.normalized_shape)
        self.weight, self.bias = norm.weight.detach(), norm.bias.detach()
        self.eps = norm.eps

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)

    __call__ = forward


LINEARS = ("qkv", "self_out", "q", "cross_out", "w_in", "w_out")  # a LayerStep's linears


class LayerStep(nn.Module):
    """One decoder layer's weights, gathered for the step; forward runs one new position
    through the layer."""

    def __init__(self, layer: DecoderLayer) -> None:
        super().__init__()
        self.pre_norm = layer.pre_norm
        self.heads = layer.self_attn.heads
        self.activation = layer.ffn.activation
        self.norm1, self.norm2, self.norm3 = (StepNorm(n) for n in (layer.norm1, layer.norm2,
                                                                    layer.norm3))
        for name, module in zip(LINEARS, (layer.self_attn.qkv, layer.self_attn.out,
                                          layer.cross_attn.q, layer.cross_attn.out,
                                          layer.ffn.w_in, layer.ffn.w_out), strict=True):
            setattr(self, name, step_linear(module))

    def scriptable(self) -> LayerStep:
        """This layer's weights (the same tensors) with `scriptable_linear`'s linears."""
        copy = LayerStep.__new__(LayerStep)
        nn.Module.__init__(copy)
        for name in ("pre_norm", "heads", "activation", "norm1", "norm2", "norm3"):
            setattr(copy, name, getattr(self, name))
        for name in LINEARS:
            setattr(copy, name, scriptable_linear(getattr(self, name)))
        return copy

    def forward(self, x: Tensor, kv: Tensor, step: int, cross_k: Tensor, cross_v: Tensor,
                src_keep: Tensor | None) -> Tensor:
        """x (rows, D) -> (rows, D). kv: the layer's self-attention buffer (2, >= rows, H,
        max_len, dh), K and V of the positions < step filled; this position's are written
        at `step`. cross_k/cross_v (n, H, S, dh) for n sentences of rows / n beam rows
        each. The residual blocks as `layers.residual` runs them at inference."""
        h = self.norm1(x) if self.pre_norm else x
        y = self.self_attention(h, kv, step)
        x = x + y if self.pre_norm else self.norm1(x + y)
        h = self.norm2(x) if self.pre_norm else x
        y = self.cross_attention(h, cross_k, cross_v, src_keep)
        x = x + y if self.pre_norm else self.norm2(x + y)
        h = self.norm3(x) if self.pre_norm else x
        y = self.feed_forward(h)
        return x + y if self.pre_norm else self.norm3(x + y)

    __call__ = forward

    def self_attention(self, h: Tensor, kv: Tensor, step: int) -> Tensor:
        rows, dim = h.size(0), h.size(1)
        qkv = self.qkv(h).view(rows, 3, self.heads, -1)  # (rows, 3, H, dh)
        kv[:, :rows, :, step] = qkv[:, 1:].transpose(0, 1)  # K and V in one copy
        q = qkv[:, 0].unsqueeze(2)  # (rows, H, 1, dh)
        # every cached position is in the past: no mask
        y = inference_attention(q, kv[0, :rows, :, : step + 1], kv[1, :rows, :, : step + 1],
                                None)
        return self.self_out(y.reshape(rows, dim))  # (rows, H, 1, dh) -> (rows, D): a view

    def cross_attention(self, h: Tensor, cross_k: Tensor, cross_v: Tensor,
                        src_keep: Tensor | None) -> Tensor:
        # a sentence's beam rows are query positions against its one copy of K/V
        rows, dim, n = h.size(0), h.size(1), cross_k.size(0)
        q = self.q(h).view(n, rows // n, self.heads, -1).transpose(1, 2)  # (n, H, beam, dh)
        y = inference_attention(q, cross_k, cross_v, src_keep)  # (n, H, beam, dh)
        return self.cross_out(y.transpose(1, 2).reshape(rows, dim))

    def feed_forward(self, h: Tensor) -> Tensor:  # `layers.feed_forward`, inference only
        h = self.w_in(h)  # (rows, ffn) or (rows, 2*ffn)
        if self.activation == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        elif self.activation == "swish":
            h = F.silu(h)
        else:
            h = F.relu(h, inplace=True)
        return self.w_out(h)


class StepEmbedding(nn.Module):
    """One position's input to the decoder: table[token] * scale + positions[step], as
    `Transformer._embed` computes it, without its module call and checks (decode_step
    checks the position against its cache, which init_cache checked against the table)."""

    def __init__(self, table: Tensor, scale: float, positions: Tensor) -> None:
        super().__init__()
        self.table = table  # (V, D)
        self.scale = scale
        self.positions = positions  # (max_positions, D)

    def forward(self, tokens: Tensor, step: int) -> Tensor:  # (rows,) -> (rows, D)
        return F.embedding(tokens, self.table).mul_(self.scale).add_(self.positions[step])

    __call__ = forward


class StepWeights(nn.Module):
    """Everything of the decoder that decode_step reads: the target embedding
    (`StepEmbedding`), per layer (`LayerStep`), the final norm (nn.Identity after a
    post-norm stack) and the output projection; forward is the step.

    `script()` compiles the step for the thread count of the moment; `program()` is then
    what to run: the compiled step while torch runs that many threads, else this module.
    """

    def __init__(self, embed: StepEmbedding, layers: list[LayerStep], final_norm: nn.Module,
                 out_proj: nn.Module) -> None:
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.out_proj = out_proj
        self.compiled: tuple[int, torch.jit.ScriptModule] | None = None  # (threads, step)

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
                       nn.Identity() if final_norm is None else StepNorm(final_norm),
                       step_linear(out_proj))

    def forward(self, tokens: Tensor, self_kv: Tensor, step: int, cross_k: list[Tensor],
                cross_v: list[Tensor], src_keep: Tensor | None) -> Tensor:
        """(rows,) tokens at position `step` -> fp32 logits (rows, V); self_kv (layers, 2,
        R, H, max_len, dh) gets their K and V (see DecoderCache)."""
        x = self.embed(tokens, step)  # (rows, D)
        for i, layer in enumerate(self.layers):
            x = layer(x, self_kv[i], step, cross_k[i], cross_v[i], src_keep)
        return self.out_proj(self.final_norm(x)).float()  # (rows, V)

    __call__ = forward

    def script(self) -> bool:
        """Compile the step with TorchScript for torch's thread count now, on the CPU;
        False (and the step stays plain Python) on other devices, where it was not
        measured, and where this torch cannot compile it."""
        if self.embed.table.device.type != "cpu":
            return False
        copy = StepWeights(self.embed, [layer.scriptable() for layer in self.layers],
                           self.final_norm, scriptable_linear(self.out_proj))
        compiled = script(copy)
        if compiled is None:
            return False
        self.compiled = (torch.get_num_threads(), compiled)
        return True

    def program(self) -> Callable[..., Tensor]:
        """The step to run now: the compiled one if it was compiled for today's threads."""
        compiled = self.compiled
        if compiled is not None and compiled[0] == torch.get_num_threads():
            return compiled[1]
        return self
