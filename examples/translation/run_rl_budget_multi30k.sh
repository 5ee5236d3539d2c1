#!/usr/bin/env bash
# RL against training longer, at equal wall-clock, on Multi30k (word level), every arm forked from one converged
# CE model of fairseq's own Transformer (transformer_multi30k.args):
#   1. The start: CE to convergence with the full softmax (run_transformer_multi30k.sh SCHEDULE=anneal: the LR
#      falling linearly to 0 over CE_EPOCHS epochs, the last AVERAGE (5) epoch checkpoints averaged): OUT/ce/checkpoint_avg.pt,
#      decoded as the arms decode (OUT/start-kK, for each K of ARMS, with each beam of BEAMS).
#   2. Each arm's seconds per update, measured once from that start on the training batches, the arms interleaved
#      (scripts/budget_probe.py, PROBE_UPDATES updates, 2 rounds: OUT/speed.json); BUDGET seconds at that pace are
#      the arm's updates, however slowly it then runs (runs side by side share the cores, not the budget).
#   3. Each arm in ARMS for each seed in SEEDS: fairseq-train from the start for its updates (Adam at LR, BATCH
#      sentences per update, the CE term label-smoothed by LS as the start was trained), greedy dev BLEU
#      POINTS times at equal spacing in seconds, the checkpoint of best dev BLEU kept: OUT/ARM-sSEED.
#   4. Each run's best checkpoint decoded on val and test2016 with each beam in BEAMS (1: greedy), a beam search at
#      the run's own length penalty, chosen on val (decode_multi30k.sh's LENPEN=dev).
#   5. scripts/rl_budget_report.py: OUT/table.md (every run's scores, seconds per update and updates; each arm
#      against CONTROL on test2016 beam 5, per seed and pooled over seeds, with a paired bootstrap) and
#      OUT/dev_bleu_seconds.png (greedy dev BLEU against the budget's seconds).
# ARMS: NAME-kK entries, K the candidates per sentence (0: the full softmax), NAME one of
#   ce      CE continued (--ce-weight 1: the CE term alone, with the same optimizer and batches)
#   rfN     REINFORCE over N samples per sentence, the leave-one-out baseline, CE weight RL_LAMBDA
#   riskN   risk over N samples per sentence (--rl-objective risk), CE weight RISK_LAMBDA, sharpness SHARPNESS
# RL_LAMBDA and RISK_LAMBDA weigh the CE term summed over a sentence's tokens against the sentence's RL term:
# RISK_LAMBDA 0.07 (1 / (1 + 13.5 tokens)) is Edunov et al.'s even mix of per-token CE and per-sentence risk.
# A stopped run resumes from its checkpoint_last.pt; a finished one (its decodes exist) is skipped; a run made under
# other settings (its OUT/ARM-sSEED/recipe.settings) is refused, and so, before anything runs, are bad ARMS, BUDGET,
# POINTS, PROBE_UPDATES or CONTROL and an OUT holding runs of another BUDGET (the report compares equal seconds).
# The start, the probe and every run record their settings and measured seconds.
# Run from the project root with the project's environment active, after examples/vocab_predictor/run_multi30k.sh
# (which exports the K=500 lists):
#   source .venv/bin/activate && bash examples/translation/run_rl_budget_multi30k.sh
# Settings: DATA, CANDS, OUT, SRC, TGT, CE_EPOCHS, AVERAGE, CE_EXTRA, ARMS, SEEDS, BUDGET (seconds per arm), POINTS, PROBE_UPDATES,
# LR, BATCH, LS, REWARD, RL_LAMBDA, RISK_LAMBDA, SHARPNESS, CONTROL (the arm the others are compared with), BEAMS,
# THREADS (per run), PARALLEL (runs at a time), DEVICE (cpu or cuda), ARCH_ARGS.
set -euo pipefail
DATA=${DATA:-data-bin/multi30k.en-de}
CANDS=${CANDS:-checkpoints/vp-multi30k.en-de/candidates}
OUT=${OUT:-checkpoints/rl-budget-multi30k.en-de}
SRC=${SRC:-en}
TGT=${TGT:-de}
CE_EPOCHS=${CE_EPOCHS:-30}
AVERAGE=${AVERAGE:-5}
CE_EXTRA=${CE_EXTRA:-}  # more fairseq-train flags for the start's CE run (e.g. --validate-interval 2)
ARMS=${ARMS:-ce-k500 rf4-k500 rf16-k500 risk16-k500}
SEEDS=${SEEDS:-1}
BUDGET=${BUDGET:-3600}
POINTS=${POINTS:-8}
PROBE_UPDATES=${PROBE_UPDATES:-6}
LR=${LR:-3e-5}
BATCH=${BATCH:-128}
LS=${LS:-0.1}
REWARD=${REWARD:-gleu_bp}
RL_LAMBDA=${RL_LAMBDA:-0.005}
RISK_LAMBDA=${RISK_LAMBDA:-0.07}
SHARPNESS=${SHARPNESS:-1}
CONTROL=${CONTROL:-ce-k500}
BEAMS=${BEAMS:-1 5}
THREADS=${THREADS:-1}
PARALLEL=${PARALLEL:-2}
DEVICE=${DEVICE:-cpu}
HERE=$(dirname "$0")
ARCH_ARGS=${ARCH_ARGS:-$(cat "$HERE/transformer_multi30k.args")}
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
START=$OUT/ce/checkpoint_avg.pt

