"""Test BLEU by minute of training: what a run's kept checkpoints translate, read at
every EVERY minutes of its clock, with the run's model.pt as the last row.

    mtkit train recipes/cpu-30m.yaml --run-dir runs/ceiling --threads 2 \\
        --set train.max_time=2h --set train.keep_last=1000
    python recipes/bleu_by_minute.py runs/ceiling --src test.es --ref test.en --every 10

`train.keep_last=1000` keeps the last 1,000 step checkpoints (0 would keep none; 27 MB
each for the Bible recipe's model), which for 2 hours is all of them,
so that each minute has one. The minute of a checkpoint is the training clock that
metrics.jsonl logged at its update (validations included, as the budget counts them);
each row is the last checkpoint saved by then. Every row decodes with the same settings
(the run's decode section, or --beam / --lenpen), so the rows differ only in weights.
This is how recipes/README.md's ceiling run was scored.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from pathlib import Path

from mtkit.files.textio import read_json_lines
from mtkit.train.run import RunPaths


def clock_of_steps(metrics: Path) -> dict[int, float]:
    """Seconds of training clock at each logged update, from a run's metrics.jsonl."""
    return {event["step"]: event["elapsed"] for event in read_json_lines(metrics)
            if event.get("event") in ("train", "valid")}


def checkpoints_by_minute(steps: list[int], clock: dict[int, float], every: float
                          ) -> list[tuple[float, int]]:
    """(minute, step) rows: at every `every` minutes of the clock, the last of `steps`
    (saved checkpoints) whose update was logged by then. A step that was never logged
    takes the clock of the last logged update before it; one with none before is skipped."""
    logged = sorted(clock)
    timed: list[tuple[float, int]] = []  # (seconds, step), both ascending
    for step in sorted(steps):
        before = bisect.bisect_right(logged, step)
        if before:
            timed.append((clock[logged[before - 1]], step))
    rows: list[tuple[float, int]] = []
    minute = every
    while timed:
        ready = bisect.bisect_right(timed, (minute * 60, float("inf")))
        if ready and (not rows or timed[ready - 1][1] != rows[-1][1]):
            rows.append((minute, timed[ready - 1][1]))
        if minute * 60 >= timed[-1][0]:
            break
        minute += every
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory of `mtkit train`")
    parser.add_argument("--src", type=Path, required=True, help="the test set's sources")
    parser.add_argument("--ref", type=Path, required=True, help="its references")
    parser.add_argument("--every", type=float, default=10.0, help="minutes between rows")
    parser.add_argument("--beam", type=int, default=None)
    parser.add_argument("--lenpen", type=float, default=None)
    args = parser.parse_args(argv)

    from mtkit.decode.translate import Translator
    from mtkit.evaluate.metrics import corpus_scores
    from mtkit.files.textio import read_lines

    paths = RunPaths(args.run)
    steps = {int(path.stem.removeprefix("checkpoint_")): path
             for path in paths.step_checkpoints()}
    rows = checkpoints_by_minute(sorted(steps), clock_of_steps(paths.metrics), args.every)
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
