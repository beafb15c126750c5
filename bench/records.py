"""Benchmark records: their schema, the machine facts they carry, and the paths they may
not carry. Pure (no torch, no data), so the unit tests and bench/promote.py import it.

A record is one JSON line. The bench scripts append theirs to bench/work/results.jsonl
(git-ignored); bench/promote.py copies the ones docs/benchmarks.md cites, on purpose,
into the tracked bench/records.jsonl, each under a `ref` the docs name.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

SCHEMA = 1  # records before it had no `schema` key
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK_RESULTS = HERE / "work" / "results.jsonl"  # what the scripts write (untracked)
RECORDS = HERE / "records.jsonl"  # what the docs cite (tracked)
UNKNOWN = "unknown"  # a commit or CPU an old record did not note
# the instruction sets that decide which kernels torch, oneDNN and CTranslate2 run
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "amx_bf16", "amx_int8")
REQUIRED = {"schema": int, "figure": str, "mtkit_code": str, "machine": dict, "command": str,
            "date": str}
# the docs cite records as `rec:REF`
CITATION = re.compile(r"`rec:([A-Za-z0-9_.-]+)`")


def cpu_facts(cpuinfo: str) -> dict:
    """The CPU's model name and which of ISA_FLAGS it has, from /proc/cpuinfo's text (or
    lscpu's, whose "Model name" and "Flags" lines say the same)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name") or UNKNOWN,
            "isa": {flag: flag in flags for flag in ISA_FLAGS} if flags else
            dict.fromkeys(ISA_FLAGS)}


def this_cpu() -> dict:
    """cpu_facts of this machine: /proc/cpuinfo (Linux), else lscpu, else unknown."""
    try:
        return cpu_facts(Path("/proc/cpuinfo").read_text(encoding="utf-8"))
    except OSError:
        pass
    try:
        return cpu_facts(subprocess.run(["lscpu"], capture_output=True, text=True,
                                        check=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        return cpu_facts("")


def portable_path(path: str) -> str:
    """An absolute path as a record may hold it: relative to the repository when inside
    it, else its last part (a machine's directories say nothing to another reader)."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return Path(path).name


def without_machine_paths(value: object) -> object:
    """`value` (a record or any part of one) with every absolute path made portable; in
    strings of several words (a command) each word, and each `--key=/path` value."""
    if isinstance(value, dict):
        return {key: without_machine_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_machine_paths(item) for item in value]
    if not isinstance(value, str) or "/" not in value:
        return value
    if value.startswith("/") and " " not in value:
        return portable_path(value)
    try:
        words = shlex.split(value)
    except ValueError:
        return value
    if not any(absolute_paths(word) for word in words):
        return value
    return shlex.join(_portable_word(word) for word in words)


def _portable_word(word: str) -> str:
    key, sep, rest = word.partition("=")
    if sep and rest.startswith("/"):
        return f"{key}={portable_path(rest)}"
    return portable_path(word) if word.startswith("/") else word


def absolute_paths(value: object) -> list[str]:
    """The absolute paths anywhere in `value`: words starting with '/', alone or after '='."""
    if isinstance(value, dict):
        return [path for item in value.values() for path in absolute_paths(item)]
    if isinstance(value, list):
        return [path for item in value for path in absolute_paths(item)]
    if not isinstance(value, str):
        return []
    return re.findall(r"(?:^|[\s=])(/[^\s'\"]+)", value)


def problems(record: dict, tracked: bool = True) -> list[str]:
    """What makes `record` break the schema (empty when it keeps it). A tracked record also
    needs the `ref` the docs cite it by."""
    found = [f"{key}: missing or not {kind.__name__}" for key, kind in REQUIRED.items()
             if not isinstance(record.get(key), kind)]
    if tracked and not isinstance(record.get("ref"), str):
        found.append("ref: missing (bench/promote.py --ref)")
    if record.get("schema") not in (None, SCHEMA):
        found.append(f"schema: {record['schema']}, expected {SCHEMA}")
    if record.get("mtkit_code") == "":
        found.append(f"mtkit_code: empty (the commit, or {UNKNOWN!r})")
    cpu = (record.get("machine") or {}).get("cpu")
    if not isinstance(cpu, dict) or not isinstance(cpu.get("model"), str):
        found.append("machine.cpu.model: missing")
    elif not isinstance(cpu.get("isa"), dict) or set(cpu["isa"]) != set(ISA_FLAGS) or any(
            flag not in (True, False, None) for flag in cpu["isa"].values()):
        found.append(f"machine.cpu.isa: needs exactly {', '.join(ISA_FLAGS)} "
                     "(true, false, or null where unknown)")
    found += [f"an absolute machine path: {path}" for path in absolute_paths(record)]
    return found


def read_records(path: Path) -> list[dict]:
    """The records of a JSON-lines file (none when it does not exist)."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