arm_flags() {  # arm_flags NAME-kK: the arm's own flags, or nothing for a name that is no arm
  local name=${1%-k*} k=${1##*-k}
  [[ $1 == *-k* && $k =~ ^[0-9]+$ ]] || return 0
  case $name in
    ce) echo "--ce-weight 1 --small-vocab-size $k" ;;
    rf[0-9]*) echo "--rl-samples ${name#rf} --rl-baseline loo --ce-weight $RL_LAMBDA --small-vocab-size $k" ;;
    risk[0-9]*) echo "--rl-objective risk --rl-samples ${name#risk} --ce-weight $RISK_LAMBDA" \
      "--risk-sharpness $SHARPNESS --small-vocab-size $k" ;;
  esac
}
for arm in $ARMS; do  # checked before hours of training
  if [ -z "$(arm_flags "$arm")" ]; then
    echo "ARMS: '$arm' is no arm: NAME-kK with NAME ce, rfN or riskN (N samples) and K the candidates" >&2; exit 2
  fi
done
python -c "import sys; from smallvocab_tools.train.budget import budget_problem; p = budget_problem(sys.argv[1]); \
sys.exit(p and f'BUDGET={sys.argv[1]}: {p}')" "$BUDGET" || exit 2
for name in POINTS PROBE_UPDATES; do
  if ! [[ ${!name} =~ ^[1-9][0-9]*$ ]]; then echo "$name=${!name}: a whole number above 0" >&2; exit 2; fi
done
if [ "$PROBE_UPDATES" -le 2 ]; then  # budget_probe.py leaves each probe run's first 2 updates untimed (--skip)
  echo "PROBE_UPDATES=$PROBE_UPDATES: more than 2 (the probe leaves the first 2 updates of each run untimed)" >&2
  exit 2
fi
if [[ " $ARMS " != *" $CONTROL "* ]] && ! compgen -G "$OUT/$CONTROL-s*/recipe.settings" > /dev/null; then
  echo "CONTROL=$CONTROL is not in ARMS ($ARMS) nor among the runs of $OUT: give one of the arms" >&2; exit 2
fi
for recorded in "$OUT"/*-k*-s*/recipe.settings; do  # one budget a folder: the report compares equal seconds
  [ -f "$recorded" ] || continue
  was=$(sed -n 's/.* budget=\([^ ]*\) .*/\1/p' "$recorded")
  if [ -z "$was" ]; then
    echo "$recorded holds no budget=SECONDS: not a record of this recipe; give OUT a folder of its own" >&2
    exit 2
  fi
  if ! awk -v a="$was" -v b="$BUDGET" 'BEGIN { exit !(a + 0 == b + 0) }'; then  # as numbers: 3600 = 3600.0
    echo "OUT=$OUT holds runs of BUDGET=$was (e.g. $recorded), not $BUDGET: arms compare only at equal seconds;" \
      "set BUDGET=$was, or OUT to another folder for this budget" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
exec 9> "$OUT/.recipe.lock"
if ! flock -n 9; then
  echo "OUT=$OUT: another run of this recipe is at work there (it holds $OUT/.recipe.lock): wait for it to end," \
    "or set another OUT" >&2
  exit 3
fi

# 1. the start (a stopped CE run resumes), then its decodes as each arm's softmax sees it (each made once)
if [ ! -f "$START" ]; then
  SAVE=$OUT/ce K=0 EPOCHS=$CE_EPOCHS SCHEDULE=anneal AVERAGE=$AVERAGE THREADS=$((THREADS * PARALLEL)) DATA=$DATA CANDS=$CANDS \
    SRC=$SRC TGT=$TGT DEVICE=$DEVICE ARCH_ARGS="$ARCH_ARGS" EXTRA="$CE_EXTRA" bash "$HERE/run_transformer_multi30k.sh"
fi
for k in $(for arm in $ARMS; do echo "${arm##*-k}"; done | sort -u); do
  mkdir -p "$OUT/start-k$k"
  for beam in $BEAMS; do
    DATA=$DATA CANDS=$CANDS K=$k SAVE=$OUT/start-k$k CKPT=$START SRC=$SRC TGT=$TGT BEAM=$beam DEVICE=$DEVICE \
      SKIP_DONE=1 OMP_NUM_THREADS=$((THREADS * PARALLEL)) bash "$HERE/decode_multi30k.sh" >> "$OUT/start-k$k/decode.log"
  done
