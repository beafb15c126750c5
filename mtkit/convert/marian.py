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

Everything is read and checked before anything is written; the bundle is written
atomically, so a failure leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from mtkit.config import recipe_from_dict
from mtkit.convert.weights import read_weights, weight_files
from mtkit.data.vocab import SpecialIds, Vocabulary
from mtkit.errors import CheckpointError, ConfigError
from mtkit.files.textio import file_fingerprint
from mtkit.model.checkpoint import Bundle, Imported, save_checkpoint
from mtkit.model.transformer import Transformer

SUPPORTED = ("marian",)  # config.json's model_type values this importer reads
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}  # Hugging Face -> mtkit


def import_model(model_dir: Path, out_path: Path, force: bool = False) -> Bundle:
    """Read the directory, check it whole, then write the bundle to out_path."""
    if out_path.exists() and not force:
        raise ConfigError(f"{out_path}: already exists; use --force to replace it")
    bundle = read_marian(Path(model_dir))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out_path, bundle)
    return bundle


def read_marian(model_dir: Path) -> Bundle:
    """The bundle a Marian directory describes; CheckpointError naming what is wrong."""
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: not a directory (a Hugging Face model directory "
                              "holds config.json and the weights)")
    config = _read_json(model_dir / "config.json", required=True)
    kind = config.get("model_type")
    if kind not in SUPPORTED:
        raise CheckpointError(f"{model_dir / 'config.json'}: model_type {kind!r} is not "
                              f"supported; mtkit imports {', '.join(SUPPORTED)} (OPUS-MT)")
    generation = _read_json(model_dir / "generation_config.json", required=False)
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    vocab, src_spm, tgt_spm = read_vocabulary(model_dir, config, generation, shared)
    files = weight_files(model_dir)
    tensors = read_weights(files)
    recipe = recipe_from_dict(_recipe(model_dir, config, generation, vocab, shared),
                              where=f"{model_dir} (as a recipe)")
    model = Transformer(recipe.model, len(vocab.src), len(vocab.pieces("tgt")),
                        vocab.specials.pad, vocab.specials.start)
    load_marian_weights(model, tensors, config, model_dir)
    return Bundle(
        weights={k: v.detach() for k, v in model.state_dict().items()},
        recipe=recipe, spm_src=src_spm, spm_tgt=None if tgt_spm == src_spm else tgt_spm,
        data_fingerprints={}, vocab=vocab.to_bytes(),
        imported=Imported(str(model_dir.resolve()), "marian",
                          str(config.get("_name_or_path") or model_dir.resolve().name),
                          _fingerprint(files)))


def _read_json(path: Path, required: bool) -> dict[str, Any]:
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


def _fingerprint(files: list[Path]) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for path in files:
        digest.update(f"{path.name}\0{file_fingerprint(path)}\0".encode())
    return digest.hexdigest()


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
    src = _pieces(model_dir / "vocab.json", int(config.get("vocab_size", 0)))
    tgt = None
    if not shared:
        tgt = _pieces(model_dir / "target_vocab.json",
                      int(config.get("decoder_vocab_size") or config.get("vocab_size", 0)))
    vocab = Vocabulary(src, tgt, _specials(model_dir, config, generation, tgt or src))
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
    mapping = _read_json(path, required=True)
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


