"""Where computation runs: device choice, the cores this process may use, and how many
CPU threads each of several model threads or processes gets.

torch is imported inside the functions that need it, so that core counting costs a
process (a binarize worker, say) nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mtkit.errors import ConfigError

if TYPE_CHECKING:
    import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without it is a clear error."""
    import torch

    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available here; use --device cpu")
    if name != "cpu" and not name.startswith("cuda"):
        raise ConfigError(f"--device {name}: expected cpu, cuda, cuda:N or auto")
    return torch.device(name)


def set_threads(threads: int) -> None:
    """Set torch's intra-op CPU threads; 0 keeps torch's default (all cores)."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not all the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def threads_each(sharers: int) -> int:
    """CPU threads for each of `sharers` model threads or processes that share this
    process's cores: an equal part, at least one."""
    return max(1, usable_cores() // sharers)


# oneDNN (bf16 matmuls on a CPU) keeps the kernels it built per matrix shape, in its own
# cache and in torch's (ideep's); each entry holds memory. Training's shapes change with
# every batch, so at their default sizes (1024) a bf16 run grew by gigabytes and slowed as
# it went; 64 entries each kept its memory flat at the same speed.
KERNEL_CACHE_ENTRIES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"}


def bound_kernel_caches() -> None:
    """Cap oneDNN's kernel caches (KERNEL_CACHE_ENTRIES) unless the environment sets them.
    They read the environment once, at the first oneDNN call: call this before any."""
    for name, entries in KERNEL_CACHE_ENTRIES.items():
        os.environ.setdefault(name, entries)


# train.precision auto trains in bf16 where a bf16 matmul runs at least this many times
# as fast as an fp32 one: the step's other work (norms, softmax, the optimiser) gains less
BF16_SPEEDUP_NEEDED = 2.0


def bf16_matmul_speedup(device: torch.device, budget: float = 0.3) -> float:
    """How many times faster a bf16 matmul runs than an fp32 one on one core of this CPU.
    CPUs with AMX or AVX-512 BF16 run it on their matrix or dot-product units; elsewhere
    it is emulated and slower than fp32.

    The answer must not depend on how busy the machine is, or one recipe would train in
    fp32 on one run and bf16 on the next: one thread (a multi-threaded matmul waits for
    its slowest thread, which another job may hold), products short enough to run within
    one time slice of the scheduler, the two kinds timed in turns (so a busy spell slows
    both), and the fastest of each kept over `budget` seconds."""
    import torch

    x, y = torch.randn(512, 512, device=device), torch.randn(512, 512, device=device)
    x16, y16 = x.bfloat16(), y.bfloat16()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x @ y, x16 @ y16  # the first calls set up the kernels
        fp32 = bf16 = float("inf")
        deadline = time.perf_counter() + budget
        while True:
            start = time.perf_counter()
            x @ y
            middle = time.perf_counter()
            x16 @ y16
            end = time.perf_counter()
            fp32, bf16 = min(fp32, middle - start), min(bf16, end - middle)
            if end > deadline:  # at least one of each; an emulated bf16 is slow: few tell
                return fp32 / bf16
    finally:
        torch.set_num_threads(threads)


def resolve_precision(requested: str, device: torch.device,
                      speedup: Callable[[torch.device], float] | None = None
                      ) -> tuple[str, str]:
    """train.precision as it will run, and why: fp32 and bf16 as asked; auto is bf16 on a
    CUDA device that has it and on a CPU where `speedup` (a matmul probe) finds bf16 at
    least BF16_SPEEDUP_NEEDED times as fast as fp32 (the probe: bf16_matmul_speedup),
    fp32 elsewhere."""
    import torch

    if requested != "auto":
        return requested, "train.precision"
    if device.type == "cuda":
        fast = torch.cuda.is_bf16_supported()
        return ("bf16" if fast else "fp32"), f"auto: this GPU {'has' if fast else 'lacks'} bf16"
    ratio = (speedup or bf16_matmul_speedup)(device)
    chosen = "bf16" if ratio >= BF16_SPEEDUP_NEEDED else "fp32"
    return chosen, f"auto: a bf16 matmul ran {ratio:.2f}x as fast as fp32 on this CPU"
