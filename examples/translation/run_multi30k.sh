#!/usr/bin/env bash
# CE training of the paper's translation model on Multi30k En-De (word level)
# with the paper's optimization, then greedy decoding of val and test2016.
# Run from the project root with the project's environment active, after
# examples/vocab_predictor/run_multi30k.sh (which exports the K=500 lists):
#   source .venv/bin/activate && bash examples/translation/run_multi30k.sh
# Settings: K (small vocabulary size, 0 = full softmax), DATA, CANDS, SAVE,
# EPOCHS, THREADS (torch CPU threads), DEVICE (cpu or cuda), SEED, EXTRA (more
# fairseq-train flags, e.g. "--stop-time-hours 0.1"; without
# --no-epoch-checkpoints in it, KEEP_EPOCHS=1 keeps checkpointN.pt of every
# epoch). Rerunning with a larger EPOCHS continues from SAVE/checkpoint_last.pt
# (the log is appended to).
set -euo pipefail
K=${K:-500}
DATA=${DATA:-data-bin/multi30k.en-de}
CANDS=${CANDS:-checkpoints/vp-multi30k.en-de/candidates}
SAVE=${SAVE:-checkpoints/mt-multi30k.en-de.k$K}
EPOCHS=${EPOCHS:-15}
THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cpu}
SEED=${SEED:-1}
EXTRA=${EXTRA:-}
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
EPOCH_ARGS=$([ "${KEEP_EPOCHS:-0}" = 1 ] || echo --no-epoch-checkpoints)
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

mkdir -p "$SAVE"
start=$(date +%s)
fairseq-train "$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de \
  --candidates-dir "$CANDS" --small-vocab-size "$K" \
  --arch lstm_smallvocab --criterion cross_entropy \
  --optimizer sgd --momentum 0.75 --lr 1.0 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 \
  --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0 \
  --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric \
  --max-epoch "$EPOCHS" --save-dir "$SAVE" $EPOCH_ARGS $EXTRA \
  $DEV_ARGS --num-workers 0 --seed "$SEED" --no-progress-bar --log-format simple --log-interval 100 \
  2>&1 | tee -a "$SAVE/train.log" | grep -E "valid on|done training"
echo "training wall time: $(( $(date +%s) - start )) s"

DATA=$DATA CANDS=$CANDS K=$K SAVE=$SAVE DEVICE=$DEVICE bash "$(dirname "$0")/decode_multi30k.sh"
