#!/usr/bin/env bash
# Train the vocabulary predictor on Multi30k En-De (word level) with the
# paper's settings, export K-candidate lists and draw the recall@K curve.
# Run from the project root with the project's environment active:
#   source .venv/bin/activate && bash examples/vocab_predictor/run_multi30k.sh
# Settings: DATA, SAVE, K (candidates to export), EPOCHS, PNG, DEVICE (cpu or cuda: where it trains).
set -euo pipefail
DATA=${DATA:-data-bin/multi30k.en-de}
SAVE=${SAVE:-checkpoints/vp-multi30k.en-de}
K=${K:-500}
EPOCHS=${EPOCHS:-20}
DEVICE=${DEVICE:-cpu}
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
PNG=${PNG:-docs/data/recall_multi30k_en_de.png}

[ -d "$DATA" ] || python scripts/prepare_multi30k.py --pairs en-de --out-dir "$(dirname "$DATA")"
# validate every half epoch: half the number of 128-sentence batches
HALF=$(python -c "import json, sys; n = json.load(open(sys.argv[1]))['splits']['train']['en']['sentences']; \
print(max(1, -(-n // 128) // 2))" "$DATA/stats.json")

mkdir -p "$(dirname "$SAVE")"
start=$(date +%s)
fairseq-train "$DATA" --user-dir fairseq_smallvocab \
  --task vocab_prediction --arch vocab_predictor --criterion vocab_prediction_bce \
  --recall-at 100,200,500,1000 --label-smoothing 0.1 \
  --optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 \
  --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 \
  --max-epoch "$EPOCHS" --validate-interval-updates "$HALF" --save-interval-updates "$HALF" --keep-interval-updates 1 \
  --best-checkpoint-metric recall@500 --maximize-best-checkpoint-metric \
  --save-dir "$SAVE" --no-epoch-checkpoints $DEV_ARGS --num-workers 0 --seed 1 \
  --no-progress-bar --log-format simple --log-interval 1000 2>&1 | tee "$SAVE.train.log" | grep -E "valid on|done"
echo "training wall time: $(( $(date +%s) - start )) s"

python scripts/export_candidates.py --predictor "$SAVE/checkpoint_best.pt" --splits train valid test \
  --k "$K" --out-dir "$SAVE/candidates"
python scripts/recall_curve.py --run "Multi30k En-De=$SAVE/checkpoint_best.pt" --split valid --png "$PNG" \
  --title "Vocabulary predictor, Multi30k En-De (val)"
