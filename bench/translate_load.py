"""Benchmark: `mtkit translate` over many input lines keeps its memory flat.

Generates N lines (Bible test verses cut to mixed lengths, every 13th line empty), pipes
them through `mtkit translate` in a child process, checks that exactly N lines come back,
and records the child's peak RSS and its speed, for each N.

    python bench/translate_load.py --model runs/demo/model.pt [--lines 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, record  # noqa: E402

MTKIT = Path(sys.executable).with_name("mtkit")


def write_input(path: Path, n: int) -> None:
    rng = random.Random(0)
    verses = (BIBLE / "test.es").read_text(encoding="utf-8").splitlines()
    with open(path, "w", encoding="utf-8") as out:
        for i in range(n):
            if i % 13 == 0:
                out.write("\n")
                continue
            words = rng.choice(verses).split()
            out.write(" ".join(words[: rng.randint(1, len(words))]) + "\n")


def run(model: Path, n: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="mtkit-load-") as tmp:
        source, output = Path(tmp) / "in.es", Path(tmp) / "out.en"
        write_input(source, n)
        start = time.perf_counter()
        with open(source, "rb") as stdin, open(output, "wb") as stdout:
            child = subprocess.Popen([str(MTKIT), "translate", "-m", str(model), "--quiet",
                                      *extra], stdin=stdin, stdout=stdout)
            _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        lines_out = output.read_bytes().count(b"\n")
    if status != 0:
        raise SystemExit(f"mtkit translate failed with status {status}")
    return {"lines": n, "lines_out": lines_out, "line_count_ok": lines_out == n,
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(seconds, 1),
            "lines_per_s": round(n / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("runs/demo/model.pt"))
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--max-len-a", type=float, default=0.5,
                        help="short outputs keep the run short; memory is what is measured")
    parser.add_argument("--max-len-b", type=int, default=3)
    args = parser.parse_args()
    extra = ["--beam", str(args.beam), "--max-len-a", str(args.max_len_a),
             "--max-len-b", str(args.max_len_b)]
    for n in args.lines:
        record("translate_load", {**run(args.model, n, extra), "model": str(args.model),
                                  "beam": args.beam, "max_len_a": args.max_len_a,
                                  "max_len_b": args.max_len_b}, "bench/translate_load.py")


if __name__ == "__main__":
    main()
