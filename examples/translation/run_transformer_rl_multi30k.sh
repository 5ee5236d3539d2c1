#!/usr/bin/env bash
# REINFORCE on a stock fairseq Transformer, small vocabulary against the full
# softmax, with controls, on Multi30k En-De (word level). For each seed in
# SEEDS and each K in KS (500; 0 = the full softmax, the same model):
#   1. CE to convergence: run_transformer_multi30k.sh for CE_EPOCHS epochs;
#      the checkpoint of best dev BLEU is kept.
#   2. REINFORCE from that checkpoint: run_reinforce_multi30k.sh with the
#      model's flags, RL_EPOCHS epochs of OPTIMIZER at LR, LAMBDA, SAMPLES
#      samples per input, BASELINE, REWARD, TEMP and LS (the CE term's label
#      smoothing; default 0, the paper's plain CE); dev BLEU and a checkpoint
#      every VALIDATE updates, the best kept.
#   3. Its controls, with the same optimizer and budget (CONTROLS; empty: none): "ce" (the
#      CE term alone: LAMBDA=1) and "constant" (a constant reward, no baseline).
#   4. Every run's best checkpoint decoded on val and test2016 with each beam
#      in BEAMS (1: greedy), inside the same K candidates; a beam search with
#      the run's own length penalty, chosen on val (decode_multi30k.sh's
#      LENPEN=dev; LENPEN=1: fairseq's default).
# Then one table and one plot: scripts/rl_logs.py recipe writes OUT/table.md
# and OUT/dev_bleu.png.
# Runs are OUT/ce-kK-sSEED, OUT/rl-kK-sSEED, OUT/ctl-ce-kK-sSEED and
# OUT/ctl-constant-kK-sSEED. A run that stopped resumes from its
# checkpoint_last.pt, so a stopped recipe continues where it was; a finished
# run is skipped, or extended when asked for more RL_EPOCHS; a run trained with
# other recorded settings (recipe.settings: the model's flags, and REINFORCE's
# optimizer, lr, lambda, samples, baseline, reward, temperature, LS and CE_EPOCHS;
# recipe.inputs: DATA, CANDS, and VALIDATE for REINFORCE) is refused, and so
# are more CE_EPOCHS once REINFORCE runs exist.
# Run from the project root with the project's environment active, after
# examples/vocab_predictor/run_multi30k.sh (which exports the K=500 lists):
#   source .venv/bin/activate && bash examples/translation/run_transformer_rl_multi30k.sh
# Tuning REINFORCE (another LAMBDA, REWARD, SAMPLES, TEMP, LR, ...): a new OUT with CE_FROM=the first
# OUT starts from the CE runs there (linked into OUT, so its table has them), and trains only what differs.
# REINFORCE's own seed-to-seed spread, from one CE model: CE_SEED=1 trains only seed 1's CE run, and every
# other seed's ce-kK-sSEED is a link to it (its REINFORCE and controls sample with their own seed).
# Settings: DATA, CANDS, OUT, CE_FROM, CE_SEED, SEEDS, KS, CE_EPOCHS, RL_EPOCHS, OPTIMIZER, LR, LAMBDA,
# SAMPLES, BASELINE, REWARD, TEMP, LS, VALIDATE (0: once an epoch), CONTROLS,
# BEAMS, LENPEN, THREADS (per run), DEVICE (cpu or cuda: where every run trains and decodes), PARALLEL (1: each K's runs
# side by side with the other K's, each with THREADS threads), SRC, TGT, ARCH_ARGS (the model's flags; default:
# transformer_multi30k.args).
set -euo pipefail
DATA=${DATA:-data-bin/multi30k.en-de}
CANDS=${CANDS:-checkpoints/vp-multi30k.en-de/candidates}
OUT=${OUT:-checkpoints/transformer-rl-multi30k.en-de}
CE_FROM=${CE_FROM:-}  # another OUT whose finished CE runs this one starts from (linked, not trained again)
CE_SEED=${CE_SEED:-}  # the seed whose CE run every seed's REINFORCE starts from (empty: each seed its own)
SEEDS=${SEEDS:-1 2}
KS=${KS:-500 0}
CE_EPOCHS=${CE_EPOCHS:-30}
RL_EPOCHS=${RL_EPOCHS:-1}
OPTIMIZER=${OPTIMIZER:-adam}  # tuned: docs/results.md, "REINFORCE on a stock Transformer: tuning"
LR=${LR:-3e-5}
LAMBDA=${LAMBDA:-0.005}
SAMPLES=${SAMPLES:-4}
BASELINE=${BASELINE:-loo}
REWARD=${REWARD:-gleu_bp}  # chosen on dev: docs/results.md, "REINFORCE rewards and the length penalty"
TEMP=${TEMP:-1.0}
LS=${LS:-0}
VALIDATE=${VALIDATE:-50}
CONTROLS=${CONTROLS-ce constant}  # empty: none
BEAMS=${BEAMS:-1 5}
LENPEN=${LENPEN:-dev}  # a beam search's length penalty: chosen on val for each run, or a number for all
THREADS=${THREADS:-1}
DEVICE=${DEVICE:-cpu}
PARALLEL=${PARALLEL:-1}
SRC=${SRC:-en}
TGT=${TGT:-de}
HERE=$(dirname "$0")
ARCH_ARGS=${ARCH_ARGS:-$(cat "$HERE/transformer_multi30k.args")}
# a checkpoint at every validation: fairseq saves (and so keeps a best) only where it saves, which without
# --save-interval-updates is the epoch's end, whatever --validate-interval-updates says; also lets a stopped
# run resume mid-epoch (one update-numbered checkpoint kept beside checkpoint_last.pt)
VALID_ARGS=$([ "$VALIDATE" = 0 ] || echo "--validate-interval-updates $VALIDATE --save-interval-updates $VALIDATE" \
  "--keep-interval-updates 1")
