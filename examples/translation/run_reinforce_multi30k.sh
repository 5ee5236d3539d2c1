#!/usr/bin/env bash
# REINFORCE fine-tuning (GLEU reward, learned baseline, lambda = 0.005) of a
# CE checkpoint from run_multi30k.sh, then greedy decoding of val and
# test2016.  Run from the project root with the project's environment active:
#   source .venv/bin/activate && bash examples/translation/run_reinforce_multi30k.sh
# Settings: K (0 = full softmax; use the CE run's K), DATA, CANDS, CE (the CE
# checkpoint), SAVE, EPOCHS, THREADS, BASELINE (learned, loo, self-critical,
# none), SAMPLES (per input; loo needs >= 2), REWARD (gleu, gleu_bp, bleu, chrf,
# constant), TEMP (sampling temperature), LAMBDA (the CE weight; 1 = CE alone
# with the same optimizer: the control), LS (label smoothing of the CE term;
# default 0, the paper's; 0.1 continues a label-smoothed CE run's objective), OPTIMIZER (sgd, the paper's, or adam:
# fairseq's defaults, no schedule), LR, SEED, DEVICE (cpu or cuda), EXTRA
# (more fairseq-train flags; for a budget use --max-update or EPOCHS, not
# --stop-time-hours: fairseq counts the CE checkpoint's training time, restored
# by --finetune-from-model, towards it),
# SRC and TGT (the languages), ARCH_ARGS (the CE run's model flags; default the paper's LSTM; for the
# model of run_transformer_multi30k.sh:
# ARCH_ARGS="$(cat examples/translation/transformer_multi30k.args)").
set -euo pipefail
K=${K:-500}
DATA=${DATA:-data-bin/multi30k.en-de}
CANDS=${CANDS:-checkpoints/vp-multi30k.en-de/candidates}
CE=${CE:-checkpoints/mt-multi30k.en-de.k$K/checkpoint_best.pt}
SAVE=${SAVE:-checkpoints/rl-multi30k.en-de.k$K}
EPOCHS=${EPOCHS:-3}
THREADS=${THREADS:-2}
BASELINE=${BASELINE:-learned}
OPTIMIZER=${OPTIMIZER:-sgd}
LR=${LR:-0.01}
SAMPLES=${SAMPLES:-1}
REWARD=${REWARD:-gleu}
TEMP=${TEMP:-1.0}
LAMBDA=${LAMBDA:-0.005}
LS=${LS:-0}
SEED=${SEED:-1}
DEVICE=${DEVICE:-cpu}
SRC=${SRC:-en}
TGT=${TGT:-de}
EXTRA=${EXTRA:-}
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
ARCH_ARGS=${ARCH_ARGS:---arch lstm_smallvocab}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

mkdir -p "$SAVE"
start=$(date +%s)
fairseq-train "$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s "$SRC" -t "$TGT" \
  --candidates-dir "$CANDS" --small-vocab-size "$K" \
  $ARCH_ARGS --criterion smallvocab_reinforce --ce-weight "$LAMBDA" --label-smoothing "$LS" --rl-baseline "$BASELINE" \
  --rl-samples "$SAMPLES" --reward "$REWARD" --sample-temperature "$TEMP" \
  --max-sample-len 100 --sample-len-ratio 1.5 --finetune-from-model "$CE" \
  --optimizer "$OPTIMIZER" --lr "$LR" --clip-norm 1.0 --batch-size 128 \
  --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
  --best-checkpoint-metric bleu --maximize-best-checkpoint-metric \
  --max-epoch "$EPOCHS" --save-dir "$SAVE" --no-epoch-checkpoints $EXTRA \
  $DEV_ARGS --num-workers 0 --seed "$SEED" --no-progress-bar --log-format simple --log-interval 50 \
  2>&1 | tee -a "$SAVE/train.log" | grep -E "valid on|done training"
echo "training wall time: $(( $(date +%s) - start )) s"

DATA=$DATA CANDS=$CANDS K=$K SAVE=$SAVE DEVICE=$DEVICE SRC=$SRC TGT=$TGT bash "$(dirname "$0")/decode_multi30k.sh"
