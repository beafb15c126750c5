#!/usr/bin/env bash
# A sweep of screening runs: BASE's recipe under a short time budget, once per row, each
# row a name and the `--set` overrides that make it, then one table of what every row
# reached. The sweep in docs/benchmarks.md was run with it.
#
#   bash recipes/sweep.sh base "" vocab-4k "--set tokenizer.vocab_size=4000"
#   BUDGET=30m WORK=runs/full bash recipes/sweep.sh seed-2 "--set train.seed=2"
#
# A row whose run is finished is not trained again (`mtkit train` skips what is up to
# date), so running the script again prints the table at once. Rows run one after the
# other: on a small machine a run beside another measures neither.
set -euo pipefail

BASE=${BASE:-recipes/cpu-30m.yaml}   # the recipe every row starts from
WORK=${WORK:-runs/sweep}                 # one run directory per row
BUDGET=${BUDGET:-10m}                    # train.max_time of every row
THREADS=${THREADS:-2}
mtkit=${MTKIT:-mtkit}

if [ $(($# % 2)) -ne 0 ] || [ $# -eq 0 ]; then
    echo "usage: bash recipes/sweep.sh NAME OVERRIDES [NAME OVERRIDES ...]" >&2
    exit 2
fi
names=()
while [ $# -gt 0 ]; do
    name=$1 overrides=$2
    shift 2
    # shellcheck disable=SC2086  # the overrides are words: --set key=value ...
    "$mtkit" train "$BASE" --run-dir "$WORK/$name" --threads "$THREADS" \
        --set train.max_time="$BUDGET" $overrides
    names+=("$name")
done

python3 - "$WORK" "${names[@]}" <<'EOF'
import json, statistics, sys
from pathlib import Path

work, names = Path(sys.argv[1]), sys.argv[2:]
print("| row | updates | tgt tok/s (mean logged) | dev BLEU, last (greedy) | dev BLEU, best "
      "(greedy) | dev BLEU, average / EMA | model.pt | test BLEU | test chrF | "
      "test lines/s (beam) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in names:
    run = work / name
    events = [json.loads(line) for line in (run / "metrics.jsonl").open(encoding="utf-8")]
    train = [e for e in events if e["event"] == "train"]
    valid = [e for e in events if e["event"] == "valid"]
    stamp = json.loads((run / "model.stamp.json").read_text(encoding="utf-8"))
    candidates = stamp.get("dev_bleu", {})
    others = " / ".join(f"{candidates[k]:.2f}" if k in candidates else "-"
                        for k in ("average", "ema"))
    test = json.loads((run / "eval/scores.json").read_text(encoding="utf-8"))["results"][0]
    speed = f"{statistics.mean(e['tgt_tokens_per_s'] for e in train):,.0f}" if train else "-"
    print(f"| {name} | {valid[-1]['step']:,} | {speed} | {valid[-1]['bleu']:.2f} | "
          f"{max(e['bleu'] for e in valid):.2f} | {others} | {stamp.get('chosen', '')} | "
          f"{test['scores']['BLEU']['score']:.2f} | {test['scores']['chrF2']['score']:.2f} | "
          f"{test['lines'] / test['seconds']:.1f} |")
EOF
