"""Tiny random Marian (OPUS-MT-shaped) models built with `transformers`, no download: the
reference the importer is tested against. SentencePiece models trained here on the test
corpus, vocab.json written as MarianTokenizer expects it (`</s>` 0, `<unk>` 1, `<pad>`
last), random weights with a non-zero final_logits_bias, save_pretrained.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
from builders import DATA

LANG_TOKENS = (">>fra<<", ">>deu<<")  # target-language tokens, as multilingual models have


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    """A SentencePiece model with spm's own default ids (unk 0, <s> 1, </s> 2), as Marian's."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                   vocab_size=vocab_size, minloglevel=2, num_threads=1)
    return model.getvalue()


def spm_pieces(blob: bytes) -> list[str]:
    proc = spm.SentencePieceProcessor(model_proto=blob)
    return [proc.id_to_piece(i) for i in range(proc.vocab_size())
            if not (proc.is_control(i) or proc.is_unknown(i))]


def marian_vocab(*piece_lists: list[str], tags: tuple[str, ...] = ()) -> dict[str, int]:
    pieces = ["</s>", "<unk>", *tags]
    for piece in (p for lst in piece_lists for p in lst):
        if piece not in pieces:
            pieces.append(piece)
    pieces.append("<pad>")
    return {piece: i for i, piece in enumerate(pieces)}


def build_marian(out: Path, shared: bool = True, seed: int = 0, fp16: bool = False,
                 layers: int = 2, d_model: int = 16, heads: int = 2, ffn: int = 32,
                 spm_size: int = 200) -> Path:
    """Write a random Marian model directory to `out` and return it."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    src_lines = (DATA / "train.es").read_text(encoding="utf-8").splitlines()
    tgt_lines = (DATA / "train.en").read_text(encoding="utf-8").splitlines()
    src_spm, tgt_spm = train_spm(src_lines, spm_size), train_spm(tgt_lines, spm_size)
    (out / "source.spm").write_bytes(src_spm)
    (out / "target.spm").write_bytes(tgt_spm)
    if shared:
        vocab = marian_vocab(spm_pieces(src_spm), spm_pieces(tgt_spm), tags=LANG_TOKENS)
        tgt_vocab = vocab
    else:
        vocab = marian_vocab(spm_pieces(src_spm))
        tgt_vocab = marian_vocab(spm_pieces(tgt_spm))
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab), encoding="utf-8")
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "es", "target_lang": "en", "separate_vocabs": not shared}))
    pad = len(tgt_vocab) - 1
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(tgt_vocab), d_model=d_model,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        max_position_embeddings=256, activation_function="swish", scale_embedding=True,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=shared, dropout=0.1, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    randomize(model, pad)
    model.generation_config = GenerationConfig(
        num_beams=4, max_length=256, bad_words_ids=[[pad]], decoder_start_token_id=pad,
        pad_token_id=pad, eos_token_id=0, forced_eos_token_id=0)
    if fp16:
        model = model.half()
    model.save_pretrained(out)
    return out


@torch.no_grad()
def randomize(model, pad: int, eos: int = 0, eos_lean: float = 0.0,
              skip: tuple[str, ...] = ()) -> None:
    """Weights far from Hugging Face's small init, so that the output distributions are
    peaked (argmax and beam choices not near-ties) and every tensor matters; the pad row
    of the embeddings zero, as in OPUS-MT models (converted ones add it as zeros). </s>
    made likely enough that some outputs end on it: by the logits bias where the model
    has one, else (`eos_lean`) by leaning the decoder's final norm towards its embedding.
    Parameters whose names hold one of `skip` are left as they are."""
    for name, param in model.named_parameters():
        if any(part in name for part in skip):
            continue
        if "layer_norm" in name:
            param.copy_(1.0 + 0.2 * torch.randn_like(param) if name.endswith("weight")
                        else 0.2 * torch.randn_like(param))
        else:
            param.normal_(0.0, 0.4)
    if hasattr(model, "final_logits_bias"):
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, eos] = 4.0
    for embedding in (model.get_input_embeddings(), model.get_decoder().embed_tokens):
        if embedding.weight.size(0) > pad:
            embedding.weight[pad] = 0.0
    if eos_lean:
        row = model.get_output_embeddings().weight[eos]
        model.get_decoder().layer_norm.bias.add_(eos_lean * row / row.norm())
    model.eval()


def load_reference(model_dir: Path):
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(model_dir).float().eval()


# --------------------------------------------------------------------------- damaged copies


def broken_copy(directory: Path, tmp_path: Path, edit) -> Path:
    """A copy of a model directory under tmp_path, changed by `edit(copy)`."""
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(directory, copy)
    edit(copy)
    return copy


def edit_json(name: str, change):
    """An edit for `broken_copy`: the JSON file `name`'s value changed in place."""
    def edit(copy: Path) -> None:
        path = copy / name
        value = json.loads(path.read_text())
        change(value)
        path.write_text(json.dumps(value))
    return edit


def expect_refused_import(directory: Path, tmp_path: Path, edit, message: str) -> None:
    """`import_model` of the edited copy: a one-line CheckpointError matching `message`,
    and nothing written."""
    import pytest

    from mtkit.convert.importer import import_model
    from mtkit.errors import CheckpointError

    broken = broken_copy(directory, tmp_path, edit)
    out = tmp_path / "out" / "model.pt"
    with pytest.raises(CheckpointError, match=message) as info:
        import_model(broken, out)
    assert "\n" not in str(info.value)
    assert not out.exists()
