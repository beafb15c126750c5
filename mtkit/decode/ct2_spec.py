"""The CTranslate2 model specification of an mtkit model: its structure, every weight,
the vocabularies and the alignment layer, validated (ct2.export quantises and saves it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mtkit.config import Recipe, replace_checked
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError
from mtkit.model.transformer import Transformer


def model_spec(ctranslate2, model: Transformer, tokenizer: Tokenizer, recipe: Recipe):
    """(the validated spec, the decoder layer its alignments read)."""
    spec = _spec(ctranslate2, model, recipe)
    # mtkit's encoder reads source + </s>: CTranslate2 appends it, but puts nothing after
    # it, so a model that reads its language token there gets whole sources from the engine
    # (`ct2.CTranslate2Engine._source_tokens`)
    spec.config.add_source_eos = not tokenizer.specials.tag_after_eos
    layer = _alignment_layer(spec, recipe)
    src_pieces, tgt_pieces = _start_from_pad(spec, tokenizer)
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.validate()
    return spec, layer


def _spec(ctranslate2, model: Transformer, recipe: Recipe):
    cfg = recipe.model
    specs = ctranslate2.specs
    swiglu = cfg.activation == "swiglu"
    spec = specs.TransformerSpec.from_config(
        (cfg.enc_layers, cfg.dec_layers),
        cfg.heads,
        pre_norm=cfg.norm == "pre",
        activation=specs.Activation.RELU if cfg.activation == "relu" else specs.Activation.SWISH,
        ffn_glu=swiglu,
    )
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = cfg.scale_embeddings
    spec.config.layer_norm_epsilon = model.decoder[0].norm1.eps
    positions = _positions(model)  # (max_positions, D)

    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.position_encodings.encodings = positions
    for layer_spec, layer in zip(enc.layer, model.encoder):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm2)
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.position_encodings.encodings = positions
    _linear(dec.projection, model.out_proj)  # its bias: an imported model's logits bias
    for layer_spec, layer in zip(dec.layer, model.decoder):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.norm2)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm3)
    if cfg.norm == "pre":
        _norm(enc.layer_norm, model.enc_norm)
        _norm(dec.layer_norm, model.dec_norm)
    return spec


def with_alignment_layer(recipe: Recipe, layer: int | None) -> Recipe:
    if layer is None:
        return recipe
    flag = {"alignment_layer": "--alignment-layer"}
    decode = replace_checked(recipe.decode, {"alignment_layer": layer}, flag)
    depth = recipe.model.dec_layers
    if decode.alignment_index(depth) is None:
        raise ConfigError(decode.alignment_layer_error(depth).replace(
            "decode.alignment_layer", flag["alignment_layer"]))
    return dataclasses.replace(recipe, decode=decode)


def _alignment_layer(spec, recipe: Recipe) -> int:
    """Set the decoder layer whose attention CTranslate2 returns (`return_attention`) to
    the recipe's decode.alignment_layer, every head averaged, as mtkit's engine aligns;
    returns its index. CTranslate2 fixes both when it loads the model."""
    layer = recipe.decode.alignment_index(recipe.model.dec_layers)
    assert layer is not None  # the recipe's check holds it to the decoder
    spec.decoder.alignment_layer = np.int16(layer)
    spec.decoder.alignment_heads = np.int16(recipe.model.heads)
    return layer


def _start_from_pad(spec, tokenizer: Tokenizer) -> tuple[list[str], list[str]]:
    """The vocabularies to register. A decoder that starts from the pad id (an imported
    Marian model, whose pad row is zero) starts from a zero embedding in CTranslate2, and
    the pad entry, the last, is removed with its rows, as CTranslate2's own Marian
    converter does: the search can then never emit it."""
    src, tgt = tokenizer.pieces("src"), tokenizer.pieces("tgt")
    s = tokenizer.specials
    if s.start != s.pad:  # an imported M2M100/NLLB model starts from </s>
        spec.config.decoder_start_token = tgt[s.start]
        spec.config.eos_token, spec.config.unk_token = tgt[s.eos], tgt[s.unk]
        return src, tgt
    spec.decoder.start_from_zero_embedding = True
    spec.config.decoder_start_token = spec.config.eos_token = tgt[s.eos]
    spec.config.unk_token = tgt[s.unk]
    tables = [spec.encoder.embeddings[0], spec.decoder.embeddings, spec.decoder.projection]
    for side, pieces in (("src", src), ("tgt", tgt)):
        if s.pad != len(pieces) - 1:
            continue
        for table in tables[:1] if side == "src" else tables[1:]:
            table.weight = table.weight[:-1]
            if getattr(table, "bias", None) is not None and not isinstance(table.bias, str):
                table.bias = table.bias[:-1]
        pieces.pop()
    return src, tgt


def _positions(model: Transformer) -> np.ndarray:
    if model.pos_embed is not None:
        return _np(model.pos_embed.weight)
    return _np(model.pos_table)


def _ffn(spec, ffn, norm) -> None:
    _norm(spec.layer_norm, norm)
    if ffn.swiglu:  # w_in holds [gate; up]: CTranslate2 wants them apart
        gate, up = ffn.w_in.weight.chunk(2, dim=0)
        spec.linear_0.weight = _np(gate)
        spec.linear_0_noact.weight = _np(up)
    else:
        _linear(spec.linear_0, ffn.w_in)
    _linear(spec.linear_1, ffn.w_out)


def _linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _np(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()
