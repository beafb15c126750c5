"""Benchmark: how fast `binarize` encodes a corpus, and how much memory it needs.

Trains a joint 8k unigram tokenizer on the Bible train split, then times binarize of
train+dev+test. Prints one JSON line and appends it to bench/work/results.jsonl.

    python bench/binarize.py [--data DIR] [--workers N] [--vocab-size N]

Each step runs in its own child process: Linux keeps a process's peak RSS across fork and
exec, so measuring in a process that had trained the tokenizer would report the trainer's
peak instead of binarize's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE as DEFAULT_DATA  # noqa: E402
from common import record  # noqa: E402

SPLITS = ("train", "dev", "test")


def train_step(data: Path, prefix: Path, vocab_size: int) -> dict:
    from mtkit.data.tokenizer import train_sentencepiece

    inputs = [data / "train.es", data / "train.en"]
    start = time.perf_counter()
    model = train_sentencepiece(inputs, prefix, vocab_size=vocab_size)
    return {"model": str(model), "seconds": time.perf_counter() - start}


def measure_step(model: Path, data: Path, out: Path, workers: int) -> dict:
    from mtkit.data.binarize import binarize
    from mtkit.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_files(model)
    splits = {s: (data / f"{s}.es", data / f"{s}.en") for s in SPLITS}
    before_mb = _current_rss_mb()  # the interpreter with numpy, torch and sentencepiece
    start = time.perf_counter()
    manifest = binarize(tokenizer, splits, out, workers=workers)
    seconds = time.perf_counter() - start
    # ru_maxrss is in KiB on Linux; for children it is the largest single (worker) child
    return {
        "lines": sum(split.lines for split in manifest.splits.values()),
        "seconds": seconds,
        "before_mb": before_mb,
        "main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def _current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_step(*args: str) -> dict:
    """Run this script as a child for one step; its last stdout line is the JSON result."""
    done = subprocess.run(
        [sys.executable, __file__, *args], check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="dir with {split}.es/.en")
    parser.add_argument("--workers", type=int, default=0, help="0 = one per usable core")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--step", nargs="+", help=argparse.SUPPRESS)  # internal: child steps
    args = parser.parse_args()

    if args.step:
        name, *paths = args.step
        if name == "train":
            result = train_step(args.data, Path(paths[0]), args.vocab_size)
        else:
            result = measure_step(Path(paths[0]), args.data, Path(paths[1]), args.workers)
        print(json.dumps(result))
        return

    workers = args.workers or len(os.sched_getaffinity(0))  # what binarize's 0 means
    common = ["--data", str(args.data), "--vocab-size", str(args.vocab_size)]
    with tempfile.TemporaryDirectory(prefix="mtkit-bench-") as tmp:
        trained = run_step(*common, "--step", "train", str(Path(tmp) / "spm"))
        measure = ["--workers", str(workers), "--step", "measure", trained["model"]]
        result = run_step(*common, *measure, str(Path(tmp) / "bin"))

    record("binarize", {
        "lines_per_second": round(result["lines"] / result["seconds"], 1),
        # main process + every worker at the largest worker's peak: an upper bound, since
        # forked workers share pages with the main process
        "peak_rss_mb": round(result["main_mb"] + workers * result["worker_mb"], 1),
        "peak_rss_main_mb": round(result["main_mb"], 1),
        "rss_before_binarize_mb": round(result["before_mb"], 1),
        "peak_rss_worker_mb": round(result["worker_mb"], 1),
        "seconds": round(result["seconds"], 3),
        "lines": result["lines"],
        "workers": workers,
        "vocab_size": args.vocab_size,
        "tokenizer_train_seconds": round(trained["seconds"], 2),
        "data": str(args.data),
    }, "bench/binarize.py")


if __name__ == "__main__":
    main()
