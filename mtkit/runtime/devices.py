"""Where computation runs: device choice and CPU threads."""

from __future__ import annotations

import os

import torch

from mtkit.errors import ConfigError


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without it is a clear error."""
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
        torch.set_num_threads(threads)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not all the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
