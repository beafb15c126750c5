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

# DATA holds SPLIT.LANG for train, dev and test (plain or .gz), or bible.SPLIT.LANG.gz as
# the shipped corpus does
DATA=${DATA:-recipes/data}
BASE=${BASE:-recipes/cpu-30m.yaml}     # model, training and decoding settings
WORK=${WORK:-runs/backtranslation}         # everything the script writes
REAL=${REAL:-14000}                        # training pairs used as the parallel data
BT_WEIGHT=${BT_WEIGHT:-1}                  # how often a synthetic pair is sampled an epoch
mtkit=${MTKIT:-mtkit}

if [ ! -d "$DATA" ]; then
    echo "backtranslate.sh: DATA=$DATA is not a directory; set DATA to the corpus's" >&2
    echo "  directory (train, dev and test .es/.en files), e.g. DATA=recipes/data" >&2
    exit 2
fi
mkdir -p "$WORK"
DATA=$(cd "$DATA" && pwd) WORK=$(cd "$WORK" && pwd)

# corpus_file SPLIT LANG: the file of DATA that holds that split and side
corpus_file() {
    local f
    for f in "$DATA/$1.$2" "$DATA/$1.$2.gz" "$DATA/bible.$1.$2.gz"; do
        if [ -f "$f" ]; then echo "$f"; return; fi
    done
    echo "backtranslate.sh: $DATA has no $1.$2 (nor $1.$2.gz, bible.$1.$2.gz)" >&2
    exit 2
}
# the training text unpacked whole (head on a pipe would end zcat early, which pipefail
# counts as a failure)
zcat -f "$(corpus_file train es)" > "$WORK/train.es"
zcat -f "$(corpus_file train en)" > "$WORK/train.en"
head -n "$REAL" "$WORK/train.es" > "$WORK/real.es"
head -n "$REAL" "$WORK/train.en" > "$WORK/real.en"
tail -n +"$((REAL + 1))" "$WORK/train.en" > "$WORK/mono.en"

# train RUN SRC TGT CORPORA [ARGS...]: BASE's settings on the corpora given as a YAML list
train() {
    local run=$1 src=$2 tgt=$3 corpora=$4
    shift 4
    "$mtkit" train "$BASE" --run-dir "$WORK/$run" \
        --set data.langs.src="$src" --set data.langs.tgt="$tgt" \
        --set "data.train=$corpora" \
        --set data.valid.src="$(corpus_file dev "$src")" \
        --set data.valid.tgt="$(corpus_file dev "$tgt")" \
        --set data.test.src="$(corpus_file test "$src")" \
        --set data.test.tgt="$(corpus_file test "$tgt")" "$@"
}

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

# the test scores of both (eval/scores.json, written by each run's eval stage)
for run in es-en "es-en-bt$named"; do
    python3 - "$WORK/$run/eval/scores.json" "$run" <<'EOF'
import json, sys
for result in json.load(open(sys.argv[1]))["results"]:
    scores = ", ".join(f"{k} {v['score']:.2f}" for k, v in result["scores"].items())
    print(f"{sys.argv[2]}: {result['src'].rsplit('/', 1)[-1]}: {scores}")
EOF
done
