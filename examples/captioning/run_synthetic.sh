#!/usr/bin/env bash
# Captioning on the synthetic set with the small vocabulary (K = 500) or the full
# softmax (K=0): CE training, greedy decoding of test, one or more epochs of
# REINFORCE from the best CE checkpoint, decoding again. Multi-reference BLEU (each
# image against its 5 captions) on valid during training and on test after it.
# Run after prepare_synthetic.sh, from the project root, environment active:
#   source .venv/bin/activate && K=500 bash examples/captioning/run_synthetic.sh
# Settings: K, DATA, CANDS, SAVE (a folder; ce/ and rl/ inside), EPOCHS (CE),
# RL_EPOCHS, LR_RL, THREADS.
set -euo pipefail
K=${K:-500}
DATA=${DATA:-data-bin/captions}
CANDS=${CANDS:-checkpoints/vp-captions/candidates}
SAVE=${SAVE:-checkpoints/cap-synthetic.k$K}
EPOCHS=${EPOCHS:-10}
RL_EPOCHS=${RL_EPOCHS:-1}
LR_RL=${LR_RL:-0.1}
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
COMMON=(--user-dir fairseq_smallvocab --task captioning_smallvocab --candidates-dir "$CANDS"
        --small-vocab-size "$K" --one-caption-per-image)
TRAIN=(--arch lstm_caption_smallvocab --batch-size 128 --clip-norm 1.0
       --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_b": 50}'
       --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --no-epoch-checkpoints
       --cpu --num-workers 0 --seed 1 --no-progress-bar --log-format simple --log-interval 100)

decode() {  # $1: the checkpoint folder
  fairseq-generate "$DATA" "${COMMON[@]}" --path "$1/checkpoint_best.pt" --gen-subset test \
    --beam 1 --max-len-b 50 --batch-size 128 --cpu > "$1/generate-test.txt" 2> "$1/generate-test.log"
  echo "test ($1): $(python scripts/caption_bleu.py --data "$DATA" --split test "$1/generate-test.txt")"
}

mkdir -p "$SAVE/ce" "$SAVE/rl"
start=$(date +%s)
fairseq-train "$DATA" "${COMMON[@]}" "${TRAIN[@]}" --criterion cross_entropy \
  --optimizer sgd --momentum 0.75 --lr 1.0 --weight-decay 1e-6 \
  --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0 \
  --max-epoch "$EPOCHS" --save-dir "$SAVE/ce" 2>&1 | tee -a "$SAVE/ce/train.log" | grep -E "valid on|done training"
echo "CE training wall time: $(( $(date +%s) - start )) s"
decode "$SAVE/ce"

start=$(date +%s)
fairseq-train "$DATA" "${COMMON[@]}" "${TRAIN[@]}" --criterion smallvocab_reinforce --ce-weight 0.005 \
  --rl-baseline learned --max-sample-len 50 --finetune-from-model "$SAVE/ce/checkpoint_best.pt" \
  --optimizer sgd --lr "$LR_RL" --max-epoch "$RL_EPOCHS" --save-dir "$SAVE/rl" 2>&1 \
  | tee -a "$SAVE/rl/train.log" | grep -E "valid on|done training"
echo "REINFORCE training wall time: $(( $(date +%s) - start )) s"
decode "$SAVE/rl"
