"""What every Hugging Face importer shares: the directory's JSON files, the fingerprint
of its weight files, and the tensors of the encoder and decoder layers, whose names
Marian, M2M100 and NLLB have in common (BART's: self_attn, encoder_attn, fc1, fc2 and a
layer norm per sublayer)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from mtkit.config import ModelConfig
from mtkit.data.vocab import SpecialIds, Vocabulary
from mtkit.errors import CheckpointError
from mtkit.files.textio import file_fingerprint
from mtkit.model.transformer import Transformer


def model_config(model_dir: Path) -> dict[str, Any]:
    """config.json of a model directory; CheckpointError when it is not one."""
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: not a directory (a Hugging Face model directory "
                              "holds config.json and the weights)")
    return read_json(model_dir / "config.json", required=True)


def read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path.parent}: no {path.name}; not a Hugging Face model "
                                  "directory")
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not readable JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value


def fingerprint(files: list[Path]) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for path in files:
        digest.update(f"{path.name}\0{file_fingerprint(path)}\0".encode())
    return digest.hexdigest()


def first(tensors: dict[str, torch.Tensor], names: list[str], model_dir: Path,
          shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """The first of `names` the file holds, checked to have `shape`."""
    for name in names:
        if name in tensors:
            return shaped(tensors[name], name, model_dir, shape)
    raise CheckpointError(f"{model_dir}: the weights lack {names[0]}")


def shaped(tensor: torch.Tensor, name: str, model_dir: Path,
           shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    if tuple(tensor.shape) != tuple(shape):
        raise CheckpointError(f"{model_dir}: {name} has shape {tuple(tensor.shape)}; "
                              f"config.json asks for {tuple(shape)}")
    return tensor


def layer_names(side: str, i: int) -> dict[str, list[str]]:
    """One layer's mtkit keys -> the file's names (q, k, v fused into qkv; k, v into kv)."""
    hf, ours = f"model.{side}.layers.{i}", f"{side}.{i}"
    norms = ["self_attn_layer_norm", "final_layer_norm"]
    if side == "decoder":
        norms.insert(1, "encoder_attn_layer_norm")
    out: dict[str, list[str]] = {}
    for suffix in ("weight", "bias"):
        out[f"{ours}.self_attn.qkv.{suffix}"] = [f"{hf}.self_attn.{p}_proj.{suffix}"
                                                 for p in "qkv"]
        out[f"{ours}.self_attn.out.{suffix}"] = [f"{hf}.self_attn.out_proj.{suffix}"]
        if side == "decoder":
            out[f"{ours}.cross_attn.q.{suffix}"] = [f"{hf}.encoder_attn.q_proj.{suffix}"]
            out[f"{ours}.cross_attn.kv.{suffix}"] = [f"{hf}.encoder_attn.{p}_proj.{suffix}"
                                                     for p in "kv"]
            out[f"{ours}.cross_attn.out.{suffix}"] = [f"{hf}.encoder_attn.out_proj.{suffix}"]
        out[f"{ours}.ffn.w_in.{suffix}"] = [f"{hf}.fc1.{suffix}"]
        out[f"{ours}.ffn.w_out.{suffix}"] = [f"{hf}.fc2.{suffix}"]
        for n, norm in enumerate(norms, start=1):
            out[f"{ours}.norm{n}.{suffix}"] = [f"{hf}.{norm}.{suffix}"]
    return out


def layer_state(model: Transformer, tensors: dict[str, torch.Tensor],
                model_dir: Path) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's tensors by mtkit key, checked against the model's
    shapes (fused projections concatenated)."""
    expected = model.state_dict()
    state = {}
    for side, layers in (("encoder", model.encoder), ("decoder", model.decoder)):
        _check_depth(tensors, side, len(layers), model_dir)
        for i in range(len(layers)):
            for key, parts in layer_names(side, i).items():
                rows = expected[key].shape[0] // len(parts)
                shape = (rows, *expected[key].shape[1:])
                state[key] = torch.cat([first(tensors, [p], model_dir, shape) for p in parts])
    return state


