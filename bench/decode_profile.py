"""Benchmark: where a decoding step's time goes, one sentence at a time or in bulk.

Decodes the first --lines test sentences one at a time (or, with --batch-tokens N, all
together in N-token batches, as `mtkit translate` does a file) and splits the wall time
three ways:
- encoder: `model.encode` (once per sentence),
- model step: the decoder step and log_softmax (`_Ensemble.log_probs`),
- search bookkeeping: everything else in the search loop (top-k, finished/alive masks,
  cache reordering, the stop check), plus tokenisation and detokenisation.
A second pass under torch.profiler (the first --profile-lines lines) sums the self time of
every aten operator: what is left of the wall time is Python and dispatcher overhead,
spent between kernels.

    python bench/decode_profile.py --model runs/bible-es-en/model.pt [--beam 5] [--stop early] \
        [--quantize int8]
    python bench/decode_profile.py --model runs/bible-es-en/model.pt --batch-tokens 4096 \
        --lines 991 --profile-lines 400 --stop early

(--stop: the recipe's rule unless given; the Bible recipe's is exact.)
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, decoding_parser, record  # noqa: E402

from mtkit.decode import search
from mtkit.decode.engine import TorchEngine  # noqa: E402
from mtkit.decode.translate import Translator  # noqa: E402
from mtkit.files.textio import read_lines  # noqa: E402


class Stopwatch:
    """Sums the wall time spent in owner.name while installed (`with Stopwatch(...)`)."""

    def __init__(self, owner: object, name: str):
        self.owner, self.name = owner, name
        self.seconds, self.calls = 0.0, 0

    def __enter__(self) -> Stopwatch:
        original = self.original = getattr(self.owner, self.name)
        # an attribute of the instance itself (a method bound once, as InferenceModel's)
        self.own = not isinstance(self.owner, type) and self.name in vars(self.owner)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        setattr(self.owner, self.name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.owner, type) or self.own:
            setattr(self.owner, self.name, self.original)
        else:  # an instance attribute shadowed the class's method: remove it
            delattr(self.owner, self.name)


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lines", type=int, default=50)
    parser.add_argument("--stop", choices=search.STOP_RULES, default=None)
    parser.add_argument("--profile-lines", type=int, default=20,
                        help="Lines of the profiled pass (it holds every event in memory: "
                        "60 lines of beam 5 took 13 GB).")
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="Translate the lines together in batches of this many source "
                        "tokens (0: one at a time).")
    parser.add_argument("--quantize", choices=("none", "int8"), default="none")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    engine = TorchEngine.load([args.model], device, quantize=args.quantize)
    lines = list(read_lines(BIBLE / "test.es"))[: args.lines]
    settings = dataclasses.replace(engine.recipe.decode, beam=args.beam, nbest=1,
                                   stop=args.stop or engine.recipe.decode.stop)
    translator = Translator(engine, settings, max_tokens=args.batch_tokens or 4096)
    translator.translate(lines[:2])  # warm-up: first-call allocations

    def translate_all(some: list[str]) -> None:
        if args.batch_tokens:
            translator.translate(some)
        else:
            for line in some:
                translator.translate([line])

    # what the search calls: the engine's InferenceModel, which bound encode when made
    with Stopwatch(engine.searched[0], "encode") as encoder, \
            Stopwatch(search._Ensemble, "log_probs") as step:
        tokens_before = translator.stats.tokens
        start = time.perf_counter()
        translate_all(lines)
        wall = time.perf_counter() - start
    tokens = translator.stats.tokens - tokens_before

    profiled = lines[: args.profile_lines]
    with Stopwatch(search._Ensemble, "log_probs") as profiled_steps, \
            profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled_start = time.perf_counter()
        translate_all(profiled)
        profiled_wall = time.perf_counter() - profiled_start
    events = prof.key_averages()
    # Self time of top-level aten ops (children are inside their parents' totals).
    kernel_us = sum(e.self_cpu_time_total for e in events if e.key.startswith("aten::"))
    op_calls = sum(e.count for e in events if e.key.startswith("aten::"))
    top = sorted((e for e in events if e.key.startswith("aten::")),
                 key=lambda e: -e.self_cpu_time_total)[:10]

    search_s = wall - encoder.seconds - step.seconds
    record("decode_profile", {
        "search": "greedy" if args.beam == 1 else f"beam {args.beam}, stop {settings.stop}",
        "lines": len(lines),
        "ms_per_sentence": round(1000 * wall / len(lines), 1),
        "steps_per_sentence": round(step.calls / len(lines), 1),
        "output_tokens_per_sentence": round(tokens / len(lines), 1),
        "ms_per_step": round(1000 * (wall - encoder.seconds) / step.calls, 2),
        "share_encoder": round(encoder.seconds / wall, 3),
        "share_model_step": round(step.seconds / wall, 3),
        "share_search_bookkeeping": round(search_s / wall, 3),
        "aten_ops_per_step": round(op_calls / profiled_steps.calls, 1),
        "profiled_lines": len(profiled),
        "share_in_aten_kernels": round(kernel_us / 1e6 / profiled_wall, 3),
        "top_ops_ms": {e.key: round(e.self_cpu_time_total / 1000, 1) for e in top},
        "model": str(args.model), "threads": args.threads, "quantize": args.quantize,
        "batch_tokens": args.batch_tokens or None,
    }, "bench/decode_profile.py")


if __name__ == "__main__":
    main()
