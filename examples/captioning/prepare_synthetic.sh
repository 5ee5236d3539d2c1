#!/usr/bin/env bash
# The synthetic captioning set (scripts/make_synthetic_captions.py: 10,000 training
# images with 5 captions each, 4096-d features, about 5,500 caption words), binarized,
# and the vocabulary predictor trained on its features, with each split's K-candidate
# lists exported. Run from the project root with the project's environment active:
#   source .venv/bin/activate && bash examples/captioning/prepare_synthetic.sh
# Settings: RAW, DATA (an existing folder is used as it is: real features prepared with
# prepare_captions.py --kiros), VP (predictor folder), K (default 500: the paper's rule for
# |V| <= 10K), VP_EPOCHS, THREADS.
set -euo pipefail
RAW=${RAW:-data/captions-raw}
DATA=${DATA:-data-bin/captions}
VP=${VP:-checkpoints/vp-captions}
K=${K:-500}
VP_EPOCHS=${VP_EPOCHS:-5}
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

if [ ! -d "$DATA" ]; then  # an existing DATA (e.g. prepare_captions.py --kiros output) is used as it is
  [ -d "$RAW" ] || python scripts/make_synthetic_captions.py --out "$RAW"
  python scripts/prepare_captions.py --raw-dir "$RAW" --dest "$DATA" --workers "$THREADS" >/dev/null
fi

mkdir -p "$VP"
start=$(date +%s)
fairseq-train "$DATA" --user-dir fairseq_smallvocab --task vocab_prediction --source-features "$DATA" \
  --arch vocab_predictor --criterion vocab_prediction_bce --recall-at "100,200,$K,1000" \
  --optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 \
  --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --max-epoch "$VP_EPOCHS" \
  --best-checkpoint-metric "recall@$K" --maximize-best-checkpoint-metric \
  --save-dir "$VP" --no-epoch-checkpoints --cpu --num-workers 0 --seed 1 \
  --no-progress-bar --log-format simple --log-interval 100 2>&1 | tee "$VP/train.log" | grep -E "valid on|done training"
echo "predictor training wall time: $(( $(date +%s) - start )) s"
python scripts/export_candidates.py --predictor "$VP/checkpoint_best.pt" --data "$DATA" \
  --source-features "$DATA" --splits train valid test --k "$K" --out-dir "$VP/candidates"
python scripts/recall_curve.py --run "synthetic captions=$VP/checkpoint_best.pt" --split test \
  --ks "100,200,$K,1000" --png "$VP/recall.png" 2>/dev/null