def _check_depth(tensors: dict[str, torch.Tensor], side: str, depth: int,
                 model_dir: Path) -> None:
    """Weights of a deeper stack than config.json describes: importing only its first
    layers would give a model that is not the one the file holds (transformers would
    drop the rest with a warning)."""
    prefix = f"model.{side}.layers.{depth}."
    extra = next((name for name in tensors if name.startswith(prefix)), None)
    if extra is not None:
        raise CheckpointError(f"{model_dir}: config.json gives the {side} {depth} layer(s), "
                              f"but the weights hold {prefix}* ({extra}); the config and the "
                              "weights are of different models")


def meta_model(cfg: ModelConfig, vocab: Vocabulary) -> Transformer:
    """The model's structure on the meta device: its keys and shapes, without allocating
    and initialising the weights the file's replace (gigabytes for the larger models)."""
    with torch.device("meta"):
        return Transformer(cfg, len(vocab.src), len(vocab.pieces("tgt")), vocab.specials.pad,
                           vocab.specials.start)


def bundle_weights(model: Transformer, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The bundle's weights: every key of the model from `state` (its shapes checked where
    it was gathered), tied keys sharing one tensor as `state` gives them."""
    return {key: state[key].contiguous() for key in model.state_dict()}


def special_ids(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
              tgt: tuple[str, ...]) -> SpecialIds:
    def setting(key: str) -> Any:
        value = generation.get(key, config.get(key))
        return value[0] if isinstance(value, list) and value else value

    pad, eos = setting("pad_token_id"), setting("eos_token_id")
    start = setting("decoder_start_token_id")
    start = pad if start is None else start
    unk = tgt.index("<unk>") if "<unk>" in tgt else None
    for name, value in (("pad_token_id", pad), ("eos_token_id", eos),
                        ("decoder_start_token_id", start), ("<unk> in the vocabulary", unk)):
        if not isinstance(value, int) or not 0 <= value < len(tgt):
            raise CheckpointError(f"{model_dir}: {name} is missing or outside the target "
                                  f"vocabulary ({value!r})")
    # single-token bad words are never emitted; longer ones are a rule mtkit's search lacks
    bad = generation.get("bad_words_ids") or []
    banned = tuple(sorted({w[0] for w in bad if isinstance(w, list) and len(w) == 1
                           and isinstance(w[0], int) and 0 <= w[0] < len(tgt)}))
    return SpecialIds(pad=pad, unk=unk, start=start, eos=eos, banned=banned)


def config_number(config: dict[str, Any], key: str, kind: type, where: Path,
                  default: float | None = None) -> Any:
    """config.json's number `key` as `kind` (int or float), `default` when absent or null
    (as transformers saves an unset one); CheckpointError naming the key when it is
    missing or not such a number."""
    value = config.get(key)
    value = default if value is None else value
    if value is None:
        raise CheckpointError(f"{where}: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or kind(value) != value:
        raise CheckpointError(f"{where}: {key} {value!r} is not a "
                              f"{'whole ' if kind is int else ''}number")
    return kind(value)


def model_dims(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """The model section's sizes from config.json (encoder and decoder alike)."""
    def same(a: str, b: str) -> int:
        if config.get(a) != config.get(b):
            raise CheckpointError(f"{where}: {a} {config.get(a)} and {b} {config.get(b)} "
                                  "differ; mtkit's encoder and decoder share these")
        return config_number(config, a, int, where)

    return {
        "enc_layers": config_number(config, "encoder_layers", int, where),
        "dec_layers": config_number(config, "decoder_layers", int, where),
        "d_model": config_number(config, "d_model", int, where),
        "heads": same("encoder_attention_heads", "decoder_attention_heads"),
        "ffn_dim": same("encoder_ffn_dim", "decoder_ffn_dim"),
        "dropout": config_number(config, "dropout", float, where, 0.1),
        "attn_dropout": config_number(config, "attention_dropout", float, where, 0.0),
    }


def decode_section(generation: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json's beam and length penalty. Its max_length (the model's
    position count in OPUS-MT) stays the model's cap, model.max_positions: the search also
    caps each sentence at decode.max_len_a x its length + max_len_b, so that a batch
    allocates its decoder cache for the lengths its sentences can reach."""
    section: dict[str, Any] = {}
    if isinstance(generation.get("num_beams"), int) and generation["num_beams"] >= 1:
        section["beam"] = generation["num_beams"]
    if isinstance(generation.get("length_penalty"), (int, float)):
        section["lenpen"] = max(0.0, float(generation["length_penalty"]))
    return section
