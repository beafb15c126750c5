"""TorchScript compilation of the few hot paths written for it (docs/architecture.md).

Those paths (the decode step, beam search's bookkeeping of a step, the cache's row
gather) run a hundred small operators per step of one sentence, and Python's cost per
operator was most of that step on the CPU. TorchScript runs them as one compiled graph.
torch calls TorchScript deprecated (since 2.10): it is still the one way torch runs such
a graph without Python between the operators (torch.compile recompiled at every
position, or, with fixed shapes, ran slower: docs/benchmarks.md). So compilation is an
option of each path, never a need: where it fails, the same Python runs as it is.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

log = logging.getLogger(__name__)

Compiled = TypeVar("Compiled", bound=Callable[..., Any])


def script(target: Compiled) -> Compiled | None:
    """`target` (a function, or a module whose forward is the path) compiled, or None
    where this torch cannot compile it.

    It also turns torch's TorchScript executor to the one that optimises a graph once.
    The default (the "profiling" executor) optimises it again for new input shapes, up to
    a depth, and a search meets new shapes at every step (its cache grows, sentences
    leave): an engine made for each validation paid seconds for that, and one sentence
    ran no faster. The switch is process-wide, as torch has it; mtkit runs no other
    TorchScript."""
    try:
        torch._C._jit_set_profiling_executor(False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notice: see above
            return torch.jit.script(target)
    except Exception as exc:  # noqa: BLE001 (any failure leaves the Python, which is correct)
        log.debug("TorchScript cannot compile %s (%s); it runs as Python", target, exc)
        return None


def compiled_function(function: Compiled) -> Callable[[], Compiled]:
    """A getter of `function` compiled once a process on first use, or `function` itself
    where it cannot be compiled."""

    @functools.cache
    def compiled() -> Compiled:
        done = script(function)
        return function if done is None else done

    return compiled
