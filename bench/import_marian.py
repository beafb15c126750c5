"""Benchmark: `mtkit import` of a Marian model of opus-mt-es-en's published shape.

No checkpoint can be downloaded, so the model is built here with `transformers` (the dev
extra): 6+6 layers, d_model 512, 8 heads, FFN 2048, swish, a shared vocabulary of 65,001
entries (two 8k SentencePiece models trained on the Bible train split, the rest filler
pieces, `<pad>` last), random weights with a random final_logits_bias; cached in
bench/work/marian-opus-mt/. Then, each step in its own child process (a process's
peak RSS is kept across fork and exec, see binarize.py):

- import: wall time and peak memory of reading the directory and writing the bundle;
- check: teacher-forced log-probabilities of dev sentences against transformers' (max
  absolute difference), and the latency of one sentence, greedy and beam 4, mtkit's
  against transformers' generate() (median of --repeat).

    python bench/import_marian.py [--threads N] [--repeat N] [--sentences N] [--shape tiny]
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, WORK, record  # noqa: E402

SHAPES = {  # opus-mt-es-en's published shape; tiny: a check that the script runs
    "opus-mt": {"layers": 6, "d_model": 512, "heads": 8, "ffn": 2048, "vocab": 65001,
                "max_positions": 512},
    "tiny": {"layers": 1, "d_model": 32, "heads": 2, "ffn": 64, "vocab": 20001,
             "max_positions": 512},
}


def build_step(out: Path, shape: dict) -> dict:
    """The Hugging Face directory, as save_pretrained writes it."""
    import sentencepiece as spm
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    pieces = ["</s>", "<unk>"]
    for side, lang in (("source", "es"), ("target", "en")):
        blob = io.BytesIO()
        lines = (BIBLE / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=blob,
                                       vocab_size=8000, minloglevel=2)
        (out / f"{side}.spm").write_bytes(blob.getvalue())
        proc = spm.SentencePieceProcessor(model_proto=blob.getvalue())
        known = set(pieces)
        pieces += [p for p in (proc.id_to_piece(i) for i in range(proc.vocab_size()))
                   if p not in known and not p.startswith("<")]
    pieces += [f"▁filler{i}" for i in range(shape["vocab"] - 1 - len(pieces))] + ["<pad>"]
    (out / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}))
    pad = len(pieces) - 1
    config = MarianConfig(
        vocab_size=len(pieces), d_model=shape["d_model"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"], encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"], encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"], max_position_embeddings=shape["max_positions"],
        activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, share_encoder_decoder_embeddings=True)
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    model.generation_config = GenerationConfig(
        num_beams=4, max_length=512, bad_words_ids=[[pad]], decoder_start_token_id=pad,
        pad_token_id=pad, eos_token_id=0, forced_eos_token_id=0)
    model.save_pretrained(out)
    (out / "built").write_text("ok")
    return {"seconds": time.perf_counter() - start}


def import_step(model_dir: Path, out: Path) -> dict:
    from mtkit.convert.importer import import_model

    start = time.perf_counter()
    import_model(model_dir, out, force=True)
    return {"seconds": time.perf_counter() - start,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "bundle_mb": out.stat().st_size / 1e6}


def check_step(model_dir: Path, bundle_path: Path, threads: int, repeat: int,
               sentences: int) -> dict:
    from transformers import MarianMTModel

    from mtkit.model.checkpoint import load_checkpoint

    bundle = load_checkpoint(bundle_path)
    return compare_with_reference(bundle, bundle.tokenizer(), MarianMTModel, model_dir,
                                  threads, repeat, sentences)


def compare_with_reference(bundle, tok, reference_class, model_dir: Path, threads: int,
                           repeat: int, sentences: int) -> dict:
    """The imported model against transformers' on the first dev verses: the largest
    difference of teacher-forced log-probabilities, and one sentence's latency (beam 1 and
    4, 20 steps) of mtkit's search and of `generate()`. A multilingual tokenizer's target
    language token is forced in both."""
    import torch

    from mtkit.config import DecodeConfig
    from mtkit.decode.engine import TorchEngine

    torch.set_num_threads(threads)
    engine = TorchEngine([bundle.model(tok)], tok, bundle.recipe)
    reference = reference_class.from_pretrained(model_dir).eval()
    s = tok.specials
    src_lines = (BIBLE / "dev.es").read_text(encoding="utf-8").splitlines()[:sentences]
    tgt_lines = (BIBLE / "dev.en").read_text(encoding="utf-8").splitlines()[:sentences]
    worst = 0.0
    for src_ids, tgt_ids in zip(tok.encode_src(src_lines), tok.encode_tgt(tgt_lines)):
        src = torch.tensor([src_ids + [s.eos]])
        tgt = torch.tensor([[s.start, *tgt_ids]])
        with torch.no_grad():
            ours = engine.models[0](src, tgt).log_softmax(-1)
            theirs = reference(input_ids=src, decoder_input_ids=tgt).logits.log_softmax(-1)
        worst = max(worst, float((ours - theirs).abs().max()))
    one = tok.encode_src(src_lines[:1])
    src = torch.tensor([one[0] + [s.eos]])
    lang = list(tok.target_start)  # a multilingual model's target language, else none
    forced = {"forced_bos_token_id": lang[0]} if lang else {}
    cap = 20  # a random model rarely ends early: the same 20 steps for both

    def timed(call) -> float:
        times = []
        for _ in range(repeat + 1):  # the first call warms up
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:]) * 1000

    latency = {"source_tokens": len(one[0]) + 1}
    for beam in (1, 4):
        settings = DecodeConfig(beam=beam, lenpen=1.0, max_len_a=0.0, max_len_b=cap)
        latency[f"mtkit_beam{beam}_ms"] = timed(lambda s=settings: engine.search(
            one, s, prefixes=[lang] if lang else None))
        latency[f"transformers_beam{beam}_ms"] = timed(lambda b=beam: reference.generate(
            input_ids=src, num_beams=b, max_new_tokens=cap + 1, do_sample=False, **forced))
    return {"max_abs_logprob_diff": worst, "sentences": sentences, **latency}


def child(step: str, *args: str, script: str = __file__) -> dict:
    """One step in a child process running `script`; its figures (its last line)."""
    done = subprocess.run([sys.executable, script, "--step", step, *args],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{step} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="opus-mt")
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
    built, model_dir = None, WORK / f"marian-{args.shape}"
    if not (model_dir / "built").is_file():
        built = child("build", str(model_dir), "--shape", args.shape)
    bundle = WORK / f"marian-{args.shape}.pt"
    imported = child("import", str(model_dir), str(bundle))
    checked = child("check", str(model_dir), str(bundle), "--threads", str(args.threads),
                    "--repeat", str(args.repeat), "--sentences", str(args.sentences))
    record("import_marian", {"shape": {"name": args.shape, **SHAPES[args.shape]},
                             "threads": args.threads, "import": imported, "check": checked,
                             "build": built}, __file__)


if __name__ == "__main__":
    main()
