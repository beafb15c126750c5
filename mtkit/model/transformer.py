"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

One file, read top to bottom: positions, attention, feed-forward, the two layer types and
the model. The decoder cache that makes step-by-step decoding cheap is in cache.py.

Shapes in comments: B batch, S source length, T target length, D d_model, H heads,
dh = D / H, V vocabulary size.

Two ways through the decoder, with the same weights:

* ``decode`` runs a whole target prefix at once through the layer modules (training, and
  the uncached reference);
* ``decode_step`` runs ONE new position per call against a ``DecoderCache`` that holds the
  keys/values of the positions already decoded and the projected encoder output, on a
  lean path of its own (``_layer_step``: the section "one decode step"), tested equal to
  ``decode``.

The search sees the model only through the `search.SearchModel` protocol: ``encode``,
``init_cache``, ``decode_step`` (``decode`` for the uncached reference), ``max_positions``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.config import ModelConfig
from mtkit.model.cache import DecoderCache

NEG_INF = float("-inf")

# --------------------------------------------------------------------------- helpers


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """The paper's fixed position table, (length, dim), interleaved sin/cos:

    PE[pos, 2i] = sin(pos / 10000^(2i/dim)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/dim)).
    """
    pos = torch.arange(length, dtype=torch.float64)[:, None]  # (length, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angle = pos * inv_freq  # (length, dim/2); float64 so large positions stay accurate
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


def attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, dropout: float,
              causal: bool = False) -> Tensor:
    """Scaled dot-product attention: (B, H, Tq, dh) queries over (B, H, Tk, dh) keys/values.

    A decode step of a large batch has many rows with few queries each (one, or `beam` in
    cross-attention). There torch's fused CPU kernel, built for long query blocks, is
    slower than plain batched matmuls; with few rows its lower fixed cost wins. Measured
    (2 threads, 4 heads of 64): cross-attention of 117 sentences x beam 5 over 50 source
    positions 3.6 ms fused, 1.9 ms plain; 64 single-query rows 320 us against 252 us; one
    row 20 us against 45 us. Training and GPUs keep the fused kernel.
    """
    rows, queries = q.size(0), q.size(2)
    if dropout or causal or q.is_cuda or queries > 8 or rows * queries < 64:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout,
                                              is_causal=causal)
    scores = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5  # (B, H, Tq, Tk)
    if keep is not None:
        scores = torch.where(keep, scores, NEG_INF)
    return scores.softmax(dim=-1) @ v  # (B, H, Tq, dh)


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
    dropout: float,
    pre_norm: bool,
    training: bool,
) -> Tensor:
    """One residual block.

    post-norm (the paper): norm(x + dropout(sublayer(x)))
    pre-norm:              x + dropout(sublayer(norm(x)))   (trains without warmup tricks)
    """
    y = sublayer(norm(x) if pre_norm else x)
    if training:  # skipping the call at inference trims per-step overhead in decode_step
        y = F.dropout(y, dropout, training=True)
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


class FeedForward(nn.Module):
    """Position-wise feed-forward network with hidden size ffn_dim.

    relu:   max(0, x W1 + b1) W2 + b2            (the paper)
    swiglu: (silu(x W) * (x V)) W2, no biases    (Shazeer 2020; W and V fused in one matmul)
    """

    def __init__(self, d_model: int, ffn_dim: int, activation: str) -> None:
        super().__init__()
        self.swiglu = activation == "swiglu"
        width = 2 * ffn_dim if self.swiglu else ffn_dim
        self.w_in = nn.Linear(d_model, width, bias=not self.swiglu)
        self.w_out = nn.Linear(ffn_dim, d_model, bias=not self.swiglu)

    def reset_parameters(self) -> None:
        xavier_(self.w_in, parts=2 if self.swiglu else 1)
        xavier_(self.w_out)

    def forward(self, x: Tensor) -> Tensor:
        return feed_forward(x, self.w_in, self.w_out, self.swiglu)