mkdir -p "$OUT"
# one recipe per OUT at a time: two would train the same runs into the same checkpoints (the lock goes with the
# recipe's processes, a killed one's included)
exec 9> "$OUT/.recipe.lock"
if ! flock -n 9; then
  echo "OUT=$OUT: another run of this recipe is at work there (it holds $OUT/.recipe.lock): wait for it to" \
    "end, or set another OUT" >&2
  exit 3
fi

# a step for every K: side by side (PARALLEL=1) or one after another; a failure stops the recipe
each_k() {
  local pids=() k
  for k in $KS; do
    if [ "$PARALLEL" = 1 ]; then "$@" "$k" & pids+=($!); else "$@" "$k"; fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

decode() {  # decode SAVE K: the best checkpoint with each beam (greedy written by the training scripts); a beam
  # decode made under another LENPEN (its SAVE/hyp.beamN.settings) is made again, one under today's is kept
  if [ "$CHECKING" = 1 ]; then return; fi
  local beam
  for beam in $BEAMS; do
    [ "$beam" = 1 ] && [ -f "$1/hyp-test.txt" ] && continue
    DATA=$DATA CANDS=$CANDS K=$2 SAVE=$1 SRC=$SRC TGT=$TGT BEAM=$beam LENPEN=$LENPEN DEVICE=$DEVICE SKIP_DONE=1 \
      bash "$HERE/decode_multi30k.sh" >> "$1/decode.log"
  done
}

# A run keeps what it is trained with in SAVE/recipe.settings ("epochs=E" and the settings that shape its result),
# written when it starts. Run again, the recipe skips a finished run (its decodes exist) whose settings are today's,
# resumes a stopped one, extends one asked for more epochs (from its checkpoint_last.pt, decoded again), and refuses
# any other change before training starts: a finished run's results would be reported under settings they did not
# have, and a stopped one would go on under others.  A folder with a train.log but no recipe.settings (trained by hand, or
# by another script) is refused too: its settings cannot be checked.
ce_settings() {  # the model's flags, on one line (a flags file may have several)
  echo "ARCH_ARGS=$(printf '%s' "$ARCH_ARGS" | tr -s '[:space:]' ' ')"
}
rl_settings() {  # rl_settings LAMBDA REWARD BASELINE SEED: also the CE run's, which gave its starting point
  # LS only where it is not 0, and CE_SEED only where another seed's CE run is the start: runs recorded before
  # either existed had neither, and compare equal
  echo "OPTIMIZER=$OPTIMIZER LR=$LR LAMBDA=$1 SAMPLES=$SAMPLES BASELINE=$3 REWARD=$2 TEMP=$TEMP" \
    "$([ "$LS" = 0 ] || echo "LS=$LS ")$(ce_seed_differs "$4" && echo "CE_SEED=$CE_SEED ")CE_EPOCHS=$CE_EPOCHS" \
    "$(ce_settings)"
}
ce_seed_differs() {  # ce_seed_differs SEED: whether SEED's REINFORCE starts from another seed's CE run
  [ -n "$CE_SEED" ] && [ "$1" != "$CE_SEED" ]
}

# What a run reads is kept beside its settings, in SAVE/recipe.inputs, and compared the same way where that file
# exists (runs from before it was kept are not checked): the data and the candidate lists by their real paths, and
# for REINFORCE and the controls VALIDATE, which decides the checkpoint kept as the best.
inputs() {  # inputs SAVE
  local line="DATA=$(readlink -f "$DATA") CANDS=$(readlink -f "$CANDS")"
  case ${1##*/} in ce-*) ;; *) line="$line VALIDATE=$VALIDATE" ;; esac
  echo "$line"
}

status() {  # status SAVE EPOCHS SETTINGS: "done", "run" (new, stopped, or to be extended), or why it conflicts
  local file=$1/recipe.settings finished=run had had_epochs asked
  [ -f "$1/hyp-test.txt" ] && finished=done
  asked=$(inputs "$1")
  if [ -f "$1/recipe.inputs" ] && [ "$(cat "$1/recipe.inputs")" != "$asked" ]; then
    echo "was trained on: $(cat "$1/recipe.inputs"); now asked for: $asked"; return
  fi
  if [ ! -f "$file" ]; then  # new; or trained by something else, whose settings cannot be checked
    if [ -f "$1/train.log" ]; then
      echo "has a train.log but no recipe.settings: it was not trained by this recipe (or before runs kept their" \
        "settings), so its settings cannot be checked against today's; if they are, write them into" \
        "$file as the recipe does (epochs=E and the settings the refusal of a changed run names)"
    else
      echo run
    fi
    return
  fi
  had=$(cat "$file") had_epochs=${had%% *}
  had_epochs=${had_epochs#epochs=}
  if [ "$had" = "epochs=$2 $3" ]; then echo "$finished"
  elif [ "${had#* }" = "$3" ] && [ "$had_epochs" -lt "$2" ]; then echo run
  else echo "was trained with: $had; now asked for: epochs=$2 $3"
  fi
}

train() {  # train SAVE EPOCHS SETTINGS SCRIPT [VAR=VALUE ...]: the run unless done (only checked while CHECKING)
  local save=$1 epochs=$2 settings=$3 script=$4 now
  shift 4
  now=$(status "$save" "$epochs" "$settings")
  case $now in
    done) return ;;
    run) if [ "$CHECKING" = 1 ]; then return; fi ;;
    *) echo "$save $now. Move it away (or set OUT to another folder) to train it again." >&2; exit 2 ;;
  esac
  mkdir -p "$save"
  rm -f "$save"/hyp-*.txt "$save"/hyp*.settings "$save"/generate-*.txt  # an extended run's best may change
  echo "epochs=$epochs $settings" > "$save/recipe.settings"
  inputs "$save" > "$save/recipe.inputs"
  env "$@" SAVE="$save" EPOCHS="$epochs" bash "$HERE/$script" > "$save.out"
}

