"""Benchmark: data-parallel training on one machine, 1 process x 2 threads against
2 processes x 1 thread (torchrun, gloo), and the time an update spends in the all-reduce.

Both jobs train the reference shape of bench/train.py on the same batches: 8192 tokens
per update (1 process accumulating 2 batches of 4096, or 2 ranks with one each). Each
job runs in its own processes, the two alternating for --rounds rounds, so that the
machine's drift hits both alike; the ratio compares the medians. The all-reduce is timed
two ways on 2 ranks: the wall time of DDP's bucket all-reduces in an update (launch to
completion, overlapped with the backward pass, as DDP runs them), and a blocking
all-reduce of the whole gradient (its size in float32) on its own.

    python bench/scale.py [--steps 20] [--warmup 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bible_run, record  # noqa: E402
from train import SHAPE  # noqa: E402

from mtkit.config import recipe_from_dict  # noqa: E402
from mtkit.runtime import distributed as dist
from mtkit.train.meter import TrainMeter  # noqa: E402
from mtkit.train.trainer import Trainer  # noqa: E402

TOKENS_PER_UPDATE = 8192
MAX_TOKENS = 4096


def timed_allreduce_hook(durations: list[float], bucket):
    """DDP's default hook (average the bucket over the ranks), timing each bucket."""
    start = time.perf_counter()
    buffer = bucket.buffer().div_(torch.distributed.get_world_size())
    future = torch.distributed.all_reduce(buffer, async_op=True).get_future()

    def finished(done):
        durations.append(time.perf_counter() - start)
        return done.value()[0]

    return future.then(finished)


def worker(steps: int, warmup: int) -> None:
    """One job (this process, or each rank of a torchrun job): time `steps` updates."""
    device = dist.setup("cpu", timeout_s=600, threads=0)
    data, tokenizer = bible_run()
    raw = {"data": {"train": {"src": "x", "tgt": "y"}, "valid": None}, "model": SHAPE,
           "train": {"max_tokens": MAX_TOKENS, "tokens_per_update": TOKENS_PER_UPDATE,
                     "lr": 0.001, "warmup_steps": 400, "valid_every": 10**9}}
    recipe = recipe_from_dict(raw, name="bench")
    trainer = Trainer(recipe, Path(f"/tmp/mtkit-bench-scale-{dist.rank()}"), tokenizer, data,
                      {}, device)
    bucket_times: list[float] = []
    if dist.world_size() > 1:
        trainer.train_model.register_comm_hook(bucket_times, timed_allreduce_hook)
    meter = TrainMeter()
    tokens = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            dist.wait_for_main()
            start, tokens, bucket_times[:] = time.perf_counter(), 0.0, []
        group = trainer.batches.next_group(trainer.progress)
        data = trainer.batches.training.epoch(trainer.batches.epoch)
        tokens += sum(float(data.lengths(i)[1].sum() + len(i)) for _, i in group)
        trainer._update(group, meter)
    seconds = time.perf_counter() - start
    result = {"processes": dist.world_size(), "threads_per_process": torch.get_num_threads(),
              "target_tokens_per_s": round(tokens / seconds), "updates": steps,
              "ms_per_update": round(1000 * seconds / steps, 1),
              "loss": round(meter.means(seconds)["loss"], 3)}
    if dist.world_size() > 1:
        result["allreduce_ms_per_update_overlapped"] = round(1000 * sum(bucket_times) / steps, 1)
        result["allreduce_ms_full_gradient_blocking"] = round(blocking_allreduce_ms(trainer), 1)
    if dist.is_main():
        print("RESULT " + json.dumps(result), flush=True)
    dist.wait_for_main()
    dist.shutdown()


def blocking_allreduce_ms(trainer: Trainer, reps: int = 10) -> float:
    """Median wall time of one all-reduce of a float32 tensor the size of the gradient."""
    size = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    flat = torch.zeros(size)
    times = []
    for _ in range(reps + 2):
        dist.wait_for_main()
        start = time.perf_counter()
        torch.distributed.all_reduce(flat)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[2:])


def run_job(processes: int, steps: int, warmup: int) -> dict:
    script = [str(Path(__file__).resolve()), "--worker", "--steps", str(steps),
              "--warmup", str(warmup)]
    if processes == 1:
        command = [sys.executable, *script]
        env = {**os.environ, "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))}
    else:  # torchrun itself starts the ranks; dist.setup gives each cores / ranks threads
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={processes}", *script]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"bench/scale.py: the {processes}-process job failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.warmup)
        return
    bible_run()  # build the data once, before the timed jobs
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for processes in (1, 2):
            runs[processes].append(run_job(processes, args.steps, args.warmup))
    # the median of the rounds: one disturbed run must not decide the ratio
    rate = {p: statistics.median(r["target_tokens_per_s"] for r in runs[p]) for p in runs}
    record("scale", {
        "one_process_2_threads": runs[1], "two_processes_1_thread": runs[2],
        "tokens_per_s_ratio_2x1_over_1x2": round(rate[2] / rate[1], 3),
        "tokens_per_update": TOKENS_PER_UPDATE, "shape": SHAPE,
    }, "bench/scale.py")


if __name__ == "__main__":
    main()
