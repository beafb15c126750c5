"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The model: embeddings, the encoder and decoder stacks (their layers are in layers.py) and
the output projection. Shapes in comments: B batch, S source length, T target length,
D d_model, V vocabulary size.

Two ways through the decoder, with the same weights:

* ``decode`` runs a whole target prefix at once through the layer modules (training, and
  the uncached reference);
* ``decode_step`` runs ONE new position per call against a ``DecoderCache`` that holds the
  keys/values of the positions already decoded, the projected encoder output and the
  decoder weights the step reads (step.py's lean path), tested equal to ``decode``.

The search sees the model only through the `search.SearchModel` protocol: ``encode``,
``init_cache``, ``decode_step`` (``decode`` for the uncached reference), ``max_positions``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from mtkit.config import ModelConfig
from mtkit.model.cache import DecoderCache
from mtkit.model.layers import (
    CrossAttention,
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    SelfAttention,
    dropout,
    keep_mask,
    sinusoidal_positions,
)
from mtkit.model.step import StepWeights


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0,
                 start_id: int | None = None) -> None:
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
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        d = cfg.d_model

        # Embeddings and output projection, shared per tie_embeddings. Sharing is by
        # assigning the same Parameter, so it survives state_dict save/load.
        self.tgt_embed = nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        if cfg.tie_embeddings == "all":
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        self.out_proj = nn.Linear(d, tgt_vocab, bias=cfg.output_bias)
        if cfg.tie_embeddings in ("all", "decoder"):
            self.out_proj.weight = self.tgt_embed.weight
        if start_id is not None and start_id == pad_id:
            # A decoder that starts from the pad id (Marian's) reads the pad row as its start
            # embedding, zero in such models; CTranslate2 starts them from a zero vector. The
            # lookup gives that row no gradient, but a tied output projection would: keep it.
            self.tgt_embed.weight.register_hook(functools.partial(_without_row, row=pad_id))

        if cfg.positions == "sinusoidal":
            # fairseq's table has the pad id's row and those before it unused: t is at pad+1+t
            first = pad_id + 1 if cfg.position_layout == "fairseq" else 0
            table = sinusoidal_positions(cfg.max_positions, d, cfg.position_layout, first)
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
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
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
        return dropout(x, self.cfg.dropout) if self.training else x

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

    def step_weights(self) -> StepWeights:
        """The decoder's weights as decode_step reads them, gathered now: a snapshot, so
        gather again after the weights change (an engine gathers once, when it is made)."""
        final_norm = None if isinstance(self.dec_norm, nn.Identity) else self.dec_norm
        positions = self.pos_table if self.pos_embed is None else self.pos_embed.weight
        return StepWeights.gather(self.tgt_embed, self.embed_scale, positions, self.decoder,
                                  final_norm, self.out_proj)

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, beam: int = 1,
                   weights: StepWeights | None = None) -> DecoderCache:
        """A cache for up to `max_len` decode_step calls on these B sentences, `beam` rows
        (hypotheses) each, stepping with `weights` (None: `step_weights()`, gathered now).

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
            weights=self.step_weights() if weights is None else weights,
        )

    def decode_step(self, prev_tokens: Tensor, cache: DecoderCache) -> Tensor:
        """(B,) the latest token of each row -> fp32 logits (B, V) for the next token.

        prev_tokens is BOS on the first call. Runs position cache.step through the layers
        with the cache's weights (step.py's lean path, equal to `decode` to float rounding;
        inference only: no dropout), appends its K/V to the cache and advances cache.step.
        Logits are fp32 whatever the compute dtype, ready for log_softmax.
        """
        step = cache.step
        if step >= cache.max_len:
            raise ValueError(f"the cache holds {cache.max_len} positions; it is full")
        run = cache.weights.program()  # compiled where the engine compiled it
        logits = run(prev_tokens, cache.self_kv, step, cache.cross_k, cache.cross_v,
                     cache.src_keep)  # (B, V)
        cache.step = step + 1
        return logits


def decoder_layer(model: Transformer, layer: int) -> int:
    """A decoder layer index that may count from the end (-1: the last) as a plain index;
    ValueError when the model has no such layer."""
    count = len(model.decoder)
    if not -count <= layer < count:
        raise ValueError(f"decoder layer {layer}: the model has {count} (0..{count - 1}, "
                         f"or -1..-{count} from the end)")
    return layer % count


class CrossAttentionProbe:
    """The cross-attention weights of chosen decoder layers in the passes made while it is
    active (`with probe:`), computed on request from the inputs each layer got: hooks catch
    them, so the decoder runs its usual code and kernels, and the weights carry gradients
    where the pass does (guided-alignment training) and none under inference_mode."""

    def __init__(self, model: Transformer, layers: Sequence[int]):
        self.modules = [model.decoder[decoder_layer(model, layer)].cross_attn
                        for layer in layers]
        self.inputs: dict[nn.Module, tuple[Tensor, Tensor, Tensor | None]] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> CrossAttentionProbe:
        def catch(module: nn.Module, args: tuple) -> None:
            x, k, _, keep = args  # CrossAttention.forward's (x, k, v, keep)
            self.inputs[module] = (x, k, keep)

        self._handles = [module.register_forward_pre_hook(catch) for module in self.modules]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def weights(self) -> Tensor:
        """(layers, B, H, T, S) the last pass's attention weights of each layer, from the
        queries of its T target positions over the S source positions; rows sum to 1."""
        if not self.modules:
            raise ValueError("the probe watches no layer")
        caught = [self.inputs[module] for module in self.modules]
        self.inputs = {}
        return torch.stack([module.weights(*inputs)
                            for module, inputs in zip(self.modules, caught, strict=True)])


def _without_row(grad: Tensor, row: int) -> Tensor:
    """The gradient with one row zero: that row of the weight never changes."""
    grad = grad.clone()
    grad[row] = 0
    return grad