link_run() {  # link_run SAVE FROM SETTING: SAVE a link to the run FROM, as SETTING asks (made once not CHECKING)
  if [ -e "$1" ] && [ "$(readlink -f "$1")" = "$(readlink -f "$2")" ]; then return; fi  # linked, or the run itself
  if [ -e "$1" ] || [ -L "$1" ]; then
    echo "$3: $1 exists, and is not a link to $2: move it away, or leave $3 unset" >&2
    exit 2
  fi
  if [ "$CHECKING" = 0 ]; then ln -s "$(readlink -f "$2")" "$1"; fi
}

ce_from() {  # ce_from SAVE: OUT's CE run, a link to CE_FROM's finished one of the same settings
  local from=$CE_FROM/${1##*/} now
  now=$(status "$from" "$CE_EPOCHS" "$(ce_settings)")
  if [ "$now" != done ]; then
    [ "$now" = run ] && now="not finished"
    echo "CE_FROM: $from: $now. Finish it first (this recipe with OUT=$CE_FROM), or leave CE_FROM unset" >&2
    exit 2
  fi
  link_run "$1" "$from" CE_FROM
}

ce() {  # ce SEED K
  local save=$OUT/ce-k$2-s$1
  if ce_seed_differs "$1"; then  # CE_SEED's CE run, trained (or found) first, and this seed's a link to it
    ce "$CE_SEED" "$2"
    link_run "$save" "$OUT/ce-k$2-s$CE_SEED" CE_SEED
    return
  fi
  if [ -n "$CE_FROM" ]; then ce_from "$save"; fi
  train "$save" "$CE_EPOCHS" "$(ce_settings)" run_transformer_multi30k.sh K="$2" SEED="$1" DATA="$DATA" \
    CANDS="$CANDS" THREADS="$THREADS" DEVICE="$DEVICE" SRC="$SRC" TGT="$TGT" ARCH_ARGS="$ARCH_ARGS"
  decode "$save" "$2"
}

reinforce() {  # reinforce NAME LAMBDA REWARD BASELINE SEED K
  local save=$OUT/$1-k$6-s$5
  train "$save" "$RL_EPOCHS" "$(rl_settings "$2" "$3" "$4" "$5")" run_reinforce_multi30k.sh K="$6" SEED="$5" \
    DATA="$DATA" CANDS="$CANDS" CE="$OUT/ce-k$6-s$5/checkpoint_best.pt" THREADS="$THREADS" DEVICE="$DEVICE" \
    OPTIMIZER="$OPTIMIZER" LR="$LR" LAMBDA="$2" SAMPLES="$SAMPLES" BASELINE="$4" REWARD="$3" TEMP="$TEMP" LS="$LS" \
    SRC="$SRC" TGT="$TGT" ARCH_ARGS="$ARCH_ARGS" EXTRA="$VALID_ARGS"
  decode "$save" "$6"
}

control() {  # control NAME: the control's LAMBDA, REWARD and BASELINE; nothing for a name that is no control
  case $1 in
    ce) echo "1 $REWARD $BASELINE" ;;  # the CE term alone
    # Choshen et al. 2020's: every sample rewarded alike, so whatever it gains is the sharpening of the model's
    # distribution, not the reward's information. Without a baseline: any baseline would cancel a constant reward
    # (loo's advantage is exactly 0), leaving lambda x CE, which Adam, blind to the loss's scale, makes the CE control
    constant) echo "$LAMBDA constant none" ;;
  esac
}

