"""`mtkit import` of M2M100 and NLLB directories (M2M100ForConditionalGeneration).

The model is mtkit's pre-norm Transformer with a final layer norm after each stack, ReLU,
embeddings scaled by sqrt(d) (scale_embedding), fairseq's sinusoidal table (computed:
Hugging Face never saves it), one embedding for the source, the target and the output,
no output bias. Dense models only: NLLB's mixture-of-experts models have no mtkit
equivalent.

Two tokenizer formats, one id scheme (fairseq's dictionary: `<s>` 0, `<pad>` 1, `</s>` 2,
`<unk>` 3, the pieces, then a token per language):

* M2M100: `vocab.json` maps pieces to ids; SentencePiece (`sentencepiece.bpe.model`) only
  segments. The language tokens `__es__` follow the vocabulary in the order
  tokenizer_config.json lists them;
* NLLB: no vocab.json: SentencePiece piece j has id j + 1 (fairseq's offset; its own
  `<unk>`, `<s>`, `</s>` give way to the four specials), the codes `spa_Latn` follow the
  pieces, then `<mask>`. With `legacy_behaviour: true` in tokenizer_config.json, sources
  are `pieces </s> [src_lang]` (`SpecialIds.tag_after_eos`), not `[src_lang] pieces </s>`.

Rows past these (M2M100's `madeupword`s) keep their weights and placeholder names.
"""

from __future__ import annotations

import dataclasses
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
    special_ids,
)
from mtkit.convert.weights import read_weights, weight_files
from mtkit.data.vocab import Languages, Vocabulary
from mtkit.errors import CheckpointError, DataError
from mtkit.model.checkpoint import Bundle, Imported
from mtkit.model.transformer import Transformer

SPM = "sentencepiece.bpe.model"
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def read_m2m(model_dir: Path, src_lang: str | None = None,
             tgt_lang: str | None = None) -> Bundle:
    """The bundle an M2M100 or NLLB directory describes, translating src_lang -> tgt_lang
    by default; CheckpointError naming what is wrong."""
    config = model_config(model_dir)
    name = str(config.get("_name_or_path") or model_dir.resolve().name)
    if config.get("model_type") != "m2m_100" or "moe" in name.lower():
        raise CheckpointError(f"{model_dir}: {name} ({config.get('model_type')}) is not a "
                              "dense M2M100/NLLB model; mixture-of-experts models (nllb-moe) "
                              "have no mtkit equivalent")
    generation = read_json(model_dir / "generation_config.json", required=False)
    vocab, blob = read_m2m_vocabulary(model_dir, config, generation, (src_lang, tgt_lang))
    files = weight_files(model_dir)
    tensors = read_weights(files)
    assert vocab.languages is not None
    src, tgt = vocab.languages.default
    raw = {"data": {"train": [], "langs": {"src": src, "tgt": tgt}},
           "tokenizer": {"kind": "vocab", "joint": True, "vocab_size": len(vocab.src)},
           "model": _model_section(model_dir, config), "decode": decode_section(generation)}
    recipe = recipe_from_dict(raw, where=f"{model_dir} (as a recipe)")
    model = meta_model(recipe.model, vocab)
    return Bundle(
        weights=bundle_weights(model, _state(model, tensors, model_dir)),
        recipe=recipe, spm_src=blob, spm_tgt=None, data_fingerprints={},
        vocab=vocab.to_bytes(),
        imported=Imported(str(model_dir.resolve()), "m2m_100", name, fingerprint(files)))


# --------------------------------------------------------------------------- vocabulary


