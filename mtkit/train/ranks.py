"""Every decision of a training job that depends on which process makes it.

A job is one process, or N ranks under torchrun that run the same loop in lockstep. Rank
0 alone writes (checkpoints, metrics, the log file) and validates; the decisions that
change what the loop does next (the update's token count, when to stop, validation's
result) are joint, so that every rank takes the same branch. The trainer asks this value
and never compares ranks itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from mtkit.runtime import distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int
    world_size: int
    device: torch.device  # this rank's (dist.setup): where the joint sums are made

    @classmethod
    def of_this_job(cls, device: torch.device) -> Ranks:
        return cls(dist.rank(), dist.world_size(), device)

    @property
    def writes(self) -> bool:
        """Whether this process writes the run's files and validates: rank 0."""
        return self.rank == 0

    @property
    def several(self) -> bool:
        return self.world_size > 1

    def share(self, group: list[T]) -> list[T]:
        """This rank's part of the job's batches: every world_size-th one."""
        return group[self.rank :: self.world_size]

    def total(self, *values: Any) -> tuple[Any, ...]:
        """Each value summed over the ranks (ints stay ints)."""
        return dist.all_reduce_sum(values, self.device)

    def agree(self, clock: float, signum: int) -> tuple[float, int]:
        """Rank 0's clock and the signal any rank received: what the stop rules read."""
        return dist.agree(clock, signum, self.device)

    def writers(self, compute: Callable[[], T]) -> T:
        """What `compute` gives on the writing rank, on every rank (it runs there alone)."""
        return dist.broadcast(compute() if self.writes else None)