chain() {  # chain SEED K: one softmax's runs in order (each needs the CE checkpoint)
  ce "$1" "$2"
  reinforce rl "$LAMBDA" "$REWARD" "$BASELINE" "$1" "$2"
  local name lambda reward baseline
  for name in $CONTROLS; do
    read -r lambda reward baseline <<< "$(control "$name")"
    reinforce "ctl-$name" "$lambda" "$reward" "$baseline" "$1" "$2"
  done
}

chains() {  # chains K: one softmax's chain for every seed, one seed after another
  local seed
  for seed in $SEEDS; do chain "$seed" "$1"; done
}

case $DEVICE in  # checked before hours of training, not after
  cpu|cuda) ;;
  *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;;
esac
for name in $CONTROLS; do
  if [ -z "$(control "$name")" ]; then
    echo "CONTROLS: unknown control '$name' (ce, constant)" >&2; exit 2
  fi
done
CHECKING=1  # so is every run against its recorded settings: the chains walked once, training nothing
for k in $KS; do chains "$k"; done
CHECKING=0
# Each K's chains run on their own (side by side under PARALLEL=1): the small vocabulary's runs do not wait for the
# full softmax's slower ones, so both cores stay busy, and each chain's wall time is its own.
each_k chains
python scripts/rl_logs.py recipe "$OUT" --data "$DATA" --tgt "$TGT" --markdown "$OUT/table.md" \
  --png "$OUT/dev_bleu.png" --json "$OUT/runs.json"
