"""`mtkit import`: a Hugging Face Marian directory (OPUS-MT) as an mtkit bundle.

The directory holds config.json, generation_config.json, the weights (weights.py),
source.spm and target.spm, and vocab.json (or, with share_encoder_decoder_embeddings
false, vocab.json for the source and target_vocab.json for the target). The model is
mtkit's Transformer with Marian's options: post-norm, swish, embeddings scaled by sqrt(d)
(scale_embedding), sinusoids from position 0 in Marian's layout (sines, then cosines;
computed, since save_pretrained drops the table, and checked against one an older file
stores), final_logits_bias as the output bias (zeros when absent). Tied tensors come from
the config (tie_word_embeddings, share_encoder_decoder_embeddings), not from which keys
the file holds: safetensors files drop the tied copies. The special ids stay the model's
(`</s>` 0, `<unk>`, `<pad>` last; the decoder starts from pad and never emits it nor
bad_words_ids), carried in the bundle's vocabulary (data/vocab.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from mtkit.config import recipe_from_dict
from mtkit.convert.hf import (
    bundle_weights,
    config_number,
    decode_section,
    fingerprint,
    first,
    layer_state,
    meta_model,
    model_config,
    model_dims,
    read_json,
    shaped,
    special_ids,
)
from mtkit.convert.weights import read_weights, weight_files
from mtkit.data.vocab import Vocabulary
from mtkit.errors import CheckpointError
from mtkit.model.checkpoint import Bundle, Imported
from mtkit.model.layers import sinusoidal_positions
from mtkit.model.transformer import Transformer

ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}  # Hugging Face -> mtkit


def read_marian(model_dir: Path) -> Bundle:
    """The bundle a Marian directory describes; CheckpointError naming what is wrong."""
    config = model_config(model_dir)
    if config.get("model_type") != "marian":
        raise CheckpointError(f"{model_dir / 'config.json'}: not a Marian model")
    generation = read_json(model_dir / "generation_config.json", required=False)
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    vocab, src_spm, tgt_spm = read_vocabulary(model_dir, config, generation, shared)
    files = weight_files(model_dir)
    tensors = read_weights(files)
    recipe = recipe_from_dict(_recipe(model_dir, config, generation, vocab, shared),
                              where=f"{model_dir} (as a recipe)")
    model = meta_model(recipe.model, vocab)
    return Bundle(
        weights=bundle_weights(model, marian_state(model, tensors, config, model_dir)),
        recipe=recipe, spm_src=src_spm, spm_tgt=None if tgt_spm == src_spm else tgt_spm,
        data_fingerprints={}, vocab=vocab.to_bytes(),
        imported=Imported(str(model_dir.resolve()), "marian",
                          str(config.get("_name_or_path") or model_dir.resolve().name),
                          fingerprint(files)))


# --------------------------------------------------------------------------- vocabulary


def read_vocabulary(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
                    shared: bool) -> tuple[Vocabulary, bytes, bytes]:
    """The vocabulary (checked against the SentencePiece models and the config) and the
    source and target SentencePiece models' bytes."""
    spms = []
    for name in ("source.spm", "target.spm"):
        path = model_dir / name
        if not path.is_file():
            raise CheckpointError(f"{model_dir}: no {name}")
        spms.append(path.read_bytes())
    where = model_dir / "config.json"
    src_rows = config_number(config, "vocab_size", int, where)
    src = _pieces(model_dir / "vocab.json", src_rows)
    tgt = None
    if not shared:
        tgt_rows = config_number(config, "decoder_vocab_size", int, where, src_rows)
        tgt = _pieces(model_dir / "target_vocab.json", tgt_rows)
    vocab = Vocabulary(src, tgt, special_ids(model_dir, config, generation, tgt or src))
    pad = vocab.specials.pad
    if tgt is not None and (pad >= len(src) or src[pad] != tgt[pad]):
        # mtkit pads and masks sources with the model's one pad id
        raise CheckpointError(f"{model_dir}: vocab.json and target_vocab.json have their "
                              "<pad> at different ids; mtkit needs one pad id for both sides")
    for blob, side, name in ((spms[0], "src", "source.spm"), (spms[1], "tgt", "target.spm")):
        try:
            proc = spm.SentencePieceProcessor(model_proto=blob)
        except (RuntimeError, OSError):
            raise CheckpointError(f"{model_dir / name}: not a SentencePiece model") from None
        try:
            vocab.check_matches(proc, side, name)
        except ValueError as exc:
            raise CheckpointError(f"{model_dir}: {exc}") from None
    return vocab, spms[0], spms[1]


