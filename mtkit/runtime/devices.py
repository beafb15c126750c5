"""Where computation runs: device choice, the cores this process may use, and how many
CPU threads each of several model threads or processes gets.

torch is imported inside the functions that need it, so that core counting costs a
process (a binarize worker, say) nothing.
"""

from __future__ import annotations

import os
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
