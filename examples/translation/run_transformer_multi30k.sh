#!/usr/bin/env bash
# CE training of a small stock fairseq Transformer on Multi30k En-De (word
# level) with the small vocabulary (K = 500; K=0: the full softmax, the same
# model), then greedy decoding of val and test2016 inside the same candidates.
# The model is fairseq's own `transformer` arch: translation_smallvocab
# restricts its output layer to each sentence's candidates (its checkpoints
# keep the stock keys and decode with --task translation too).  The model's
# flags (d = 256, 3 + 3 layers, 4 heads) are in transformer_multi30k.args.
# Run from the project root with the project's environment active, after
# examples/vocab_predictor/run_multi30k.sh (which exports the K=500 lists):
#   source .venv/bin/activate && bash examples/translation/run_transformer_multi30k.sh
# Settings: K, DATA, CANDS, SAVE, EPOCHS, THREADS, DEVICE (cpu or cuda), LR, WARMUP, SEED, SRC and TGT (the
# languages), ARCH_ARGS (the model's flags; default: transformer_multi30k.args), EXTRA
# (more fairseq-train flags, e.g. EXTRA="--stop-time-hours 0.3" for a fixed
# time budget).
set -euo pipefail
K=${K:-500}
DATA=${DATA:-data-bin/multi30k.en-de}
CANDS=${CANDS:-checkpoints/vp-multi30k.en-de/candidates}
SAVE=${SAVE:-checkpoints/transformer-multi30k.en-de.k$K}
EPOCHS=${EPOCHS:-20}
THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cpu}
LR=${LR:-0.001}
WARMUP=${WARMUP:-400}
SEED=${SEED:-1}
SRC=${SRC:-en}
TGT=${TGT:-de}
ARCH_ARGS=${ARCH_ARGS:-$(cat "$(dirname "$0")/transformer_multi30k.args")}
EXTRA=${EXTRA:-}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac

mkdir -p "$SAVE"
start=$(date +%s)
fairseq-train "$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s "$SRC" -t "$TGT" \
  --candidates-dir "$CANDS" --small-vocab-size "$K" \
  $ARCH_ARGS \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$LR" --lr-scheduler inverse_sqrt \
  --warmup-updates "$WARMUP" --clip-norm 1.0 --max-tokens 4096 \
  --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric \
  --max-epoch "$EPOCHS" --save-dir "$SAVE" --no-epoch-checkpoints \
  $DEV_ARGS --num-workers 0 --seed "$SEED" --no-progress-bar --log-format simple --log-interval 50 $EXTRA \
  2>&1 | tee -a "$SAVE/train.log" | grep -E "valid on|done training"
echo "training wall time: $(( $(date +%s) - start )) s"

DATA=$DATA CANDS=$CANDS K=$K SAVE=$SAVE DEVICE=$DEVICE SRC=$SRC TGT=$TGT bash "$(dirname "$0")/decode_multi30k.sh"