done

# what every arm runs with (its own flags come after)
COMMON=("$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s "$SRC" -t "$TGT"
        --candidates-dir "$CANDS" $ARCH_ARGS --criterion smallvocab_reinforce --label-smoothing "$LS" --reward "$REWARD"
        --max-sample-len 100 --sample-len-ratio 1.5 --finetune-from-model "$START"
        --optimizer adam --lr "$LR" --clip-norm 1.0 --batch-size "$BATCH" $DEV_ARGS --num-workers 0)

# 2. each arm's pace, probed once for all ARMS together; an arm new to the record is probed beside the record's
# arms, which keep their recorded pace (budget_probe.py scales the new one's by the machine's drift since)
probed() { python -c "import json, sys; a = json.load(open(sys.argv[1]))['arms']; sys.exit(any(x not in a \
for x in sys.argv[2:]))" "$OUT/speed.json" $ARMS 2> /dev/null; }
if ! probed; then
  recorded=$([ -f "$OUT/speed.json" ] && python -c "import json, sys; print(' '.join(json.load(open(sys.argv[1]))\
['arms']))" "$OUT/speed.json" || true)
  probe_arms=()
  for arm in $(printf '%s\n' $recorded $ARMS | awk '!seen[$0]++'); do
    probe_arms+=(--arm "$arm=$(arm_flags "$arm")")
  done
  OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS python scripts/budget_probe.py "${probe_arms[@]}" \
    --updates "$PROBE_UPDATES" --rounds 2 --json "$OUT/speed.json" -- "${COMMON[@]}" --seed 1 | tee "$OUT/probe.log"
fi

# 3-4. the runs
run_arm() {  # run_arm ARM SEED
  local arm=$1 seed=$2 save=$OUT/$1-s$2 updates every settings k=${1##*-k} beam
  updates=$(python scripts/budget_probe.py --json "$OUT/speed.json" --budget "$BUDGET" --arm-updates "$arm")
  every=$(( (updates + POINTS - 1) / POINTS ))
  # (flags last: they hold spaces; scripts/rl_budget_report.py reads this line)
  settings="updates=$updates budget=$BUDGET seconds_per_update=$(python -c "import json, sys; \
print(json.load(open(sys.argv[1]))['arms'][sys.argv[2]]['seconds_per_update'])" "$OUT/speed.json" "$arm") \
LR=$LR BATCH=$BATCH LS=$LS REWARD=$REWARD POINTS=$POINTS flags=$(arm_flags "$arm")"
  mkdir -p "$save"
  if [ -f "$save/recipe.settings" ] && [ "$(cat "$save/recipe.settings")" != "$settings" ]; then
    echo "$save was trained with: $(cat "$save/recipe.settings"); now asked for: $settings. Move it away (or set" \
      "OUT to another folder) to train it again." >&2
    return 2
  fi
  echo "$settings" > "$save/recipe.settings"
  if [ ! -f "$save/checkpoint_best.pt" ] || [ ! -f "$save/train.done" ]; then
    OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS fairseq-train "${COMMON[@]}" $(arm_flags "$arm") \
      --seed "$seed" --max-update "$updates" --validate-interval-updates "$every" --save-interval-updates "$every" \
      --keep-interval-updates 1 --validate-interval 1000000 --save-interval 1000000 \
      --eval-bleu --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
      --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --no-epoch-checkpoints --save-dir "$save" \
      --no-progress-bar --log-format simple --log-interval 10 >> "$save/train.log" 2>&1
    touch "$save/train.done"
  fi
  for beam in $BEAMS; do
    DATA=$DATA CANDS=$CANDS K=$k SAVE=$save SRC=$SRC TGT=$TGT BEAM=$beam DEVICE=$DEVICE SKIP_DONE=1 \
      OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS bash "$HERE/decode_multi30k.sh" >> "$save/decode.log"
  done
}

running=0
failed=0
for seed in $SEEDS; do
  for arm in $ARMS; do
    run_arm "$arm" "$seed" &
    running=$((running + 1))
    if [ "$running" -ge "$PARALLEL" ]; then
      wait -n || failed=1
      running=$((running - 1))
    fi
  done
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" = 0 ] || { echo "a run failed: its OUT/ARM-sSEED/train.log says why" >&2; exit 1; }

# 5. the report
python scripts/rl_budget_report.py "$OUT" --data "$DATA" --tgt "$TGT" --control "$CONTROL" \
  --markdown "$OUT/table.md" --png "$OUT/dev_bleu_seconds.png" --json "$OUT/runs.json"
