"""Benchmark: training speed (target tokens/second) and model-FLOPs utilisation.

The reference shape (d_model 256, 3+3 layers, 4 heads, FFN 1024, joint 8k vocabulary,
tied embeddings, pre-norm, 4096-token batches) on the Bible training data, timed over
whole updates: batch building, forward, loss, backward, clipping and the Adam step.

MFU = achieved model FLOP/s / peak FLOP/s of a large matmul measured in the same run.
Model FLOPs count the matmuls of forward + backward (3x forward) on real (non-pad) tokens.

    python bench/train.py [--threads 2] [--steps 30] [--precision fp32 bf16] [--compile]
                          [--device cuda] [--shape large] [--max-tokens 4096] [--profile N]

With --compile the step runs through torch.compile (train.compile: true); compilation
happens in the --warmup updates, which are not timed. `--shape large` (d_model 512,
6+6 layers, 8 heads, FFN 2048) is the shape bench/gpu_check.sh trains on a GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bible_run, record  # noqa: E402

from mtkit.config import recipe_from_dict  # noqa: E402
from mtkit.train.meter import TrainMeter  # noqa: E402
from mtkit.train.trainer import Trainer  # noqa: E402

SHAPE = {"enc_layers": 3, "dec_layers": 3, "d_model": 256, "heads": 4, "ffn_dim": 1024,
         "dropout": 0.2, "norm": "pre", "tie_embeddings": "all"}
SHAPES = {"reference": SHAPE,
          "large": {**SHAPE, "enc_layers": 6, "dec_layers": 6, "d_model": 512, "heads": 8,
                    "ffn_dim": 2048, "dropout": 0.1}}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 10, device: str = "cpu") -> float:
    """FLOP/s of an n x n x n matmul, the best of `reps`."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    a @ b
    best = float("inf")
    for _ in range(reps):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def forward_flops(d: int, ffn: int, vocab: int, enc: int, dec: int,
                  src_lens: torch.Tensor, tgt_lens: torch.Tensor) -> float:
    """Matmul FLOPs of one forward pass over a batch (2 FLOPs per multiply-add)."""
    macs = 0.0
    for s, t in zip(src_lens.tolist(), tgt_lens.tolist()):
        macs += enc * s * (4 * d * d + 2 * d * ffn + 2 * s * d)  # QKV+out, FFN, scores+mix
        macs += dec * t * (4 * d * d + 2 * d * d + 2 * d * ffn + 2 * t * d + 2 * s * d)
        macs += dec * s * 2 * d * d  # cross-attention keys/values
        macs += t * d * vocab  # output projection
    return 2 * macs


def run(precision: str, compile: bool, steps: int, warmup: int, data: Path,
        tokenizer, shape: dict, max_tokens: int, device: str, profile: int = 0) -> dict:
    raw = {"data": {"train": {"src": "x", "tgt": "y"}, "valid": None},
           "model": shape,
           "train": {"max_tokens": max_tokens, "lr": 0.001, "warmup_steps": 400,
                     "valid_every": 10**9, "precision": precision, "compile": compile}}
    recipe = recipe_from_dict(raw, name="bench")
    trainer = Trainer(recipe, Path("/tmp/mtkit-bench-train"), tokenizer, data, {}, device)
    meter = TrainMeter()
    tokens = flops = 0.0
    start = None
    losses = []  # the mean loss of each quarter of the timed updates: falling, or not
    for step in range(warmup + steps):
        if step == warmup:
            synchronize(device)
            start, tokens, flops = time.perf_counter(), 0.0, 0.0
            meter = TrainMeter()  # the timed updates' sums alone
        group = trainer.batches.next_group(trainer.progress)
        data = trainer.batches.training.epoch(trainer.batches.epoch)
        for _, indices in group:
            src_lens, tgt_lens = (torch.from_numpy(n) + 1 for n in data.lengths(indices))
            tokens += float(tgt_lens.sum())
            flops += 3 * forward_flops(shape["d_model"], shape["ffn_dim"],
                                       tokenizer.tgt_vocab_size, shape["enc_layers"],
                                       shape["dec_layers"], src_lens, tgt_lens)
        trainer._update(group, meter)
        if step >= warmup and (step - warmup + 1) % max(1, steps // 4) == 0:
            losses.append(round(meter.means(elapsed=0.0)["loss"], 3))
            meter = TrainMeter()
    synchronize(device)
    seconds = time.perf_counter() - start
    ops = profile_updates(trainer, meter, profile) if profile else None
    return {"profile": ops, "tokens_per_s": tokens / seconds, "flops_per_s": flops / seconds,
            "seconds": seconds, "loss_by_quarter": losses}


def profile_updates(trainer: Trainer, meter: TrainMeter, updates: int, top: int = 25
                    ) -> list[dict]:
    """The operators of `updates` more updates, by self CPU time: the `top` ones with
    their share of the whole (forward, backward and optimiser together)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            trainer._update(trainer.batches.next_group(trainer.progress), meter)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [{"op": e.key, "share": round(e.self_cpu_time_total / total, 4),
             "calls": e.count // updates} for e in ranked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--compile", action="store_true", help="train.compile: true")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="reference")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=8000, help="joint SentencePiece size")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the timed updates, profile N more: operators by share")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data, tokenizer = bible_run(args.vocab)
    shape = SHAPES[args.shape]
    if args.device.startswith("cuda"):  # the tensor cores' own sizes
        peaks = {"fp32": matmul_peak(torch.float32, 8192, 10, args.device),
                 "bf16": matmul_peak(torch.bfloat16, 8192, 10, args.device)}
    else:  # bf16 is probed small: without AVX-512 BF16 / AMX it is emulated, ~100x slower
        peaks = {"fp32": matmul_peak(torch.float32),
                 "bf16": matmul_peak(torch.bfloat16, 512, 3)}
    for precision in args.precision:
        if peaks[precision] < peaks["fp32"]:
            record("train", {
                "precision": precision, "skipped": True, "device": args.device,
                "reason": f"{precision} matmul peak ({peaks[precision] / 1e9:.1f} GFLOP/s) is "
                          f"below fp32 ({peaks['fp32'] / 1e9:.1f} GFLOP/s) on this device",
            }, "bench/train.py")
            continue
        result = run(precision, args.compile, args.steps, args.warmup, data, tokenizer, shape,
                     args.max_tokens, args.device, args.profile)
        if result["profile"]:
            print(f"{precision}: operators by self CPU time over {args.profile} updates")
            for row in result["profile"]:
                print(f"  {row['share']:7.1%}  {row['calls']:6d}/update  {row['op']}")
        record("train", {
            "precision": precision, "compile": args.compile, "device": args.device,
            "target_tokens_per_s": round(result["tokens_per_s"]),
            "model_tflops": round(result["flops_per_s"] / 1e12, 4),
            "peak_matmul_tflops": round(peaks[precision] / 1e12, 4),
            "mfu": round(result["flops_per_s"] / peaks[precision], 3),
            "mfu_vs_fp32_peak": round(result["flops_per_s"] / peaks["fp32"], 3),
            "updates": args.steps, "seconds": round(result["seconds"], 1),
            "loss_by_quarter": result["loss_by_quarter"],
            **({"profile": result["profile"]} if result["profile"] else {}),
            "shape": shape, "max_tokens": args.max_tokens, "threads": args.threads,
        }, "bench/train.py")


if __name__ == "__main__":
    main()
