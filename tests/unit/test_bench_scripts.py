"""The benchmark scripts load against today's package (a moved or renamed name breaks
one only when it runs, which `make bench` does rarely), and bench/README.md lists each."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from builders import ROOT

BENCH = ROOT / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_loads(script, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import common, train, records
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # and leave no such names behind
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", BENCH / script)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_readme_names_every_bench_script():
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = SCRIPTS + sorted(p.name for p in BENCH.glob("*.sh"))
    assert [s for s in scripts if f"`{s}`" not in readme and f"bench/{s}" not in readme] == []