def _pieces(path: Path, rows: int) -> tuple[str, ...]:
    """Pieces by id from a piece -> id map whose ids are 0..n-1, n the embedding's rows."""
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: no {path.name}")
    mapping = read_json(path, required=True)
    ids = sorted(mapping.values()) if all(isinstance(i, int) for i in mapping.values()) else None
    if ids != list(range(len(mapping))):
        raise CheckpointError(f"{path}: its ids are not 0..{len(mapping) - 1}, each once")
    if len(mapping) != rows:
        raise CheckpointError(f"{path}: {len(mapping)} pieces, but config.json gives the "
                              f"model {rows} embedding rows")
    pieces = [""] * len(mapping)
    for piece, index in mapping.items():
        pieces[index] = piece
    return tuple(pieces)


# --------------------------------------------------------------------------- the recipe


def _recipe(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
            vocab: Vocabulary, shared: bool) -> dict[str, Any]:
    """The bundle's recipe as raw values, checked by recipe_from_dict like any recipe."""
    langs = read_json(model_dir / "tokenizer_config.json", required=False)
    raw: dict[str, Any] = {
        "data": {"train": []},  # trained elsewhere
        "tokenizer": {"kind": "vocab", "joint": shared, "vocab_size": len(vocab.src)},
        "model": _model_section(model_dir, config),
        "decode": decode_section(generation),
    }
    if langs.get("source_lang") and langs.get("target_lang"):
        raw["data"]["langs"] = {"src": str(langs["source_lang"]),
                                "tgt": str(langs["target_lang"])}
    return raw


def _model_section(model_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    where = model_dir / "config.json"
    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{where}: activation_function {activation!r} is not supported; "
                              f"mtkit reads {', '.join(ACTIVATIONS)}")
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    if shared and not tied:
        raise CheckpointError(f"{where}: shared embeddings with an untied output projection "
                              "(tie_word_embeddings false) have no mtkit equivalent")
    return {
        **model_dims(config, where),
        "activation": ACTIVATIONS[activation], "norm": "post", "positions": "sinusoidal",
        "position_layout": "halves", "scale_embeddings": bool(config.get("scale_embedding")),
        "output_bias": True, "tie_embeddings": "all" if shared else ("decoder" if tied else "none"),
        "max_positions": config_number(config, "max_position_embeddings", int, where, 512),
    }


# --------------------------------------------------------------------------- weights


def marian_state(model: Transformer, tensors: dict[str, torch.Tensor],
                 config: dict[str, Any], model_dir: Path) -> dict[str, torch.Tensor]:
    """The model's tensors by mtkit key from Marian's; CheckpointError naming a missing
    tensor or a wrong shape. Tied tensors: whichever copy the file holds."""
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    enc = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
    dec = ["model.shared.weight", "model.decoder.embed_tokens.weight"]
    if shared:
        enc = dec = enc + dec[1:]
    head = ["lm_head.weight"]
    sources = {  # mtkit key -> Marian names, the first one present taken
        "src_embed.weight": enc + (head if shared and tied else []),
        "tgt_embed.weight": dec + (head if tied else []),
        "out_proj.weight": dec + head if tied else head,
    }
    expected = model.state_dict()
    state = {key: first(tensors, names, model_dir, expected[key].shape)
             for key, names in sources.items()}
    bias = tensors.get("final_logits_bias", torch.zeros(expected["out_proj.bias"].shape))
    state["out_proj.bias"] = shaped(bias.reshape(-1), "final_logits_bias", model_dir,
                                     expected["out_proj.bias"].shape)
    state.update(layer_state(model, tensors, model_dir))
    for side in ("encoder", "decoder"):
        _check_positions(tensors, side, model, model_dir)
    return state


def _check_positions(tensors: dict[str, torch.Tensor], side: str, model: Transformer,
                     model_dir: Path) -> None:
    """An older file may store the position table: it must be the one mtkit computes."""
    name = f"model.{side}.embed_positions.weight"
    stored = tensors.get(name)
    if stored is None:
        return
    cfg = model.cfg
    table = sinusoidal_positions(min(stored.size(0), cfg.max_positions), cfg.d_model,
                                 cfg.position_layout)
    if stored.shape != table.shape or not torch.allclose(stored, table, atol=1e-4):
        raise CheckpointError(f"{model_dir}: {name} is not Marian's sinusoidal table")
