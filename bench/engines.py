"""Benchmark: mtkit's decoder (fp32 and int8) against CTranslate2 on the same weights.

Beam 5 (or --beam), CPU, the same threads and 4096-token batches, Bible test set (991
lines), tokenisation and detokenisation included. Prints, per engine, sentences/second
and test BLEU, and the ratio of mtkit fp32's speed to CTranslate2 float32's. mtkit stops
each sentence's search by --stop (early, the default, or exact); CTranslate2 by its own
rule, once `beam` hypotheses have finished.

    python bench/engines.py --model runs/bible-es-en/model.pt [--threads 2] [--stop exact]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, record  # noqa: E402

from mtkit import ct2  # noqa: E402
from mtkit.data import read_lines  # noqa: E402
from mtkit.metrics import corpus_scores  # noqa: E402
from mtkit.translate import DecodeOptions, Translator, load_models, quantize_int8  # noqa: E402


def measure(engine, tokenizer, options, lines, refs) -> dict:
    translator = Translator(engine, tokenizer, options)
    start = time.perf_counter()
    hyps = translator.format(translator.translate(lines), 0)
    seconds = time.perf_counter() - start
    bleu = corpus_scores(hyps, [refs], ("bleu",), tgt_lang="en")[0].score
    return {"sentences_per_s": round(len(lines) / seconds, 2), "seconds": round(seconds, 2),
            "bleu": round(bleu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("runs/bible-es-en/model.pt"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--stop", choices=("early", "exact"), default="early")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = list(read_lines(BIBLE / "test.es"))
    refs = list(read_lines(BIBLE / "test.en"))
    models, tokenizer, recipe = load_models([args.model], torch.device("cpu"))
    options = DecodeOptions(beam=args.beam, lenpen=recipe.decode.lenpen, stop=args.stop,
                            max_tokens=4096, max_len_a=recipe.decode.max_len_a,
                            max_len_b=recipe.decode.max_len_b)
    results = {
        "mtkit_fp32": measure(models, tokenizer, options, lines, refs),
        "mtkit_int8": measure([quantize_int8(m) for m in models], tokenizer, options, lines,
                              refs),
    }
    with tempfile.TemporaryDirectory(prefix="mtkit-ct2-") as tmp:
        for quantization in ("float32", "int8"):
            out = Path(tmp) / quantization
            ct2.export(args.model, out, quantization)
            engine = ct2.CTranslate2Engine(out, "cpu", args.threads)
            results[f"ct2_{quantization}"] = measure(engine, engine.tokenizer, options, lines,
                                                     refs)
    fp32, int8 = results["mtkit_fp32"], results["mtkit_int8"]
    record("engines", {
        "beam": args.beam, "stop": args.stop, "lines": len(lines), "threads": args.threads,
        "max_tokens": 4096,
        "results": results,
        "mtkit_vs_ct2_float32_speed": round(
            fp32["sentences_per_s"] / results["ct2_float32"]["sentences_per_s"], 2),
        "int8_speedup": round(int8["sentences_per_s"] / fp32["sentences_per_s"], 2),
        "int8_bleu_change": round(int8["bleu"] - fp32["bleu"], 2),
        "model": str(args.model),
    }, "bench/engines.py")


if __name__ == "__main__":
    main()
