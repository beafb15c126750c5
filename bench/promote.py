"""Promote benchmark records, on purpose, from bench/work/results.jsonl (what the scripts
write, untracked) to bench/records.jsonl (tracked: the records docs/benchmarks.md cites).

    python bench/promote.py --ref REF (--last N | --date PREFIX [--figure NAME]) [--from FILE]

`--last 3` takes the last three records; `--date 2026-12-03T12:0` every record whose date
starts so (with `--figure`, of that script only). Each promoted record gets `"ref": REF`,
the name docs/benchmarks.md cites it by (`rec:REF`). A record that breaks the schema of
bench/records.py, or one already promoted, is refused and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import RECORDS, WORK_RESULTS, problems, read_records  # noqa: E402


def chosen(candidates: list[dict], last: int | None, date: str | None,
           figure: str | None) -> list[dict]:
    if last is not None:
        return candidates[-last:] if last > 0 else []
    return [r for r in candidates if str(r.get("date", "")).startswith(date or "")
            and (figure is None or r.get("figure") == figure)]


def promote(source: Path, target: Path, ref: str, picked: list[dict]) -> list[dict]:
    """Append `picked` (records of `source`) to `target` under `ref`; returns them. Raises
    ValueError, naming the record and what is wrong, before writing anything."""
    if not picked:
        raise ValueError(f"{source}: no record matches")
    kept = read_records(target)
    promoted = []
    for record in picked:
        entry = {**record, "ref": ref}
        where = f"{source}: {record.get('figure')} of {record.get('date')}"
        wrong = problems(entry)
        if wrong:
            raise ValueError(f"{where}: {wrong[0]}")
        if any({**old, "ref": ref} == entry for old in kept):
            raise ValueError(f"{where}: already in {target}")
        promoted.append(entry)
    with open(target, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(entry) + "\n" for entry in promoted)
    return promoted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="the name the docs cite them by")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", type=int, help="the last N records")
    which.add_argument("--date", help="the records whose date starts so")
    parser.add_argument("--figure", help="with --date: only this script's records")
    parser.add_argument("--from", dest="source", type=Path, default=WORK_RESULTS)
    parser.add_argument("--to", dest="target", type=Path, default=RECORDS)
    args = parser.parse_args()
    picked = chosen(read_records(args.source), args.last, args.date, args.figure)
    try:
        promoted = promote(args.source, args.target, args.ref, picked)
    except ValueError as error:
        print(f"promote: error: {error}", file=sys.stderr)
        return 2
    print(f"promoted {len(promoted)} record(s) to {args.target} as rec:{args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
