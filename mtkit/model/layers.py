"""The Transformer's building blocks: positions, attention, feed-forward, and the encoder
and decoder layers that `transformer.Transformer` stacks.

Shapes in comments: B batch, S source length, T target length, D d_model, H heads,
dh = D / H, V vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.config import ModelConfig

# --------------------------------------------------------------------------- helpers


def sinusoidal_positions(length: int, dim: int, layout: str = "interleaved",
                         first_row: int = 0) -> Tensor:
    """The paper's fixed position table, (length, dim), interleaved sin/cos:

    PE[pos, 2i] = sin(pos / 10000^(2i/dim)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/dim)).

    layout "halves" (Marian's): the same values, the sines in columns 0..dim/2-1 and the
    cosines in dim/2..dim-1. Layout "fairseq" (M2M100, NLLB): sines then cosines too, but
    at frequencies exp(-i ln 10000 / (dim/2 - 1)), and position t read from row
    `first_row` + t of fairseq's table (its rows up to the pad id are never used).
    """
    pos = torch.arange(first_row, first_row + length, dtype=torch.float64)[:, None]  # (length, 1)
    if layout == "fairseq":
        half = dim // 2
        inv_freq = torch.exp(torch.arange(half, dtype=torch.float64)
                             * (-math.log(10000.0) / (half - 1)))  # (dim/2,)
    else:
        inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angle = pos * inv_freq  # (length, dim/2); float64 so large positions stay accurate
    if layout != "interleaved":
        return torch.cat([angle.sin(), angle.cos()], dim=1).float()
    table = torch.empty(length, dim, dtype=torch.float64)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()
    return table.float()


def split_heads(x: Tensor, parts: int, heads: int) -> tuple[Tensor, ...]:
    """(B, T, parts*D) -> `parts` views of shape (B, H, T, dh), without copying.

    A fused projection (QKV, KV) lays its outputs side by side on the last axis; one view
    and one permute separate them and the heads at once.
    """
    batch, length, _ = x.shape
    return x.view(batch, length, parts, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, dh) -> (B, T, D); the one copy attention cannot avoid."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def keep_mask(pad_mask: Tensor) -> Tensor | None:
    """(B, S) True at padding -> (B, 1, 1, S) True where attention may look, or None.

    scaled_dot_product_attention takes boolean masks as "True = take part". Returning None
    when no sentence is padded lets it use its unmasked (faster) kernels.
    """
    if not bool(pad_mask.any()):
        return None
    return ~pad_mask[:, None, None, :]


def attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, dropout_p: float,
              causal: bool = False) -> Tensor:
    """Scaled dot-product attention: (B, H, Tq, dh) queries over (B, H, Tk, dh) keys/values.

    torch's fused kernel, except in two cases where plain batched matmuls win
    (docs/benchmarks.md): in bf16 on a CPU, where the fused kernel (its backward above all)
    is several times slower than in fp32 while bf16 matmuls run on the matrix units; and in
    a decode step of a large batch (`inference_attention`).
    """
    if not dropout_p and not causal:
        return inference_attention(q, k, v, keep)
    if q.dtype == torch.bfloat16 and not q.is_cuda:
        return explicit_attention(q, k, v, keep, dropout_p, causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p,
                                          is_causal=causal)


def inference_attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None) -> Tensor:
    """`attention` without dropout or a causal mask, in code TorchScript compiles (the
    scripted decode step calls it). Besides bf16 on a CPU, plain matmuls serve a decode
    step of a large batch, many rows with few queries each (one, or `beam` in
    cross-attention), where the fused kernel, built for long query blocks, pays a fixed
    cost per row."""
    rows, queries = q.size(0), q.size(2)
    bf16_cpu = q.dtype == torch.bfloat16 and not q.is_cuda
    if not bf16_cpu and (q.is_cuda or queries > 8 or rows * queries < 64):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return attention_weights(q, k, keep) @ v


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None,
                       dropout_p: float, causal: bool) -> Tensor:
    """softmax(q k^T / sqrt(dh)) v as matmuls, with the fused kernel's masks and dropout."""
    weights = attention_weights(q, k, keep, causal)
    if dropout_p:
        weights = dropout(weights, dropout_p)
    return weights @ v  # (B, H, Tq, dh)


def attention_weights(q: Tensor, k: Tensor, keep: Tensor | None, causal: bool = False
                      ) -> Tensor:
    """softmax(q k^T / sqrt(dh)): (B, H, Tq, dh) queries, (B, H, Tk, dh) keys -> (B, H, Tq,
    Tk), each row summing to 1 over the keys it may see."""
    scores = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5  # (B, H, Tq, Tk)
    if causal:  # query i sees keys 0..i
        keep = torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool,
                          device=q.device).tril_()
    if keep is not None:
        # -inf written out: TorchScript reads no module-level floats
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(dim=-1)