def _specials(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
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


# --------------------------------------------------------------------------- the recipe


def _recipe(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
            vocab: Vocabulary, shared: bool) -> dict[str, Any]:
    """The bundle's recipe as raw values, checked by recipe_from_dict like any recipe."""
    langs = _read_json(model_dir / "tokenizer_config.json", required=False)
    raw: dict[str, Any] = {
        "data": {"train": []},  # trained elsewhere
        "tokenizer": {"kind": "vocab", "joint": shared, "vocab_size": len(vocab.src)},
        "model": _model_section(model_dir, config),
        "decode": _decode_section(generation),
    }
    if langs.get("source_lang") and langs.get("target_lang"):
        raw["data"]["langs"] = {"src": str(langs["source_lang"]),
                                "tgt": str(langs["target_lang"])}
    return raw


def _model_section(model_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    where = model_dir / "config.json"

    def same(a: str, b: str) -> Any:
        if config.get(a) != config.get(b):
            raise CheckpointError(f"{where}: {a} {config.get(a)} and {b} {config.get(b)} "
                                  "differ; mtkit's encoder and decoder share these")
        return config[a]

    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{where}: activation_function {activation!r} is not supported; "
                              f"mtkit reads {', '.join(ACTIVATIONS)}")
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    if shared and not tied:
        raise CheckpointError(f"{where}: shared embeddings with an untied output projection "
                              "(tie_word_embeddings false) have no mtkit equivalent")
    try:
        return {
            "enc_layers": int(config["encoder_layers"]),
            "dec_layers": int(config["decoder_layers"]),
            "d_model": int(config["d_model"]),
            "heads": int(same("encoder_attention_heads", "decoder_attention_heads")),
            "ffn_dim": int(same("encoder_ffn_dim", "decoder_ffn_dim")),
            "dropout": float(config.get("dropout", 0.1)),
            "attn_dropout": float(config.get("attention_dropout", 0.0)),
            "activation": ACTIVATIONS[activation], "norm": "post", "positions": "sinusoidal",
            "position_layout": "halves", "scale_embeddings": bool(config.get("scale_embedding")),
            "output_bias": True,
            "tie_embeddings": "all" if shared else ("decoder" if tied else "none"),
            "max_positions": int(config.get("max_position_embeddings", 512)),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: {exc} is missing or not a number") from None


def _decode_section(generation: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json's beam and length penalty. Its max_length (512 in OPUS-MT,
    the model's position count) stays the model's cap, model.max_positions: the search
    also caps each sentence at decode.max_len_a x its length + max_len_b, so that a batch
    allocates its decoder cache for the lengths its sentences can reach, not for 512."""
    section: dict[str, Any] = {}
    if isinstance(generation.get("num_beams"), int) and generation["num_beams"] >= 1:
        section["beam"] = generation["num_beams"]
    if isinstance(generation.get("length_penalty"), (int, float)):
        section["lenpen"] = max(0.0, float(generation["length_penalty"]))
    return section


# --------------------------------------------------------------------------- weights


def load_marian_weights(model: Transformer, tensors: dict[str, torch.Tensor],
                        config: dict[str, Any], model_dir: Path) -> None:
    """Fill the model from Marian's tensors; CheckpointError naming a missing tensor or a
    wrong shape. Tied tensors: whichever copy the file holds."""
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
    state = {key: _first(tensors, names, model_dir, expected[key].shape)
             for key, names in sources.items()}
    bias = tensors.get("final_logits_bias", torch.zeros(expected["out_proj.bias"].shape))
    state["out_proj.bias"] = _shaped(bias.reshape(-1), "final_logits_bias", model_dir,
                                     expected["out_proj.bias"].shape)
    for side, layers in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i in range(len(layers)):
            for key, parts in _layer_names(side, i).items():
                rows = expected[key].shape[0] // len(parts)
                shape = (rows, *expected[key].shape[1:])
                state[key] = torch.cat([_first(tensors, [p], model_dir, shape) for p in parts])
        _check_positions(tensors, side, model, model_dir)
    with torch.no_grad():
        for key, param in expected.items():
            param.copy_(state[key])


def _first(tensors: dict[str, torch.Tensor], names: list[str], model_dir: Path,
           shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    for name in names:
        if name in tensors:
            return _shaped(tensors[name], name, model_dir, shape)
    raise CheckpointError(f"{model_dir}: the weights lack {names[0]}")


def _shaped(tensor: torch.Tensor, name: str, model_dir: Path,
            shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    if tuple(tensor.shape) != tuple(shape):
        raise CheckpointError(f"{model_dir}: {name} has shape {tuple(tensor.shape)}; "
                              f"config.json asks for {tuple(shape)}")
    return tensor


def _layer_names(side: str, i: int) -> dict[str, list[str]]:
    """One layer's mtkit keys -> Marian's names (q, k, v fused into qkv; k, v into kv)."""
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


def _check_positions(tensors: dict[str, torch.Tensor], side: str, model: Transformer,
                     model_dir: Path) -> None:
    """An older file may store the position table: it must be the one mtkit computes."""
    name = f"model.{side}.embed_positions.weight"
    stored = tensors.get(name)
    if stored is None:
        return
    table = model.pos_table[: stored.size(0)]
    if stored.shape != table.shape or not torch.allclose(stored, table, atol=1e-4):
        raise CheckpointError(f"{model_dir}: {name} is not Marian's sinusoidal table")
