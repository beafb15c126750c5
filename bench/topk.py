"""Benchmark: the search's per-beam top-k over a vocabulary, torch's own against mtkit's
`top_k` (block maxima, mtkit/decode/topk.py), by vocabulary size.

For each size, the log-probabilities of one sentence's beam (1 x --beam x V) and of a
batch (--batch sentences), the 2 x beam best tokens of each row, as beam search asks; the
two must agree before they are timed.

    python bench/topk.py [--threads 1] [--sizes 4000 8000 32000 58101 256206]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record  # noqa: E402

from mtkit.decode.topk import top_k  # noqa: E402


def microseconds(call, budget_s: float = 0.5) -> float:
    """The best of 3 timings of enough calls to take about `budget_s`."""
    call()
    once = timeit.timeit(call, number=1)
    number = max(1, int(budget_s / 3 / max(once, 1e-7)))
    return round(min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 8000, 32000, 58101, 256206])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    k = 2 * args.beam
    by_size = {}
    for size in args.sizes:
        row = {}
        for sentences in (1, args.batch):
            x = torch.randn(sentences, args.beam, size).log_softmax(-1)
            if not torch.equal(top_k(x, k)[0], x.topk(k).values):
                raise SystemExit(f"top_k disagrees with torch's top-k at V={size}")
            row[f"{sentences}_sentences"] = {"torch_us": microseconds(lambda x=x: x.topk(k)),
                                             "blocks_us": microseconds(lambda x=x: top_k(x, k))}
        by_size[str(size)] = row
        print(size, row, file=sys.stderr)
    record("topk", {"beam": args.beam, "k": k, "batch": args.batch, "threads": args.threads,
                    "by_vocabulary": by_size}, "bench/topk.py")


if __name__ == "__main__":
    main()
