"""Benchmark: mtkit's decoder (fp32 and int8) against CTranslate2 on the same weights.

Beam 5 (or --beam), CPU, the same threads and 4096-token batches, Bible test set (991
lines), tokenisation and detokenisation included. Prints, per engine, sentences/second
(the median over --repeat interleaved rounds), test BLEU and, for mtkit, the decoder
rows summed over search steps; and the ratio of mtkit fp32's speed to CTranslate2
float32's, overall and per round. mtkit stops
each sentence's search by --stop (early, the default, or exact); CTranslate2 by its own
rule, once `beam` hypotheses have finished.

    python bench/engines.py --model runs/bible-es-en/model.pt [--stop exact] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, decoding_parser, record  # noqa: E402

from mtkit import ct2, search  # noqa: E402
from mtkit.engine import TorchEngine  # noqa: E402
from mtkit.metrics import corpus_scores  # noqa: E402
from mtkit.textio import read_lines  # noqa: E402
from mtkit.translate import Translator  # noqa: E402

ENGINES = ("mtkit_fp32", "mtkit_int8", "ct2_float32", "ct2_int8")


def measure(args: argparse.Namespace) -> dict:
    """Translate the test set with one engine (--measure) and return its figures."""
    torch.set_num_threads(args.threads)
    lines = list(read_lines(BIBLE / "test.es"))
    refs = list(read_lines(BIBLE / "test.en"))
    family, kind = args.measure.split("_")
    row_steps = [0]  # mtkit: decoder rows summed over steps, a work count free of noise
    if family == "ct2":
        engine = ct2.CTranslate2Engine(args.export_dir / kind, "cpu", args.threads)
    else:
        quantize = "int8" if kind == "int8" else "none"
        engine = TorchEngine.load([args.model], "cpu", quantize=quantize)
        log_probs = search._Ensemble.log_probs

        def counted(self, seqs, t):
            row_steps[0] += seqs.size(0)
            return log_probs(self, seqs, t)

        search._Ensemble.log_probs = counted
    settings = dataclasses.replace(engine.recipe.decode, beam=args.beam, stop=args.stop, nbest=1)
    translator = Translator(engine, settings, max_tokens=4096)
    start = time.perf_counter()
    hyps = translator.translate(lines)
    seconds = time.perf_counter() - start
    bleu = corpus_scores(hyps, [refs], ("bleu",), tgt_lang="en")[0].score
    return {"sentences_per_s": round(len(lines) / seconds, 2), "seconds": round(seconds, 2),
            "bleu": round(bleu, 2), "lines": len(lines), "decoder_row_steps": row_steps[0]}


def measure_apart(args: argparse.Namespace, engine: str, export_dir: Path) -> dict:
    """`measure` in a fresh process: CTranslate2's OpenMP runtime, once it has run, slows
    torch's threads in the same process (26 -> 16 sentences/s measured), so engines must
    not share one."""
    command = [sys.executable, __file__, "--measure", engine, "--export-dir", str(export_dir),
               "--model", str(args.model), "--threads", str(args.threads),
               "--beam", str(args.beam), "--stop", args.stop]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--stop", choices=("early", "exact"), default="early")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Rounds of all four engines; figures are the per-engine medians.")
    parser.add_argument("--measure", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--export-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    with tempfile.TemporaryDirectory(prefix="mtkit-ct2-") as tmp:
        for quantization in ("float32", "int8"):
            ct2.export(args.model, Path(tmp) / quantization, quantization)
        # Rounds interleave the engines, so a slow spell of a shared machine hits them alike.
        rounds = [{name: measure_apart(args, name, Path(tmp)) for name in ENGINES}
                  for _ in range(args.repeat)]

    def median_speed(name: str) -> float:
        return statistics.median(r[name]["sentences_per_s"] for r in rounds)

    results = {name: {"sentences_per_s": median_speed(name), "bleu": rounds[-1][name]["bleu"],
                      "decoder_row_steps": rounds[-1][name]["decoder_row_steps"] or None}
               for name in ENGINES}
    fp32, int8 = results["mtkit_fp32"], results["mtkit_int8"]
    record("engines", {
        "beam": args.beam, "stop": args.stop, "lines": rounds[0]["mtkit_fp32"]["lines"],
        "threads": args.threads, "max_tokens": 4096, "repeat": args.repeat,
        "results": results,
        "mtkit_vs_ct2_float32_speed": round(
            fp32["sentences_per_s"] / results["ct2_float32"]["sentences_per_s"], 2),
        "ratio_per_round": [round(r["mtkit_fp32"]["sentences_per_s"]
                                  / r["ct2_float32"]["sentences_per_s"], 2) for r in rounds],
        "int8_speedup": round(int8["sentences_per_s"] / fp32["sentences_per_s"], 2),
        "int8_bleu_change": round(int8["bleu"] - fp32["bleu"], 2),
        "model": str(args.model),
    }, "bench/engines.py")


if __name__ == "__main__":
    main()