def feed_forward(x: Tensor, w_in: Callable[[Tensor], Tensor], w_out: Callable[[Tensor], Tensor],
                 swiglu: bool) -> Tensor:
    """(..., D) -> (..., D) through the two linears (modules, or decode_step's StepLinears)."""
    h = w_in(x)  # (..., ffn) or (..., 2*ffn)
    if swiglu:
        gate, up = h.chunk(2, dim=-1)
        h = F.silu(gate) * up
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


# --------------------------------------------------------------------------- one decode step
#
# decode_step runs one new position per row, a handful of rows when one sentence is
# translated. There the step is bound by reading the weights and by launching operators,
# not by arithmetic, so it has its own lean path: (rows, D) tensors throughout, one copy
# writes a position's K and V into the cache, no module calls, and on the CPU the weights
# are kept transposed (see StepLinear). `decode` stays the reference it is tested against.


class StepLinear:
    """A linear layer as decode_step applies it to (rows, in) inputs.

    On the CPU the weight is held transposed, (in, out) and contiguous: MKL multiplies a
    few rows by it faster than by nn.Linear's (out, in) layout. Measured on the Bible
    model's decoder (18 layer linears and the output projection, 1 thread, weights out of
    L2 cache): 5 rows 1,063 -> 742 us, 1 row 701 -> 667 us, 600 rows 37.9 -> 33.1 ms. The
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
    """One decoder layer's weights, gathered for `_layer_step`."""

    def __init__(self, layer: DecoderLayer) -> None:
        self.pre_norm = layer.pre_norm
        self.heads = layer.self_attn.heads
        self.swiglu = layer.ffn.swiglu
        self.norms = [step_norm(n) for n in (layer.norm1, layer.norm2, layer.norm3)]
        self.qkv, self.self_out = step_linear(layer.self_attn.qkv), step_linear(layer.self_attn.out)
        self.q, self.cross_out = step_linear(layer.cross_attn.q), step_linear(layer.cross_attn.out)
        self.w_in, self.w_out = step_linear(layer.ffn.w_in), step_linear(layer.ffn.w_out)


def step_norm(norm: nn.LayerNorm) -> Callable[[Tensor], Tensor]:
    """The LayerNorm as a plain function of its detached weights."""
    return functools.partial(F.layer_norm, normalized_shape=norm.normalized_shape,
                             weight=norm.weight.detach(), bias=norm.bias.detach(), eps=norm.eps)


