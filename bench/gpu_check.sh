#!/usr/bin/env bash
# The GPU checks, in one script of under 10 minutes on one H200 (more GPUs: the same).
#
#   1. bf16 training speed and MFU of a larger shape (d_model 512, 6+6 layers), against
#      the bf16 matmul peak measured in the same run (bench/train.py --device cuda);
#   2. the Bible recipe with that shape in bf16 under torchrun, one rank per GPU (NCCL
#      where there are 2 or more; with one GPU torchrun runs one rank, no process group),
#      for TRAIN_SECONDS: the log's tokens/s and loss, falling;
#   3. beam-5 decoding of the test set on CUDA with the model of step 2: mtkit against
#      CTranslate2 on the same weights exported as float32 (skipped where ctranslate2 is
#      not installed), sentences/s from each one's summary line.
#
# Run from the repository root; needs python3 with torch (CUDA build), sentencepiece,
# sacrebleu, typer, pyyaml, tqdm and numpy; mtkit runs from the checkout (PYTHONPATH):
#
#   bash bench/gpu_check.sh [OUT_DIR]    # the Bible corpus shipped in recipes/data/
#   MTKIT_BIBLE_DATA=path/to/bible-es-en bash bench/gpu_check.sh [OUT_DIR]
#
# To check the script itself on a CPU, tiny: GPU_CHECK_DEVICE=cpu TRAIN_SECONDS=10
# BENCH_STEPS=2 VOCAB=300 MTKIT_BIBLE_DATA=tests/data bash bench/gpu_check.sh /tmp/gc
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${1:-gpu-check}
# the shipped corpus unpacked by bench/common.py, unless MTKIT_BIBLE_DATA names another
DATA=$(realpath "${MTKIT_BIBLE_DATA:-$($PY -c 'import sys; sys.path.insert(0, "bench"); import common; print(common.BIBLE)')}")
export MTKIT_BIBLE_DATA=$DATA
DEVICE=${GPU_CHECK_DEVICE:-cuda}
TRAIN_SECONDS=${TRAIN_SECONDS:-150}
BENCH_STEPS=${BENCH_STEPS:-60}
VOCAB=${VOCAB:-8000}
mkdir -p "$OUT"

if [ "$DEVICE" = cuda ]; then
  GPUS=$($PY -c 'import torch; print(torch.cuda.device_count())')
  if [ "$GPUS" = 0 ]; then
    echo "gpu_check: no CUDA device here (torch.cuda.device_count() is 0)" >&2
    exit 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  PRECISION=bf16 MAX_TOKENS=16384
else
  GPUS=1 PRECISION=fp32 MAX_TOKENS=2000
fi
$PY -c 'import torch; print("torch", torch.__version__)' | tee -a "$OUT/gpu.txt"

echo "=== 1. training speed and MFU (bench/train.py)"
$PY bench/train.py --device "$DEVICE" --shape large --precision "$PRECISION" \
  --max-tokens "$MAX_TOKENS" --vocab "$VOCAB" --steps "$BENCH_STEPS" --warmup 5 | tee "$OUT/train_bench.jsonl"

echo "=== 2. the Bible recipe, larger model, $PRECISION, torchrun on $GPUS rank(s)"
cat > "$OUT/gpu.yaml" <<EOF
data:
  langs: {src: es, tgt: en}
  train: {src: $DATA/train.es, tgt: $DATA/train.en}
  valid: {src: $DATA/dev.es, tgt: $DATA/dev.en}
  test:
    - {src: $DATA/test.es, tgt: $DATA/test.en}
tokenizer: {vocab_size: $VOCAB, joint: true}
model: {enc_layers: 6, dec_layers: 6, d_model: 512, heads: 8, ffn_dim: 2048, dropout: 0.1,
        norm: pre, tie_embeddings: all}
train:
  max_tokens: $MAX_TOKENS
  precision: $PRECISION
  lr: 0.001
  warmup_steps: 200
  max_time: $TRAIN_SECONDS
  log_every: 20
  valid_every: 200
  save_every: 100
  valid_bleu_lines: 200
  average: last-3
decode: {beam: 5}
EOF
$PY -m torch.distributed.run --standalone --nproc_per_node="$GPUS" -m mtkit \
  train "$OUT/gpu.yaml" --run-dir "$OUT/run" --device "$DEVICE" 2>&1 | tee "$OUT/train.log"
echo "first and last logged updates:"
{ grep -E "\| step [0-9]+ \|" "$OUT/train.log" || echo "(none logged: a very short run)"; } | sed -n '1p;$p'

echo "=== 3. beam-5 decoding of the test set on $DEVICE: mtkit, then CTranslate2"
MODEL=$OUT/run/model.pt
$PY -m mtkit translate -m "$MODEL" --device "$DEVICE" --beam 5 --input "$DATA/test.es" \
  --output "$OUT/test.mtkit.en" 2>&1 | tee "$OUT/decode.log"
if $PY -c 'import ctranslate2' 2>/dev/null; then
  $PY -m mtkit export -m "$MODEL" -o "$OUT/ct2" --quantize float32 --force
  $PY -m mtkit translate -m "$OUT/ct2" --device "$DEVICE" --beam 5 --input "$DATA/test.es" \
    --output "$OUT/test.ct2.en" 2>&1 | tee -a "$OUT/decode.log"
else
  echo "CTranslate2: skipped, the ctranslate2 package is not installed" | tee -a "$OUT/decode.log"
fi
for hyp in "$OUT"/test.*.en; do
  echo "$hyp: $($PY -m mtkit score -r "$DATA/test.en" -i "$hyp" --metrics bleu)"
done | tee -a "$OUT/decode.log"