def read_m2m_vocabulary(model_dir: Path, config: dict[str, Any], generation: dict[str, Any],
                        pair: tuple[str | None, str | None]) -> tuple[Vocabulary, bytes]:
    """The vocabulary with its languages (the default pair `pair`, else the tokenizer
    config's src_lang/tgt_lang) and the SentencePiece model's bytes."""
    if not (model_dir / SPM).is_file():
        raise CheckpointError(f"{model_dir}: no {SPM}")
    blob = (model_dir / SPM).read_bytes()
    try:
        proc = spm.SentencePieceProcessor(model_proto=blob)
    except (RuntimeError, OSError):
        raise CheckpointError(f"{model_dir / SPM}: not a SentencePiece model") from None
    tok_config = read_json(model_dir / "tokenizer_config.json", required=False)
    tokens = _language_tokens(model_dir, tok_config)
    nllb = not (model_dir / "vocab.json").is_file()
    if not nllb:  # M2M100: __es__ is es
        pieces = _vocab_json(model_dir / "vocab.json")
        tokens = [t for t in tokens if len(t) > 4 and t.startswith("__") and t.endswith("__")]
        codes, tail = [t[2:-2] for t in tokens], []
    else:
        pieces = [*FAIRSEQ_SPECIALS, *(proc.id_to_piece(j) for j in range(3, proc.vocab_size()))]
        codes, tail = list(tokens), ["<mask>"]
    rows = config_number(config, "vocab_size", int, model_dir / "config.json")
    first_lang = len(pieces)
    pieces += [*tokens, *tail]
    if len(pieces) > rows:
        raise CheckpointError(f"{model_dir}: the tokenizer has {len(pieces)} tokens but "
                              f"config.json gives the model {rows} embedding rows")
    pieces += [f"madeupword{k:04d}" for k in range(rows - len(pieces))]
    specials = special_ids(model_dir, config, generation, tuple(pieces))
    # NllbTokenizer's legacy_behaviour writes sources as `pieces </s> [src_lang]` (and
    # labels likewise, but generation starts `</s> [tgt_lang]`, as without it: mtkit keeps
    # its targets); M2M100Tokenizer has no such setting
    legacy = nllb and tok_config.get("legacy_behaviour") is True
    specials = dataclasses.replace(specials, tag_after_eos=legacy)
    default = (pair[0] or tok_config.get("src_lang"), pair[1] or tok_config.get("tgt_lang"))
    if not all(isinstance(code, str) for code in default):
        raise CheckpointError(f"{model_dir}: a multilingual model: give --src-lang and "
                              "--tgt-lang, the pair it translates by default (its languages: "
                              f"{', '.join(codes[:6])}, ...)")
    languages = Languages(tuple(codes), tuple(range(first_lang, first_lang + len(codes))),
                          (str(default[0]), str(default[1])))
    for code, flag in zip(languages.default, ("--src-lang", "--tgt-lang")):
        try:
            languages.id_of(code, flag)
        except DataError as exc:
            raise CheckpointError(f"{model_dir}: {exc}") from None
    vocab = Vocabulary(tuple(pieces), None, specials, languages)
    try:
        vocab.check_matches(proc, "src", SPM)
    except ValueError as exc:
        raise CheckpointError(f"{model_dir}: {exc}") from None
    return vocab, blob


def _vocab_json(path: Path) -> list[str]:
    mapping = read_json(path, required=True)
    ids = sorted(mapping.values()) if all(isinstance(i, int) for i in mapping.values()) else None
    if ids != list(range(len(mapping))):
        raise CheckpointError(f"{path}: its ids are not 0..{len(mapping) - 1}, each once")
    pieces = [""] * len(mapping)
    for piece, index in mapping.items():
        pieces[index] = piece
    return pieces


def _language_tokens(model_dir: Path, tok_config: dict[str, Any]) -> list[str]:
    """The language tokens in id order, as the tokenizer config (or the special tokens
    map) lists them: additional_special_tokens, or extra_special_tokens in newer files."""
    special_map = read_json(model_dir / "special_tokens_map.json", required=False)
    for source in (tok_config, special_map):
        for key in ("additional_special_tokens", "extra_special_tokens"):
            tokens = source.get(key)
            if isinstance(tokens, list) and tokens:
                return [t if isinstance(t, str) else str(t.get("content")) for t in tokens]
    raise CheckpointError(f"{model_dir}: tokenizer_config.json lists no language tokens "
                          "(additional_special_tokens); mtkit reads the languages from it")


# --------------------------------------------------------------------------- the model


def _model_section(model_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    where = model_dir / "config.json"
    if config.get("activation_function", "relu") != "relu":
        raise CheckpointError(f"{where}: activation_function "
                              f"{config['activation_function']!r}; M2M100 and NLLB use relu")
    if not config.get("tie_word_embeddings", True):
        raise CheckpointError(f"{where}: tie_word_embeddings false: mtkit imports M2M100 and "
                              "NLLB models with one embedding for source, target and output")
    return {**model_dims(config, where), "activation": "relu", "norm": "pre",
            "positions": "sinusoidal", "position_layout": "fairseq",
            "scale_embeddings": bool(config.get("scale_embedding", True)), "output_bias": False,
            "tie_embeddings": "all",
            "max_positions": config_number(config, "max_position_embeddings", int, where, 1024)}


def _state(model: Transformer, tensors: dict[str, torch.Tensor],
           model_dir: Path) -> dict[str, torch.Tensor]:
    """The model's tensors by mtkit key; the shared embedding from whichever copy the file
    holds."""
    expected = model.state_dict()
    names = ["model.shared.weight", "model.encoder.embed_tokens.weight",
             "model.decoder.embed_tokens.weight", "lm_head.weight"]
    embed = first(tensors, names, model_dir, expected["tgt_embed.weight"].shape)
    state = {"src_embed.weight": embed, "tgt_embed.weight": embed, "out_proj.weight": embed}
    for ours, side in (("enc_norm", "encoder"), ("dec_norm", "decoder")):
        for suffix in ("weight", "bias"):
            state[f"{ours}.{suffix}"] = first(tensors, [f"model.{side}.layer_norm.{suffix}"],
                                              model_dir, expected[f"{ours}.{suffix}"].shape)
    state.update(layer_state(model, tensors, model_dir))
    return state
