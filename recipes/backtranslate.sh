#!/usr/bin/env bash
# Tagged back-translation (Caswell et al. 2019, "Tagged Back-Translation") on the Bible
# data, as a script to copy. English text without a Spanish side is turned into
# synthetic Spanish by a reverse (en->es) model; es->en then trains on the real pairs
# plus the synthetic ones, whose source lines carry the tag <BT>.
#
# The Bible corpus has no extra English, so the script simulates it: the first REAL
# training pairs are the parallel data and the English of the rest is the monolingual
# text. It trains three models, each with BASE's settings (recipes/cpu-30m.yaml: 30
# minutes each on a 2-core CPU): en->es, es->en on the real pairs alone (the baseline),
# and es->en on real + tagged synthetic pairs; then prints the test scores of both.
#
#   bash recipes/backtranslate.sh            # from the checkout: the Bible data in recipes/data/
#   DATA=corpus WORK=runs/bt-x REAL=100000 bash recipes/backtranslate.sh
#   bash recipes/backtranslate.sh --sampling topk:10   # then the same with sampling
#
# The synthetic Spanish comes from beam search (the reverse model's decode settings), or,
# with --sampling RULE (full, topk:K or topp:P; `mtkit translate --sampling`), is drawn at
# random (Edunov et al. 2018, "Understanding Back-Translation at Scale": sampling beats
# beam with much data, beam wins with little); --seed N chooses the samples (default 0).
# Each way of decoding has its own synthetic file and run (synthetic.es and es-en-bt for
# beam, synthetic-topk10-seed0.es and es-en-bt-topk10-seed0 for the line above), so both
# live in one WORK beside the reverse model and the baseline, which a second call reuses.
# Other arguments go to every `mtkit train`, e.g. --set train.max_time=10m.
set -euo pipefail

SAMPLING=${SAMPLING:-none}  # or the --sampling argument
SEED=${SEED:-0}             # or the --seed argument
train_args=()
while [ $# -gt 0 ]; do
    case $1 in
        --sampling|--seed)
            if [ $# -lt 2 ]; then
                echo "backtranslate.sh: $1 needs a value (e.g. --sampling topk:10)" >&2
                exit 2
            fi
            if [ "$1" = --sampling ]; then SAMPLING=$2; else SEED=$2; fi
            shift 2 ;;
        --sampling=*) SAMPLING=${1#*=}; shift ;;
        --seed=*) SEED=${1#*=}; shift ;;
        *) train_args+=("$1"); shift ;;
    esac
done
set -- ${train_args[@]+"${train_args[@]}"}

SCRIPT=backtranslate.sh
DATA=${DATA:-recipes/data}                 # the corpus (see recipes/corpus-runs.sh)
BASE=${BASE:-recipes/cpu-30m.yaml}         # model, training and decoding settings
WORK=${WORK:-runs/backtranslation}         # everything the script writes
REAL=${REAL:-14000}                        # training pairs used as the parallel data
BT_WEIGHT=${BT_WEIGHT:-1}                  # how often a synthetic pair is sampled an epoch
mtkit=${MTKIT:-mtkit}
source "$(dirname "${BASH_SOURCE[0]}")/corpus-runs.sh"

head -n "$REAL" "$WORK/train.es" > "$WORK/real.es"
head -n "$REAL" "$WORK/train.en" > "$WORK/real.en"
tail -n +"$((REAL + 1))" "$WORK/train.en" > "$WORK/mono.en"

# 1. the reverse model, en->es, on the real pairs
train en-es en es "[{src: $WORK/real.en, tgt: $WORK/real.es}]" "$@"

# 2. synthetic Spanish for the monolingual English: beam search (as the paper's tagged
# runs), or samples; made again when the reverse model changes
decode=(--sampling "$SAMPLING" --seed "$SEED")
named=""  # beam: synthetic.es, es-en-bt; sampling: the rule and seed in both names
if [ "$SAMPLING" != none ]; then named="-${SAMPLING//[:.]/}-seed$SEED"; fi
synthetic=$WORK/synthetic$named.es
if [ ! -s "$synthetic" ] || [ "$WORK/en-es/model.pt" -nt "$synthetic" ]; then
    "$mtkit" translate -m "$WORK/en-es/model.pt" --input "$WORK/mono.en" \
        --output "$synthetic" "${decode[@]}"
fi

# 3. es->en: the baseline on the real pairs, and real + tagged synthetic pairs
train es-en es en "[{src: $WORK/real.es, tgt: $WORK/real.en}]" "$@"
train "es-en-bt$named" es en "[{src: $WORK/real.es, tgt: $WORK/real.en},
  {src: $synthetic, tgt: $WORK/mono.en, tag: BT, weight: $BT_WEIGHT}]" "$@"

print_scores es-en "es-en-bt$named"
