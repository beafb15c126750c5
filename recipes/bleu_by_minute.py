"""Test BLEU by minute of training: what a run's kept checkpoints translate, read at
every EVERY minutes of its clock, with the run's model.pt as the last row.

    mtkit train recipes/cpu-30m.yaml --run-dir runs/ceiling --threads 2 \\
        --set train.max_time=2h --set train.keep_last=1000
    python recipes/bleu_by_minute.py runs/ceiling --src test.es --ref test.en --every 10

`train.keep_last=1000` keeps the last 1,000 step checkpoints (0 would keep none; 29 MB
each for the Bible recipe's model), which for 2 hours is all of them,
so that each minute has one. The minute of a checkpoint is the training clock that
metrics.jsonl logged at its update (validations included, as the budget counts them);
each row is the last checkpoint saved by then. Every row decodes with the same settings
(the run's decode section, or --beam / --lenpen), so the rows differ only in weights.
This is how recipes/README.md's ceiling run was scored.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def clock_of_steps(metrics: Path) -> dict[int, float]:
    """Seconds of training clock at each logged update, from a run's metrics.jsonl."""
    clock: dict[int, float] = {}
    with metrics.open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if event.get("event") in ("train", "valid"):
                clock[event["step"]] = event["elapsed"]
    return clock


def checkpoints_by_minute(steps: list[int], clock: dict[int, float], every: float
                          ) -> list[tuple[float, int]]:
    """(minute, step) rows: at every `every` minutes of the clock, the last of `steps`
    (saved checkpoints) whose update was logged by then. A step that was never logged
    takes the clock of the last logged update before it; one with none before is skipped."""
    logged = sorted(clock)
    timed: list[tuple[float, int]] = []  # (seconds, step)
    for step in sorted(steps):
        before = [s for s in logged if s <= step]
        if before:
            timed.append((clock[before[-1]], step))
    rows: list[tuple[float, int]] = []
    if not timed:
        return rows
    minute = every
    while True:
        ready = [step for seconds, step in timed if seconds <= minute * 60]
        if ready and (not rows or ready[-1] != rows[-1][1]):
            rows.append((minute, ready[-1]))
        if minute * 60 >= timed[-1][0]:
            return rows
        minute += every


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory of `mtkit train`")
    parser.add_argument("--src", type=Path, required=True, help="the test set's sources")
    parser.add_argument("--ref", type=Path, required=True, help="its references")
    parser.add_argument("--every", type=float, default=10.0, help="minutes between rows")
    parser.add_argument("--beam", type=int, default=None)
    parser.add_argument("--lenpen", type=float, default=None)
    args = parser.parse_args(argv)

    from mtkit.metrics import corpus_scores
    from mtkit.textio import read_lines
    from mtkit.translate import Translator

    steps = {int(m.group(1)): path for path in (args.run / "checkpoints").glob("*.pt")
             if (m := re.fullmatch(r"checkpoint_(\d+)\.pt", path.name))}
    rows = checkpoints_by_minute(sorted(steps), clock_of_steps(args.run / "metrics.jsonl"),
                                 args.every)
    if not rows:
        print(f"{args.run}: no step checkpoints with a logged update", file=sys.stderr)
        return 2
    sources, refs = list(read_lines(args.src)), list(read_lines(args.ref))
    print("| minute | update | model | test BLEU | test chrF |")
    print("|---|---|---|---|---|")
    models = [(f"{minute:g}", str(step), steps[step]) for minute, step in rows]
    models.append(("end", "", args.run / "model.pt"))
    for minute, step, path in models:
        translator = Translator.load(path, beam=args.beam, lenpen=args.lenpen)
        bleu, chrf = corpus_scores(translator.translate(sources), [refs])
        print(f"| {minute} | {step} | {path.name} | {bleu.score:.2f} | {chrf.score:.2f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
