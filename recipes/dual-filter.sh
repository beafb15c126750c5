#!/usr/bin/env bash
# Filtering a noisy parallel corpus by dual conditional cross-entropy (Junczys-Dowmunt
# 2018), as a script to copy: two models trained on a clean part of the data, one per
# direction, score every pair of the noisy part with `mtkit score-pairs`; a pair both
# find likely, and equally so, is kept (recipes/dual_filter.py says how it is scored).
#
# The Bible corpus is clean, so the script makes the noise, and knows it: the first CLEAN
# training pairs are the clean part; of the rest, a NOISE share is corrupted (a third each:
# another verse's translation, the source copied, the translation cut to a third). It
# trains four models with BASE's settings: es->en and en->es on the clean part (the
# scorers), then es->en on everything (clean + noisy) and on clean + the KEEP share of the
# noisy part that scored best; prints how much of the noise the filter removed and the test
# scores of both.
#
#   bash recipes/dual-filter.sh                          # the Bible data in recipes/data/
#   bash recipes/dual-filter.sh --set train.max_time=10m # arguments go to every mtkit train
#   DATA=corpus WORK=runs/filter-x CLEAN=100000 bash recipes/dual-filter.sh
set -euo pipefail

SCRIPT=dual-filter.sh
DATA=${DATA:-recipes/data}                 # the corpus (see recipes/corpus-runs.sh)
BASE=${BASE:-recipes/cpu-30m.yaml}         # model, training and decoding settings
WORK=${WORK:-runs/filtering}               # everything the script writes
CLEAN=${CLEAN:-8000}                       # training pairs taken as the clean part
NOISE=${NOISE:-0.3}                        # the share of the other pairs corrupted
KEEP=${KEEP:-0.7}                          # the share of the noisy part the filter keeps
SEED=${SEED:-0}                            # which pairs are corrupted, and how
mtkit=${MTKIT:-mtkit}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/corpus-runs.sh"

head -n "$CLEAN" "$WORK/train.es" > "$WORK/clean.es"
head -n "$CLEAN" "$WORK/train.en" > "$WORK/clean.en"
tail -n +"$((CLEAN + 1))" "$WORK/train.es" > "$WORK/rest.es"
tail -n +"$((CLEAN + 1))" "$WORK/train.en" > "$WORK/rest.en"
python3 "$here/dual_filter.py" corrupt "$WORK/rest.es" "$WORK/rest.en" "$WORK/noisy" \
    --share "$NOISE" --seed "$SEED"

# 1. the scorers, one per direction, on the clean part
train es-en-clean es en "[{src: $WORK/clean.es, tgt: $WORK/clean.en}]" "$@"
train en-es-clean en es "[{src: $WORK/clean.en, tgt: $WORK/clean.es}]" "$@"

# 2. every noisy pair scored both ways, the best KEEP share kept
"$mtkit" score-pairs --skip-long -m "$WORK/es-en-clean/model.pt" --src "$WORK/noisy.src" \
    --tgt "$WORK/noisy.tgt" > "$WORK/forward.scores"
"$mtkit" score-pairs --skip-long -m "$WORK/en-es-clean/model.pt" --src "$WORK/noisy.tgt" \
    --tgt "$WORK/noisy.src" > "$WORK/backward.scores"
python3 "$here/dual_filter.py" select "$WORK/noisy.src" "$WORK/noisy.tgt" \
    "$WORK/forward.scores" "$WORK/backward.scores" "$WORK/filtered" --keep "$KEEP" \
    --noise "$WORK/noisy.noise"

# 3. es->en on everything, and on the clean part + the kept pairs
train es-en-all es en "[{src: $WORK/clean.es, tgt: $WORK/clean.en},
  {src: $WORK/noisy.src, tgt: $WORK/noisy.tgt}]" "$@"
train es-en-filtered es en "[{src: $WORK/clean.es, tgt: $WORK/clean.en},
  {src: $WORK/filtered.src, tgt: $WORK/filtered.tgt}]" "$@"

print_scores es-en-all es-en-filtered