def dropout(x: Tensor, p: float) -> Tensor:
    """Training dropout. bf16 on a CPU draws its mask from 16-bit random numbers, three
    from each 64-bit draw of the generator: torch's bernoulli_ draws one number per value,
    slowly, and costs a bf16 step more than its matmuls save. p is then rounded to a
    multiple of 1/65536 and the kept values scaled by the exact inverse of what is kept.
    fp32 keeps torch's own dropout, so fp32 runs train as they always have."""
    if not p or x.dtype != torch.bfloat16 or x.is_cuda:
        return F.dropout(x, p, training=True)
    dropped = round(p * 65536)
    count = x.numel()
    words = torch.empty((count + 2) // 3, dtype=torch.int64, device=x.device).random_()
    # random_ fills bits 0..62: the three low 16-bit lanes of each word are uniform
    lanes = words.view(torch.int16).view(-1, 4)[:, :3]  # (words, 3), values -32768..32767
    keep = (lanes >= dropped - 32768).reshape(-1)[:count].view(x.shape)
    return x * keep.to(x.dtype).mul_(65536 / (65536 - dropped))


def xavier_(linear: nn.Linear, parts: int = 1) -> None:
    """Xavier-uniform init, per block of a fused projection, as if the blocks were separate
    layers (a fused (3D, D) weight would otherwise get a smaller range than three (D, D))."""
    for block in linear.weight.chunk(parts, dim=0):
        nn.init.xavier_uniform_(block)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def residual(
    x: Tensor,
    sublayer: Callable[[Tensor], Tensor],
    norm: nn.Module,
    p: float,
    pre_norm: bool,
    training: bool,
) -> Tensor:
    """One residual block.

    post-norm (the paper): norm(x + dropout(sublayer(x)))
    pre-norm:              x + dropout(sublayer(norm(x)))   (trains without warmup tricks)
    """
    y = sublayer(norm(x) if pre_norm else x)
    if training:
        y = dropout(y, p)
    return x + y if pre_norm else norm(x + y)


# --------------------------------------------------------------------------- sublayers


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection."""

    def __init__(self, d_model: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.attn_dropout = attn_dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def reset_parameters(self) -> None:
        xavier_(self.qkv, parts=3)
        xavier_(self.out)

    def forward(
        self,
        x: Tensor,  # (B, T, D)
        keep: Tensor | None = None,  # (B, 1, 1, T) True = may attend; None = everything
        causal: bool = False,
    ) -> Tensor:
        q, k, v = split_heads(self.qkv(x), 3, self.heads)  # each (B, H, T, dh)
        p = self.attn_dropout if self.training else 0.0
        y = attention(q, k, v, keep, p, causal)
        return self.out(merge_heads(y))  # (B, T, D)


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder to the encoder output, fused K/V projection.

    The keys/values depend only on the encoder output, so `project_kv` is separate: the
    cache computes them once per sentence instead of once per decoded token.

    K/V may hold fewer rows than x: n sentences against n*beam decoder rows (row i*beam + j
    is beam j of sentence i). The beam rows of a sentence then become extra query positions
    against its one copy of K/V, so beam search reads the source side once per sentence.
    """

    def __init__(self, d_model: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.attn_dropout = attn_dropout
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def reset_parameters(self) -> None:
        xavier_(self.q)
        xavier_(self.kv, parts=2)
        xavier_(self.out)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, D) encoder output -> K, V, each (B, H, S, dh)."""
        k, v = split_heads(self.kv(memory), 2, self.heads)
        return k, v

    def forward(self, x: Tensor, k: Tensor, v: Tensor, keep: Tensor | None) -> Tensor:
        rows, length, dim = x.shape  # k, v: (n, H, S, dh) with rows = n * beam
        x = x.view(k.size(0), -1, dim)  # (n, beam*T, D)
        (q,) = split_heads(self.q(x), 1, self.heads)  # (n, H, beam*T, dh)
        p = self.attn_dropout if self.training else 0.0
        y = attention(q, k, v, keep, p)
        return self.out(merge_heads(y)).view(rows, length, dim)  # (B, T, D)

    def weights(self, x: Tensor, k: Tensor, keep: Tensor | None) -> Tensor:
        """The attention weights `forward` applies, (B, H, T, S), for one row per sentence
        (no beam): x (B, T, D) as forward gets it, k (B, H, S, dh) from project_kv."""
        (q,) = split_heads(self.q(x), 1, self.heads)  # (B, H, T, dh)
        return attention_weights(q, k, keep)


class FeedForward(nn.Module):
    """Position-wise feed-forward network with hidden size ffn_dim.

    relu:   max(0, x W1 + b1) W2 + b2            (the paper)
    swish:  silu(x W1 + b1) W2 + b2              (Marian's, not gated)
    swiglu: (silu(x W) * (x V)) W2, no biases    (Shazeer 2020; W and V fused in one matmul)
    """

    def __init__(self, d_model: int, ffn_dim: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.swiglu = activation == "swiglu"
        width = 2 * ffn_dim if self.swiglu else ffn_dim
        self.w_in = nn.Linear(d_model, width, bias=not self.swiglu)
        self.w_out = nn.Linear(ffn_dim, d_model, bias=not self.swiglu)

    def reset_parameters(self) -> None:
        xavier_(self.w_in, parts=2 if self.swiglu else 1)
        xavier_(self.w_out)

    def forward(self, x: Tensor) -> Tensor:
        return feed_forward(x, self.w_in, self.w_out, self.activation)


def feed_forward(x: Tensor, w_in: Callable[[Tensor], Tensor], w_out: Callable[[Tensor], Tensor],
                 activation: str) -> Tensor:
    """(..., D) -> (..., D) through the two linear modules (decode_step has its own:
    step.LayerStep.feed_forward)."""
    h = w_in(x)  # (..., ffn) or (..., 2*ffn)
    if activation == "swiglu":
        gate, up = h.chunk(2, dim=-1)
        h = F.silu(gate) * up
    elif activation == "swish":
        h = F.silu(h)  # not in place: its backward needs its input
    else:
        # In place is safe: the linear's backward needs its input, not its output.
        h = F.relu(h, inplace=True)
    return w_out(h)  # (..., D)


# --------------------------------------------------------------------------- layers


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.dropout = cfg.dropout
        self.self_attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)

    def forward(self, x: Tensor, keep: Tensor | None) -> Tensor:  # (B, S, D) -> (B, S, D)
        def self_attn(h: Tensor) -> Tensor:
            return self.self_attn(h, keep)

        block = (self.dropout, self.pre_norm, self.training)
        x = residual(x, self_attn, self.norm1, *block)
        return residual(x, self.ffn, self.norm2, *block)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.dropout = cfg.dropout
        self.self_attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.cross_attn = CrossAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.norm3 = nn.LayerNorm(cfg.d_model)

    def forward(
        self,
        x: Tensor,  # (B, T, D)
        cross_k: Tensor,  # (B, H, S, dh)
        cross_v: Tensor,  # (B, H, S, dh)
        src_keep: Tensor | None,  # (B, 1, 1, S)
    ) -> Tensor:
        # The whole prefix is here: a causal mask is all it needs. Target padding only ever
        # follows the real tokens, so a real position never sees a pad under the causal
        # mask; pad positions compute garbage that the loss ignores. (decode_step runs one
        # position against a cache: `_layer_step`.)
        def self_attn(h: Tensor) -> Tensor:
            return self.self_attn(h, None, True)

        def cross_attn(h: Tensor) -> Tensor:
            return self.cross_attn(h, cross_k, cross_v, src_keep)

        block = (self.dropout, self.pre_norm, self.training)
        x = residual(x, self_attn, self.norm1, *block)
        x = residual(x, cross_attn, self.norm2, *block)
        return residual(x, self.ffn, self.norm3, *block)
