"""runtime/: the cores each of several sharers gets, and the arguments `--nproc N` passes
on to torchrun's ranks."""

from __future__ import annotations

from mtkit.runtime import devices
from mtkit.runtime.distributed import _without_nproc


def test_threads_each_share_the_usable_cores(monkeypatch):
    monkeypatch.setattr(devices, "usable_cores", lambda: 8)
    assert [devices.threads_each(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_nproc_is_left_out_of_the_ranks_arguments():
    argv = ["train", "r.yaml", "--nproc", "2", "--set", "train.lr=1", "--nproc=4", "--restart"]
    assert _without_nproc(argv) == ["train", "r.yaml", "--set", "train.lr=1", "--restart"]
