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
# time budget), SCHEDULE and AVERAGE:
#   SCHEDULE=inverse_sqrt (the default): LR warmed up for WARMUP updates, then falling as 1/sqrt(update); the
#     checkpoint of best dev BLEU is decoded.
#   SCHEDULE=anneal: a converged start for fine-tuning: LR warmed up, then falling linearly to 0 at the end of
#     epoch EPOCHS (polynomial_decay, sized by scripts/updates_per_epoch.py), the last AVERAGE (default 5) epoch
#     checkpoints averaged into SAVE/checkpoint_avg.pt (scripts/average_checkpoints.py), which is decoded.
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
SCHEDULE=${SCHEDULE:-inverse_sqrt}
AVERAGE=${AVERAGE:-5}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac

TASK=(--user-dir fairseq_smallvocab --task translation_smallvocab -s "$SRC" -t "$TGT" --candidates-dir "$CANDS"
      --small-vocab-size "$K" $ARCH_ARGS --max-tokens 4096 --seed "$SEED")
case $SCHEDULE in
  inverse_sqrt) SCHEDULE_ARGS=(--lr-scheduler inverse_sqrt --no-epoch-checkpoints) ;;
  anneal)
    # (fairseq's loading lines hidden; an error is shown whole)
    said=$(mktemp)
    if ! PER_EPOCH=$(python scripts/updates_per_epoch.py "$DATA" "${TASK[@]}" 2> "$said"); then
      cat "$said" >&2
      rm -f "$said"
      exit 2
    fi
    rm -f "$said"
    UPDATES=$(( EPOCHS * PER_EPOCH ))
    SCHEDULE_ARGS=(--lr-scheduler polynomial_decay --total-num-update "$UPDATES" --end-learning-rate 0
                   --keep-last-epochs "$AVERAGE") ;;
  *) echo "SCHEDULE=$SCHEDULE: inverse_sqrt or anneal" >&2; exit 2 ;;
esac

mkdir -p "$SAVE"
start=$(date +%s)
fairseq-train "$DATA" "${TASK[@]}" \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$LR" "${SCHEDULE_ARGS[@]}" \
  --warmup-updates "$WARMUP" --clip-norm 1.0 \
  --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric \
  --max-epoch "$EPOCHS" --save-dir "$SAVE" \
  $DEV_ARGS --num-workers 0 --no-progress-bar --log-format simple --log-interval 50 $EXTRA \
  2>&1 | tee -a "$SAVE/train.log" | grep -E "valid on|done training"
echo "training wall time: $(( $(date +%s) - start )) s"

CKPT=$SAVE/checkpoint_best.pt
if [ "$SCHEDULE" = anneal ]; then
  CKPT=$SAVE/checkpoint_avg.pt
  python scripts/average_checkpoints.py --inputs "$SAVE" --num-epoch-checkpoints "$AVERAGE" --output "$CKPT"
fi
DATA=$DATA CANDS=$CANDS K=$K SAVE=$SAVE CKPT=$CKPT DEVICE=$DEVICE SRC=$SRC TGT=$TGT \
  bash "$(dirname "$0")/decode_multi30k.sh"
