"""Tiny random M2M100 and NLLB models built with `transformers`, no download: the reference
the importer is tested against. The tokenizer files are written here as the two families'
tokenizers read them: a SentencePiece model trained on the test corpus
(`sentencepiece.bpe.model`, spm's default ids `<unk>` 0, `<s>` 1, `</s>` 2), and

* M2M100: vocab.json in fairseq's order (`<s>` `<pad>` `</s>` `<unk>`, then the pieces),
  the language tokens `__en__` listed in tokenizer_config.json (WMT21's eight, so that
  M2M100Tokenizer(language_codes="wmt21") agrees), three made-up rows after them;
* NLLB: no vocab.json (piece j is id j + 1), the codes `eng_Latn` listed in
  tokenizer_config.json, `<mask>` last; `legacy`: with `legacy_behaviour: true` (sources
  `pieces </s> [src_lang]`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from builders import DATA
from hf_marian import randomize, spm_pieces, train_spm

WMT21 = ("en", "ha", "is", "ja", "cs", "ru", "zh", "de")  # M2M100Tokenizer's "wmt21" codes
NLLB_CODES = ("eng_Latn", "fra_Latn", "spa_Latn", "deu_Latn")
MADE_UP = 3  # M2M100's rows after the language tokens (fairseq's madeupword0000...)
EOS_LEAN = {"m2m100": 4.5, "nllb": 6.5}  # found by trying: some outputs end early, not all


def build_m2m(out: Path, kind: str = "m2m100", seed: int = 0, layers: int = 2,
              d_model: int = 16, heads: int = 2, ffn: int = 32, spm_size: int = 300,
              eos_lean: float | None = None, legacy: bool = False) -> Path:
    """Write a random M2M100 (`kind` m2m100) or NLLB (nllb; `legacy`: its tokenizer
    config's legacy_behaviour true) directory to `out`."""
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    lines = [line for name in ("train.es", "train.en")
             for line in (DATA / name).read_text(encoding="utf-8").splitlines()]
    blob = train_spm(lines, spm_size)
    (out / "sentencepiece.bpe.model").write_bytes(blob)
    if kind == "m2m100":
        pieces = ["<s>", "<pad>", "</s>", "<unk>", *spm_pieces(blob)]
        (out / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}))
        tokens = [f"__{code}__" for code in WMT21]
        rows = len(pieces) + len(tokens) + MADE_UP
        config = {"src_lang": "de", "tgt_lang": "en", "language_codes": "wmt21",
                  "tokenizer_class": "M2M100Tokenizer"}
    else:
        tokens = list(NLLB_CODES)
        rows = spm_size + 1 + len(tokens) + 1  # the pieces, the codes, <mask>
        config = {"src_lang": "spa_Latn", "tgt_lang": "eng_Latn", "legacy_behaviour": legacy,
                  "tokenizer_class": "NllbTokenizer"}
    config["additional_special_tokens"] = tokens
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    model_config = M2M100Config(
        vocab_size=rows, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn, max_position_embeddings=256, activation_function="relu",
        scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(model_config)
    eos_lean = EOS_LEAN[kind] if eos_lean is None else eos_lean
    with torch.no_grad():
        # tied embeddings carried along a pre-norm residual make each token its own likeliest
        # successor: smaller embeddings let the layers decide
        model.get_input_embeddings().weight.normal_(0.0, 0.1)
    randomize(model, pad=1, eos=2, eos_lean=eos_lean, skip=("shared", "embed_tokens", "lm_head"))
    with torch.no_grad():  # nor a cross-attention output the same at every step
        for name, param in model.named_parameters():
            if "encoder_attn.out_proj" in name or ("proj.bias" in name or "fc" in name
                                                   and name.endswith("bias")):
                param.mul_(0.2)
    model.generation_config = GenerationConfig(
        num_beams=4, max_length=200, decoder_start_token_id=2, pad_token_id=1, eos_token_id=2,
        bos_token_id=0)
    model.save_pretrained(out)
    return out


def load_reference(model_dir: Path):
    from transformers import M2M100ForConditionalGeneration

    return M2M100ForConditionalGeneration.from_pretrained(model_dir).float().eval()
