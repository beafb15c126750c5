"""Benchmark: translation speed on the Bible test set (991 lines).

Greedy and beam 5, batched by 4096 source tokens, CPU threads as given: sentences/second
and target tokens/second, end to end (tokenisation, search, detokenisation); the speed-up
of cached over uncached decoding on the first --uncached-lines lines; and the median
latency of single sentences (batch of 1) for the interactive case.

    python bench/decode.py --model runs/bible-es-en/model.pt [--threads 2]
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, decoding_parser, record  # noqa: E402

from mtkit.decode.engine import TorchEngine  # noqa: E402
from mtkit.decode.translate import Translator  # noqa: E402
from mtkit.files.textio import read_lines  # noqa: E402


def timed(translator: Translator, lines: list[str]) -> float:
    start = time.perf_counter()
    translator.translate(lines)
    return time.perf_counter() - start


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.add_argument("--uncached-lines", type=int, default=100)
    parser.add_argument("--latency-lines", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    engine = TorchEngine.load([args.model], device)
    uncached_engine = TorchEngine(engine.models, engine.tokenizer, engine.recipe, device,
                                  use_cache=False)
    recipe = engine.recipe
    lines = list(read_lines(BIBLE / "test.es"))
    shape = {k: getattr(recipe.model, k) for k in ("enc_layers", "dec_layers", "d_model",
                                                    "heads", "ffn_dim")}

    for beam in (1, 5):
        settings = dataclasses.replace(recipe.decode, beam=beam, nbest=1)
        translator = Translator(engine, settings, max_tokens=4096)
        seconds = timed(translator, lines)
        tokens = translator.stats.tokens
        subset = lines[: args.uncached_lines]
        cached = timed(Translator(engine, settings, max_tokens=4096), subset)
        uncached = timed(Translator(uncached_engine, settings, max_tokens=4096), subset)
        single = Translator(engine, settings, max_tokens=4096)
        latencies = []
        for line in lines[: args.latency_lines]:
            start = time.perf_counter()
            single.translate([line])
            latencies.append(1000 * (time.perf_counter() - start))
        record("decode", {
            "search": "greedy" if beam == 1 else f"beam {beam}",
            "sentences_per_s": round(len(lines) / seconds, 1),
            "target_tokens_per_s": round(tokens / seconds),
            "seconds": round(seconds, 2), "lines": len(lines), "target_tokens": tokens,
            "cache_speedup": round(uncached / cached, 2),
            "cache_speedup_lines": len(subset),
            "latency_median_ms": round(statistics.median(latencies), 1),
            "latency_lines": len(latencies),
            "model": str(args.model), "shape": shape, "threads": args.threads,
            "max_tokens": 4096,
        }, "bench/decode.py")


if __name__ == "__main__":
    main()