def _layer_step(w: LayerStep, x: Tensor, kv: Tensor, step: int, cross_k: Tensor,
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
        return feed_forward(h, w.w_in, w.w_out, w.swiglu)

    # `residual` at inference: no dropout
    x = residual(x, self_attn, w.norms[0], 0.0, w.pre_norm, False)
    x = residual(x, cross_attn, w.norms[1], 0.0, w.pre_norm, False)
    return residual(x, ffn, w.norms[2], 0.0, w.pre_norm, False)


# --------------------------------------------------------------------------- the model


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        if cfg.d_model % cfg.heads or (cfg.d_model // cfg.heads) % 2:
            raise ValueError(f"d_model {cfg.d_model} must split into {cfg.heads} even-sized heads")
        if cfg.tie_embeddings == "all" and src_vocab != tgt_vocab:
            raise ValueError(
                f"tie_embeddings 'all' needs one vocabulary, got {src_vocab} source and "
                f"{tgt_vocab} target entries; use 'decoder' or 'none'"
            )
        self.cfg = cfg
        self.pad_id = pad_id
        self.embed_scale = math.sqrt(cfg.d_model)
        d = cfg.d_model

        # Embeddings and output projection, shared per tie_embeddings. Sharing is by
        # assigning the same Parameter, so it survives state_dict save/load.
        self.tgt_embed = nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        if cfg.tie_embeddings == "all":
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        self.out_proj = nn.Linear(d, tgt_vocab, bias=False)
        if cfg.tie_embeddings in ("all", "decoder"):
            self.out_proj.weight = self.tgt_embed.weight

        if cfg.positions == "sinusoidal":
            table = sinusoidal_positions(cfg.max_positions, d)
            self.register_buffer("pos_table", table, persistent=False)  # rebuilt, not saved
            self.pos_embed = None
        else:
            self.pos_embed = nn.Embedding(cfg.max_positions, d)

        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        # Pre-norm leaves the residual stream unnormalised: each stack ends with a LayerNorm.
        pre = cfg.norm == "pre"
        self.enc_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """Xavier-uniform linears; embeddings (and an untied output projection, a vocabulary
        matrix like them) normal(0, d^-0.5) with the pad row zero, so that scaled by sqrt(d)
        a token embedding has unit variance, like the sinusoids it is added to."""
        for module in self.modules():
            if isinstance(module, (SelfAttention, CrossAttention, FeedForward)):
                module.reset_parameters()
        std = self.cfg.d_model**-0.5
        tables = [self.src_embed, self.tgt_embed]
        for table in tables[1:] if self.src_embed is self.tgt_embed else tables:
            nn.init.normal_(table.weight, 0.0, std)
            with torch.no_grad():
                table.weight[self.pad_id].zero_()
        if self.out_proj.weight is not self.tgt_embed.weight:
            nn.init.normal_(self.out_proj.weight, 0.0, std)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed.weight, 0.0, std)

    @property
    def max_positions(self) -> int:
        """Positions the model can embed: the search caps hypotheses below it."""
        return self.cfg.max_positions

    def num_parameters(self) -> int:
        """Trainable values, each shared tensor counted once."""
        return sum(p.numel() for p in self.parameters())

    # ----------------------------------------------------------------------- embedding

    def _embed(self, table: nn.Embedding, tokens: Tensor, start: int = 0) -> Tensor:
        """(B, T) token ids at positions start.. -> (B, T, D) scaled embeddings + positions."""
        end = start + tokens.size(1)
        if end > self.cfg.max_positions:
            raise ValueError(
                f"position {end - 1} is beyond model.max_positions ({self.cfg.max_positions})"
            )
        if self.pos_embed is None:
            pos = self.pos_table[start:end]  # (T, D)
        else:
            pos = self.pos_embed.weight[start:end]  # (T, D); a slice, cheaper than a lookup
        x = table(tokens) * self.embed_scale + pos  # (B, T, D)
        return F.dropout(x, self.cfg.dropout, training=True) if self.training else x

    # ----------------------------------------------------------------------- full sequences

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S) source ids -> memory (B, S, D), src_pad_mask (B, S) True at padding."""
        src_pad_mask = src.eq(self.pad_id)
        keep = keep_mask(src_pad_mask)
        x = self._embed(self.src_embed, src)
        for layer in self.encoder:
            x = layer(x, keep)
        return self.enc_norm(x), src_pad_mask

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_pad_mask: Tensor,
        positions: Tensor | None = None,
    ) -> Tensor:
        """(B, T) target prefix (BOS first) -> logits (B, T, V), causal, in the compute dtype.

        Pad tokens must come after the real ones (right padding); their logits are garbage.
        `positions` (B, T) bool: return logits only there, as (N, V) rows in order. Training
        passes the non-pad positions, so the output projection (a large share of a step)
        skips the padding.
        """
        src_keep = keep_mask(src_pad_mask)
        x = self._embed(self.tgt_embed, tgt_in)
        for layer in self.decoder:
            cross_k, cross_v = layer.cross_attn.project_kv(memory)
            x = layer(x, cross_k, cross_v, src_keep)
        x = self.dec_norm(x)  # (B, T, D)
        if positions is not None:
            x = x[positions]  # (N, D)
        return self.out_proj(x)

    def forward(self, src: Tensor, tgt_in: Tensor, positions: Tensor | None = None) -> Tensor:
        """(B, S) source, (B, T) target prefix -> logits (B, T, V), or (N, V) at `positions`."""
        return self.decode(tgt_in, *self.encode(src), positions=positions)

    # ----------------------------------------------------------------------- step by step

    def step_weights(self) -> DecoderStepWeights:
        """The decoder's weights as decode_step reads them, gathered once and reused.

        They are rebuilt whenever a decoder weight has changed since: replaced (another
        tensor) or written in place (load_state_dict and the EMA swap bump a tensor's
        version counter). Writes that bypass the counter are not seen: `p.data.copy_`, and
        fused AdamW's step, after which the trainer calls `weights_changed`.
        """
        tensors = [*self.decoder.parameters(), *self.decoder.buffers(),
                   *self.dec_norm.parameters(), *self.out_proj.parameters(),
                   *self.out_proj.buffers()]
        key = tuple((t.data_ptr(), t._version) for t in tensors)
        cached = getattr(self, "_step_weights", None)
        if cached is None or cached.key != key:
            # Plain tensors even under inference_mode, so that a later call outside it
            # (with autograd on) may use them.
            with torch.inference_mode(False), torch.no_grad():
                cached = DecoderStepWeights(self, key)
            self._step_weights = cached
        return cached

    def weights_changed(self) -> None:
        """Say that weights were written where their version counter does not show it:
        the next step_weights call rebuilds them."""
        self._step_weights = None

    def init_cache(
        self, memory: Tensor, src_pad_mask: Tensor, max_len: int, beam: int = 1
    ) -> DecoderCache:
        """A cache for up to `max_len` decode_step calls on these B sentences, `beam` rows
        (hypotheses) each.

        Projects the cross-attention K/V of every layer once, and allocates the
        self-attention K/V buffers. Call under torch.inference_mode().
        """
        if max_len > self.cfg.max_positions:
            raise ValueError(
                f"max_len {max_len} is beyond model.max_positions ({self.cfg.max_positions})"
            )
        cross_k, cross_v = [], []
        for layer in self.decoder:
            k, v = layer.cross_attn.project_kv(memory)
            # Contiguous once here, so the per-step attention reads plain memory.
            cross_k.append(k.contiguous())
            cross_v.append(v.contiguous())
        batch, heads, _, head_dim = cross_k[0].shape
        # Same dtype as the projections (bf16 under autocast), so writes need no casts.
        shape = (len(self.decoder), 2, batch * beam, heads, max_len, head_dim)
        dtype = cross_k[0].dtype
        return DecoderCache(
            self_kv=memory.new_empty(shape, dtype=dtype),
            spare_kv=memory.new_empty(shape, dtype=dtype),
            rows=batch * beam,
            beam=beam,
            cross_k=cross_k,
            cross_v=cross_v,
            src_keep=keep_mask(src_pad_mask),
            max_len=max_len,
            weights=self.step_weights(),
        )

    def decode_step(self, prev_tokens: Tensor, cache: DecoderCache) -> Tensor:
        """(B,) the latest token of each row -> fp32 logits (B, V) for the next token.

        prev_tokens is BOS on the first call. Runs position cache.step through the layers
        (the lean path of `_layer_step`, equal to `decode` to float rounding; inference
        only: no dropout), appends its K/V to the cache and advances cache.step. Logits are
        fp32 whatever the compute dtype, ready for log_softmax.
        """
        step = cache.step
        if step >= cache.max_len:
            raise ValueError(f"the cache holds {cache.max_len} positions; it is full")
        weights: DecoderStepWeights = cache.weights
        x = self._embed(self.tgt_embed, prev_tokens[:, None], start=step)[:, 0]  # (B, D)
        for i, layer in enumerate(weights.layers):
            x = _layer_step(layer, x, cache.self_kv[i], step, cache.cross_k[i],
                            cache.cross_v[i], cache.src_keep)
        cache.step = step + 1
        if weights.final_norm is not None:
            x = weights.final_norm(x)
        return weights.out_proj(x).float()  # (B, V)


class DecoderStepWeights:
    """Everything of the decoder that decode_step reads, per layer (see `LayerStep`)."""

    def __init__(self, model: Transformer, key: tuple) -> None:
        self.key = key  # the weights' (address, version) pairs it was built from
        self.layers = [LayerStep(layer) for layer in model.decoder]
        norm = model.dec_norm
        self.final_norm = None if isinstance(norm, nn.Identity) else step_norm(norm)
        self.out_proj = step_linear(model.out_proj)
