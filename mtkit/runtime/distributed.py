"""Data-parallel jobs under torchrun: the process group, each rank's device and threads,
and the few collectives that keep the ranks in lockstep.

`torchrun --nproc_per_node N -m mtkit train RECIPE` starts the processes and sets RANK,
WORLD_SIZE, LOCAL_RANK (and the rendezvous); `setup` joins them. `mtkit train --nproc N`
runs that same torchrun in-process (`run_torchrun`). Without torchrun every function here
is the single-process no-op, so the trainer and the pipeline have one code path.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from mtkit.errors import MtkitError
from mtkit.runtime.devices import resolve_device, set_threads, threads_each

log = logging.getLogger("mtkit")

_control: Any = None  # a gloo group with a long timeout: waiting for rank 0's own work


def launched() -> bool:
    """Whether torchrun started this process as one rank of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def setup(device: str, timeout_s: float, threads: int) -> torch.device:
    """Join the torchrun job (if any) and return this rank's device.

    Backend: NCCL on CUDA, gloo on CPU, from the device; each rank on its LOCAL_RANK GPU.
    `timeout_s` bounds every training collective, so a dead rank ends the job instead of
    hanging it. CPU threads per rank default to the usable cores / the local ranks.
    """
    chosen = resolve_device(device)
    if not launched() or dist.is_initialized():
        return chosen
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if chosen.type == "cuda":
        chosen = torch.device("cuda", local_rank)
        torch.cuda.set_device(chosen)
    backend = "nccl" if chosen.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    global _control
    _control = dist.new_group(backend="gloo", timeout=timedelta(days=1))
    if threads == 0 and chosen.type == "cpu":
        set_threads(threads_each(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    _label_logs()
    return chosen


def _label_logs() -> None:
    """Rank 0 logs as usual; the others only warnings and errors, prefixed with their rank."""
    if not is_main():
        log.addFilter(_RankPrefix(rank()))
        log.setLevel(logging.WARNING)


class _RankPrefix(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.prefix = f"[rank {rank}] "

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.prefix + str(record.msg)
        return True


def wait_for_main(failed: int = 0) -> None:
    """All ranks meet here; used while rank 0 alone tokenizes, binarises or validates,
    which may take far longer than a training collective's timeout. Rank 0 passes the exit
    code of an error that ends it (`main_alone`): the other ranks then end quietly with
    that code, rank 0's error line standing for the job."""
    if not dist.is_initialized():
        return
    code = broadcast(failed)
    if code and not is_main():
        raise SystemExit(code)


@contextmanager
def main_alone(alone: bool = True) -> Iterator[None]:
    """Around rank 0's own work while every other rank waits in `wait_for_main` (on other
    ranks, or with `alone` false, nothing): an error there is passed to them before it
    ends rank 0, so they do not die of the closed connection (a gloo traceback each). Only
    where the others are sure to be waiting: a rank inside a training collective would
    never take the message. A signal is not passed on: every rank gets it from the
    terminal or torchrun."""
    if not (alone and dist.is_initialized() and is_main()):
        yield
        return
    try:
        yield
    except MtkitError as exc:
        wait_for_main(failed=exc.exit_code)
        raise
    except OSError:  # what the CLI reports as bad input too
        wait_for_main(failed=2)
        raise
    except Exception:
        wait_for_main(failed=1)
        raise


# what gloo says when the process at the other end of a collective has ended
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def peer_gone(exc: BaseException) -> bool:
    """Whether `exc` is a collective failing because another rank's process ended."""
    return (dist.is_initialized() and isinstance(exc, RuntimeError)
            and any(words in str(exc) for words in _PEER_GONE))


def broadcast(value: Any) -> Any:
    """Rank 0's `value` on every rank (any picklable object)."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=_control)
    return box[0]


def send_object(value: Any, to: int) -> None:
    """Send a picklable object to rank `to` (which must receive it), however long it waits."""
    dist.send_object_list([value], dst=to, group=_control)


def receive_object(source: int) -> Any:
    box = [None]
    dist.recv_object_list(box, src=source, group=_control)
    return box[0]


def all_reduce_sum(values: tuple[float, ...], device: torch.device) -> tuple[float, ...]:
    """Sums over all ranks, in float64 (integers stay exact up to 2**53)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, device=device, dtype=torch.float64)
    dist.all_reduce(tensor)
    kinds = [type(v) for v in values]
    return tuple(kind(x) for kind, x in zip(kinds, tensor.tolist()))


def agree(main_clock: float, signum: int, device: torch.device) -> tuple[float, int]:
    """Rank 0's clock, and the signal any rank received (0: none), on every rank."""
    if not dist.is_initialized():
        return main_clock, signum
    values = torch.tensor([main_clock if is_main() else 0.0, float(signum)], device=device,
                          dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return float(values[0]), int(values[1])


def shutdown() -> None:
    if dist.is_initialized():
        # DDP's reducer and gloo's finished work objects, kept alive by reference cycles,
        # would otherwise be freed during interpreter shutdown, which can abort the
        # process (once in CI: "terminate called without an active exception", SIGABRT)
        gc.collect()
        dist.destroy_process_group()


def run_torchrun(nproc: int, argv: list[str]) -> None:
    """Run `argv` (mtkit's arguments, --nproc N among them) as `torchrun --standalone
    --nproc_per_node N -m mtkit ARGV`. A failed job ends this process as its first failed
    rank did (2 for bad input, 130/143 for a signal), the ranks' own messages standing for
    the launcher's log; a successful one returns."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    logging.getLogger("torch.distributed").setLevel(logging.CRITICAL)
    # the thread count `setup` gives each rank (and torchrun's warning without it)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads_each(nproc)))
    try:
        run(parse_args(["--standalone", f"--nproc_per_node={nproc}", "-m", "mtkit",
                        *_without_nproc(argv)]))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode > 0:
            sys.exit(failure.exitcode)  # the rank said why
        sys.stderr.write(f"mtkit: error: rank {rank} (pid {failure.pid}) was killed by "
                         f"{failure.signal_name()}; the job stopped: run the same command "
                         "to resume from checkpoint_last.pt\n")
        sys.exit(128 - failure.exitcode)
    except SignalException as exc:  # the job was asked to stop: the ranks saved and stopped
        sys.exit(128 + int(exc.sigval))


def _without_nproc(argv: list[str]) -> list[str]:
    """`argv` less its `--nproc N` or `--nproc=N`: each rank is one process."""
    args, skip = [], False
    for arg in argv:
        if skip or arg == "--nproc":
            skip = not skip
            continue
        if not arg.startswith("--nproc="):
            args.append(arg)
    return args
