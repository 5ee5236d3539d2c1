#!/usr/bin/env bash
# The project's demo on data it generates itself (run by `make demo`, with the
# project's .venv first on PATH). Settings through the environment:
#   DEMO_DIR (default demo), DEMO_VOCAB (target vocabulary, default 24000),
#   DEMO_TRAIN (training sentences, default 50000),
#   DEMO_VP_EPOCHS (vocabulary-predictor epochs, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_VOCAB=${DEMO_VOCAB:-24000}
DEMO_TRAIN=${DEMO_TRAIN:-50000}
DEMO_VP_EPOCHS=${DEMO_VP_EPOCHS:-3}
step() { printf '\n== %s\n' "$*"; }

step "1/3 generating the synthetic corpus (|V_tgt| = $DEMO_VOCAB, $DEMO_TRAIN training sentences) into $DEMO_DIR/raw"
python scripts/make_synthetic_corpus.py --out "$DEMO_DIR/raw" --force \
  --tgt-vocab-size "$DEMO_VOCAB" --train-size "$DEMO_TRAIN"

step "2/3 binarizing with fairseq-preprocess into $DEMO_DIR/data-bin (every word kept)"
python scripts/prepare_data.py --raw-dir "$DEMO_DIR/raw" --src src --tgt tgt \
  --dest "$DEMO_DIR/data-bin" --min-count 1 --workers 2 --force

# the paper's rule for the size of the small vocabulary (K = 1000 above 10K words, else
# 500), capped by the dictionary: its words plus fairseq's 4 special symbols
V=$(( $(wc -l < "$DEMO_DIR/data-bin/dict.tgt.txt") + 4 ))
K=$(( DEMO_VOCAB > 10000 ? 1000 : 500 ))
K=$(( K < V ? K : V ))

step "3/3 training the vocabulary predictor ($DEMO_VP_EPOCHS epochs, K = $K) into $DEMO_DIR/predictor"
rm -rf "$DEMO_DIR/predictor"
fairseq-train "$DEMO_DIR/data-bin" --user-dir fairseq_smallvocab \
  --task vocab_prediction --arch vocab_predictor --criterion vocab_prediction_bce \
  --recall-at "$K" --optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 \
  --batch-size 128 --max-epoch "$DEMO_VP_EPOCHS" --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 \
  --best-checkpoint-metric "recall@$K" --maximize-best-checkpoint-metric \
  --save-dir "$DEMO_DIR/predictor" --no-epoch-checkpoints --cpu --num-workers 0 --seed 1 \
  --no-progress-bar --log-format simple --log-interval 100 2>&1 \
  | grep --line-buffered -E "\| (train_inner|valid) \|" | sed -u -E 's/^.*\| (train_inner|valid) \|/  \1 |/'
python scripts/recall_curve.py --run "predictor=$DEMO_DIR/predictor/checkpoint_best.pt" --split valid \
  --ks "100,$((K / 2)),$K,$((2 * K))" --png "$DEMO_DIR/recall.png" 2>/dev/null

step "done: the corpus in $DEMO_DIR/data-bin, the predictor in $DEMO_DIR/predictor (recall@K above, plot $DEMO_DIR/recall.png)"
