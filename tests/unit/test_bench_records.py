"""Benchmark records (bench/records.py, bench/promote.py): the tracked records keep the
schema and are exactly the ones docs/benchmarks.md cites; no record holds a machine path."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from builders import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # bench/promote.py imports records as its scripts do
records = importlib.import_module("records")
spec = importlib.util.spec_from_file_location("promote", BENCH / "promote.py")
promote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(promote)

DOCS = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def a_record(**changes) -> dict:
    record = {"schema": records.SCHEMA, "figure": "decode", "sentences_per_s": 45.6,
              "mtkit_code": "abc1234",
              "machine": {"cpu": records.cpu_facts("model name : A CPU\nflags : avx2 fma")},
              "command": "python bench/decode.py --model runs/demo/model.pt",
              "date": "2027-01-05T10:00:00+0000"}
    return {**record, **changes}


def test_every_tracked_record_keeps_the_schema():
    tracked = records.read_records(records.RECORDS)
    assert tracked
    for number, record in enumerate(tracked, 1):
        assert records.problems(record) == [], f"bench/records.jsonl line {number}"


def test_the_tracked_records_are_the_ones_the_docs_cite():
    cited = set(records.CITATION.findall(DOCS))
    kept = {record["ref"] for record in records.read_records(records.RECORDS)}
    assert cited, "docs/benchmarks.md cites no record as `rec:REF`"
    assert cited - kept == set(), "cited in docs/benchmarks.md, not in bench/records.jsonl"
    assert kept - cited == set(), "in bench/records.jsonl, cited nowhere"


def test_the_cpu_comes_from_cpuinfo_or_lscpu():
    cpuinfo = ("processor : 0\nmodel name : Intel(R) Xeon(R)\n"
               "flags : fpu avx2 avx512f avx512_vnni amx_tile amx_bf16\nprocessor : 1\n"
               "model name : Intel(R) Xeon(R)\n")
    assert records.cpu_facts(cpuinfo) == {"model": "Intel(R) Xeon(R)", "isa": {
        "avx2": True, "avx512f": True, "avx512_vnni": True, "amx_bf16": True,
        "amx_int8": False}}
    lscpu = "Architecture: x86_64\nModel name:  AMD EPYC 7B13\nFlags: sse avx2\n"
    assert records.cpu_facts(lscpu)["model"] == "AMD EPYC 7B13"
    assert records.cpu_facts(lscpu)["isa"]["avx2"] is True
    assert records.cpu_facts("") == {"model": "unknown", "isa": dict.fromkeys(records.ISA_FLAGS)}


def test_machine_paths_become_repository_relative_or_their_last_part():
    inside = str(ROOT / "runs" / "demo" / "model.pt")
    record = a_record(model=inside, data="/srv/corpora/bible-es-en",
                      command=f"python bench/decode.py --model {inside} --out=/tmp/x/y.json")
    assert records.problems(record, tracked=False)[0].startswith("an absolute machine path")
    clean = records.without_machine_paths(record)
    assert clean["model"] == "runs/demo/model.pt"
    assert clean["data"] == "bible-es-en"
    assert clean["command"] == ("python bench/decode.py --model runs/demo/model.pt "
                                "--out=y.json")
    assert records.problems(clean, tracked=False) == []
    assert clean["sentences_per_s"] == 45.6  # figures untouched


@pytest.mark.parametrize("change, problem", [
    ({"mtkit_code": None}, "mtkit_code: missing"),
    ({"schema": 0}, "schema: 0"),
    ({"machine": {"cpu": {"model": "x", "isa": {"avx2": True}}}}, "machine.cpu.isa"),
    ({"machine": {}}, "machine.cpu.model"),
])
def test_a_record_that_breaks_the_schema_is_named(change, problem):
    found = records.problems(a_record(**change), tracked=False)
    assert any(problem in line for line in found), found


def test_promote_appends_the_chosen_records_under_their_ref_once(tmp_path):
    work, kept = tmp_path / "results.jsonl", tmp_path / "records.jsonl"
    work.write_text("".join(json.dumps(a_record(date=f"2027-01-05T10:0{i}:00+0000")) + "\n"
                            for i in range(3)), encoding="utf-8")
    candidates = records.read_records(work)
    picked = promote.chosen(candidates, None, "2027-01-05T10:0", "decode")
    assert len(picked) == 3 and promote.chosen(candidates, 1, None, None) == candidates[-1:]
    promote.promote(work, kept, "decode-2027", candidates[-1:])
    assert records.read_records(kept) == [{**candidates[-1], "ref": "decode-2027"}]
    with pytest.raises(ValueError, match="already in"):
        promote.promote(work, kept, "decode-2027", candidates[-1:])
    with pytest.raises(ValueError, match="absolute machine path"):
        promote.promote(work, kept, "other", [a_record(model="/home/me/model.pt")])
    assert len(records.read_records(kept)) == 1  # a refusal writes nothing
