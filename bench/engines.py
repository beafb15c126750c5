"""Benchmark: mtkit's decoder (fp32 and int8) against CTranslate2 on the same weights.

Every engine at every thread count of --thread-counts (1 and 2), and each one's best:

- throughput: the Bible test set (991 lines) in 4096-token batches, beam --beam,
  sentences/second, and its test BLEU;
- latency: the median time to translate one sentence, the first --latency-lines lines one
  at a time, beam --beam and greedy.

Tokenisation and detokenisation included; CPU; the CTranslate2 engines are exports of the
same model (`mtkit export --quantization float32`, and int8; export's default is int8).
Each measurement runs in a fresh process (CTranslate2's OpenMP runtime, once it has run,
slows torch's threads in the same process), and the rounds interleave the engines and
thread counts, so a slow spell of a shared machine hits them alike. Prints one JSON line
(appended to bench/work/results.jsonl) and a Markdown table: per engine its best figure and
the threads it came at, and the ratios mtkit / CTranslate2 (fp32 against float32, int8
against int8; for latency, lower is better, for throughput higher). mtkit stops each
sentence's search by --stop (early, the default, exact, or top); CTranslate2 by its own
rule, once its top-ranked candidate has ended (mtkit's `top`, in effect).

    python bench/engines.py --model runs/bible-es-en/model.pt [--repeat 3] [--stop exact]
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
from common import BIBLE, record  # noqa: E402

from mtkit.decode import ct2, search
from mtkit.decode.engine import TorchEngine  # noqa: E402
from mtkit.decode.translate import Translator  # noqa: E402
from mtkit.evaluate.metrics import corpus_scores  # noqa: E402
from mtkit.files.textio import read_lines  # noqa: E402

ENGINES = ("mtkit_fp32", "mtkit_int8", "ct2_float32", "ct2_int8")
KINDS = ("latency_beam", "latency_greedy", "throughput")
PAIRS = (("mtkit_fp32", "ct2_float32"), ("mtkit_int8", "ct2_int8"))


def load(args: argparse.Namespace):
    family, kind = args.engine.split("_")
    if family == "ct2":
        # threads > 0: that many intra-op threads, one worker (ct2.choose_threads)
        return ct2.CTranslate2Engine(args.export_dir / kind, "cpu", args.threads)
    torch.set_num_threads(args.threads)
    return TorchEngine.load([args.model], "cpu", quantize="int8" if kind == "int8" else "none")


def measure(args: argparse.Namespace) -> dict:
    """One engine, one thread count, one kind of measurement (--measure)."""
    engine = load(args)
    lines = list(read_lines(BIBLE / "test.es"))
    beam = 1 if args.measure == "latency_greedy" else args.beam
    settings = dataclasses.replace(engine.recipe.decode, beam=beam, stop=args.stop, nbest=1)
    translator = Translator(engine, settings, max_tokens=4096)
    if args.measure != "throughput":
        translator.translate(lines[:3])  # warm-up: first-call allocations
        times = []
        for line in lines[: args.latency_lines]:
            start = time.perf_counter()
            translator.translate([line])
            times.append(1000 * (time.perf_counter() - start))
        return {"median_ms": round(statistics.median(times), 1)}

    row_steps = [0]  # mtkit: decoder rows summed over steps, a work count free of noise
    if isinstance(engine, TorchEngine):
        log_probs = search._Ensemble.log_probs

        def counted(self, seqs, t):
            row_steps[0] += seqs.size(0)
            return log_probs(self, seqs, t)

        search._Ensemble.log_probs = counted
    start = time.perf_counter()
    hyps = translator.translate(lines)
    seconds = time.perf_counter() - start
    refs = list(read_lines(BIBLE / "test.en"))
    bleu = corpus_scores(hyps, [refs], ("bleu",), tgt_lang="en")[0].score
    return {"sentences_per_s": round(len(lines) / seconds, 2), "bleu": round(bleu, 2),
            "lines": len(lines), "decoder_row_steps": row_steps[0] or None}


def measure_apart(args: argparse.Namespace, kind: str, engine: str, threads: int,
                  export_dir: Path) -> dict:
    """`measure` in a fresh process."""
    command = [sys.executable, __file__, "--measure", kind, "--engine", engine,
               "--threads", str(threads), "--export-dir", str(export_dir),
               "--model", str(args.model), "--beam", str(args.beam), "--stop", args.stop,
               "--latency-lines", str(args.latency_lines)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def summarise(rounds: list[dict], kinds: list[str], engines: list[str],
              thread_counts: list[int]) -> dict:
    """Per kind and engine: the median over rounds at each thread count, and the best."""
    out: dict = {}
    for kind in kinds:
        key, better = ("median_ms", min) if kind != "throughput" else ("sentences_per_s", max)
        out[kind] = {}
        for engine in engines:
            by_threads = {t: statistics.median(r[kind][engine][t][key] for r in rounds)
                          for t in thread_counts}
            best = better(by_threads, key=by_threads.get)
            entry = {key: by_threads[best], "threads": best, "by_threads": by_threads}
            if kind == "throughput":
                last = rounds[-1][kind][engine][best]
                entry["bleu"], entry["decoder_row_steps"] = last["bleu"], last["decoder_row_steps"]
            out[kind][engine] = entry
        out[kind]["ratios"] = {f"{ours}/{theirs}": round(
            out[kind][ours][key] / out[kind][theirs][key], 2)
            for ours, theirs in PAIRS if ours in engines and theirs in engines}
    return out


def markdown(summary: dict, beam: int, kinds: list[str], engines: list[str]) -> str:
    names = {"latency_beam": f"latency, beam {beam} (median)",
             "latency_greedy": "latency, greedy (median)",
             "throughput": f"throughput, beam {beam} (991 lines)"}
    rows = ["| engine | " + " | ".join(names[k] for k in kinds) + " |",
            "|---" * (len(kinds) + 1) + "|"]

    def cell(kind: str, engine: str) -> str:
        e = summary[kind][engine]
        if kind == "throughput":
            return f"{e['sentences_per_s']:.1f} sent/s ({e['threads']}t), BLEU {e['bleu']:.2f}"
        return f"{e['median_ms']:.1f} ms ({e['threads']}t)"

    for engine in engines:
        rows.append(f"| {engine} | " + " | ".join(cell(k, engine) for k in kinds) + " |")
    for ours, theirs in PAIRS:
        if ours in engines and theirs in engines:
            ratio = " | ".join(f"**{summary[k]['ratios'][f'{ours}/{theirs}']:.2f}**"
                               for k in kinds)
            rows.append(f"| {ours} / {theirs} | {ratio} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("runs/bible-es-en/model.pt"))
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--stop", choices=search.STOP_RULES, default="early")
    parser.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--latency-lines", type=int, default=60)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--repeat", type=int, default=1,
                        help="Rounds of every measurement; figures are per-setting medians.")
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--export-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    with tempfile.TemporaryDirectory(prefix="mtkit-ct2-") as tmp:
        for quantization in ("float32", "int8"):
            ct2.export(args.model, Path(tmp) / quantization, quantization)
        rounds = []
        for _ in range(args.repeat):
            # engines innermost: one engine's measurements never run back to back
            found: dict = {kind: {engine: {} for engine in args.engines} for kind in args.kinds}
            for kind in args.kinds:
                for threads in args.thread_counts:
                    for engine in args.engines:
                        found[kind][engine][threads] = measure_apart(args, kind, engine,
                                                                     threads, Path(tmp))
            rounds.append(found)
    summary = summarise(rounds, args.kinds, args.engines, args.thread_counts)
    extra = {}
    bulk = summary.get("throughput", {})
    if "mtkit_fp32" in bulk and "mtkit_int8" in bulk:
        fp32, int8 = bulk["mtkit_fp32"], bulk["mtkit_int8"]
        extra = {"int8_speedup": round(int8["sentences_per_s"] / fp32["sentences_per_s"], 2),
                 "int8_bleu_change": round(int8["bleu"] - fp32["bleu"], 2)}
    record("engines", {
        "beam": args.beam, "stop": args.stop, "max_tokens": 4096, "repeat": args.repeat,
        "thread_counts": args.thread_counts, "latency_lines": args.latency_lines,
        "results": summary, **extra, "rounds": rounds, "model": str(args.model),
    }, "bench/engines.py")
    print(markdown(summary, args.beam, args.kinds, args.engines))


if __name__ == "__main__":
    main()
