# What the worked scripts (backtranslate.sh, dual-filter.sh) share, sourced by them after
# they set SCRIPT (their name, for messages), DATA, BASE, WORK and mtkit: the corpus's
# files by split and side, a training run with BASE's settings, and the runs' scores.

# DATA holds SPLIT.LANG for train, dev and test (plain or .gz), or bible.SPLIT.LANG.gz as
# the shipped corpus does
if [ ! -d "$DATA" ]; then
    echo "$SCRIPT: DATA=$DATA is not a directory; set DATA to the corpus's" >&2
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
    echo "$SCRIPT: $DATA has no $1.$2 (nor $1.$2.gz, bible.$1.$2.gz)" >&2
    exit 2
}

# the training text unpacked whole into WORK/train.es and train.en (head on a pipe would
# end zcat early, which pipefail counts as a failure)
zcat -f "$(corpus_file train es)" > "$WORK/train.es"
zcat -f "$(corpus_file train en)" > "$WORK/train.en"

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

# print_scores RUN...: each run's test scores (eval/scores.json, from its eval stage)
print_scores() {
    local run
    for run in "$@"; do
        python3 - "$WORK/$run/eval/scores.json" "$run" <<'PYTHON'
import json, sys
for result in json.load(open(sys.argv[1]))["results"]:
    scores = ", ".join(f"{k} {v['score']:.2f}" for k, v in result["scores"].items())
    print(f"{sys.argv[2]}: {result['src'].rsplit('/', 1)[-1]}: {scores}")
PYTHON
    done
}
