"""Benchmark: `mtkit import` of an NLLB model of nllb-200-distilled-600M's published shape.

No checkpoint can be downloaded, so the model is built here with `transformers` (the dev
extra): 12+12 layers, d_model 1024, 16 heads, FFN 4096, ReLU, pre-norm, a vocabulary of
256,206 rows (an 8k SentencePiece model trained on the Bible train split, NLLB's 202
language codes after its pieces, `<mask>`, the rest made-up rows), random weights; about
2.5 GB of safetensors, cached in --work (default /tmp/mtkit-bench-nllb; the build takes
minutes). Then, each step in its own child process (a process's peak RSS is kept across
fork and exec, see binarize.py):

- import: wall time and peak memory of reading the directory and writing the bundle;
- check: teacher-forced log-probabilities of dev sentences against transformers' (max
  absolute difference), and the latency of one sentence (spa_Latn -> eng_Latn), greedy
  and beam 4, mtkit's against transformers' generate() (median of --repeat).

    python bench/import_m2m.py [--threads N] [--repeat N] [--shape tiny] [--work DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, record  # noqa: E402
from import_marian import child, compare_with_reference, import_step  # noqa: E402

SHAPES = {  # nllb-200-distilled-600M's published shape; tiny: a check that the script runs
    "nllb-600m": {"layers": 12, "d_model": 1024, "heads": 16, "ffn": 4096, "vocab": 256206},
    "tiny": {"layers": 1, "d_model": 32, "heads": 2, "ffn": 64, "vocab": 20000},
}
PAIR = ("spa_Latn", "eng_Latn")


def build_step(out: Path, shape: dict) -> dict:
    """The Hugging Face directory, as save_pretrained writes it, and NLLB's tokenizer files."""
    import sentencepiece as spm
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    blob = io.BytesIO()
    lines = [line for lang in ("es", "en")
             for line in (BIBLE / f"train.{lang}").read_text(encoding="utf-8").splitlines()]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=blob,
                                   vocab_size=8000, model_type="bpe", minloglevel=2)
    (out / "sentencepiece.bpe.model").write_bytes(blob.getvalue())
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "NllbTokenizer", "src_lang": PAIR[0], "tgt_lang": PAIR[1],
        "additional_special_tokens": list(FAIRSEQ_LANGUAGE_CODES)}))
    config = M2M100Config(
        vocab_size=shape["vocab"], d_model=shape["d_model"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"], encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"], encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"], max_position_embeddings=1024, scale_embedding=True,
        activation_function="relu", pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        num_beams=4, max_length=200, decoder_start_token_id=2, pad_token_id=1, eos_token_id=2)
    model.save_pretrained(out)
    (out / "built").write_text("ok")
    return {"seconds": time.perf_counter() - start,
            "safetensors_mb": (out / "model.safetensors").stat().st_size / 1e6}


def check_step(model_dir: Path, bundle_path: Path, threads: int, repeat: int,
               sentences: int) -> dict:
    from transformers import M2M100ForConditionalGeneration

    from mtkit.model.checkpoint import load_checkpoint

    bundle = load_checkpoint(bundle_path)
    return compare_with_reference(bundle, bundle.tokenizer().with_langs(*PAIR),
                                  M2M100ForConditionalGeneration, model_dir, threads, repeat,
                                  sentences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=4)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="nllb-600m")
    parser.add_argument("--work", type=Path, default=Path("/tmp/mtkit-bench-nllb"))
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:  # inside a child: one step, its figures as the last line
        steps = {"build": lambda: build_step(Path(args.rest[0]), SHAPES[args.shape]),
                 "import": lambda: import_step(Path(args.rest[0]), Path(args.rest[1])),
                 "check": lambda: check_step(Path(args.rest[0]), Path(args.rest[1]),
                                             args.threads, args.repeat, args.sentences)}
        print(json.dumps(steps[args.step]()))
        return
    built, model_dir = None, args.work / args.shape
    if not (model_dir / "built").is_file():
        built = child("build", str(model_dir), "--shape", args.shape, script=__file__)
    bundle = args.work / f"{args.shape}.pt"
    imported = child("import", str(model_dir), str(bundle), script=__file__)
    checked = child("check", str(model_dir), str(bundle), "--threads", str(args.threads),
                    "--repeat", str(args.repeat), "--sentences", str(args.sentences),
                    script=__file__)
    record("import_m2m", {"shape": {"name": args.shape, **SHAPES[args.shape]},
                          "threads": args.threads, "import": imported, "check": checked,
                          "build": built}, __file__)


if __name__ == "__main__":
    main()
