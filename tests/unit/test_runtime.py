"""runtime/: the cores each of several sharers gets, the arguments `--nproc N` passes on
to torchrun's ranks, and what train.precision auto picks."""

from __future__ import annotations

import os

import torch

from mtkit.runtime import devices
from mtkit.runtime.distributed import _without_nproc


def test_threads_each_share_the_usable_cores(monkeypatch):
    monkeypatch.setattr(devices, "usable_cores", lambda: 8)
    assert [devices.threads_each(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_nproc_is_left_out_of_the_ranks_arguments():
    argv = ["train", "r.yaml", "--nproc", "2", "--set", "train.lr=1", "--nproc=4", "--restart"]
    assert _without_nproc(argv) == ["train", "r.yaml", "--set", "train.lr=1", "--restart"]


PROBE = devices.bf16_matmul_speedup  # the real probe (conftest makes auto fp32 in process)


def test_auto_precision_follows_the_probe():
    """auto is bf16 where the probe finds bf16 at least twice as fast, fp32 elsewhere;
    fp32 and bf16 are what they say, without a probe."""
    cpu = torch.device("cpu")

    def fails(device):
        raise AssertionError("no probe for a precision given outright")

    assert devices.resolve_precision("auto", cpu, lambda d: 5.2)[0] == "bf16"
    assert devices.resolve_precision("auto", cpu, lambda d: 2.0)[0] == "bf16"
    chosen, why = devices.resolve_precision("auto", cpu, lambda d: 1.9)
    assert chosen == "fp32" and "1.90x" in why
    assert devices.resolve_precision("auto", cpu, lambda d: 0.01)[0] == "fp32"
    assert devices.resolve_precision("bf16", cpu, fails) == ("bf16", "train.precision")
    assert devices.resolve_precision("fp32", cpu, fails) == ("fp32", "train.precision")


def test_the_matmul_probe_measures_a_ratio():
    threads = torch.get_num_threads()
    ratio = PROBE(torch.device("cpu"), budget=0.05)
    assert 0 < ratio < float("inf")
    assert torch.get_num_threads() == threads  # it times one thread, then gives them back


def test_kernel_caches_are_capped_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "500")
    devices.bound_kernel_caches()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"
    assert os.environ["LRU_CACHE_CAPACITY"] == "500"  # the user's choice stays
