#!/usr/bin/env bash
# From your own raw parallel text to a tuned, scored and exported model, in one script:
#   1. sentencepiece with one model and one dictionary for both languages (scripts/prepare_data.py)
#   2. does the small softmax pay on this model here: small vs full for a REINFORCE step and beam decoding on
#      ARCH_ARGS, your |V| and K, random weights, about a minute (scripts/does_it_pay.py; OUT/does-it-pay.txt);
#      with SOFTMAX=auto (the default) the script follows it: where the small softmax does not pay (or pays
#      little), it trains and decodes with the full softmax and says so (SOFTMAX=small keeps K; SOFTMAX=full skips
#      steps 2 and 3)
#   3. the vocabulary predictor, and its recall of the reference words at K
#   4. a Transformer trained with CE inside each sentence's K candidates (embeddings shared), until its dev BLEU
#      stops rising (CE_PATIENCE validations, one per epoch) or CE_UPDATES updates (a budget in updates: a small
#      corpus makes few updates an epoch, and 30 epochs of 3,000 sentence pairs ended before the warmup had)
#   5. REINFORCE from its best checkpoint (RL_UPDATES updates at RL_LR; LAMBDA=1: CE continued, the control)
#   6. test BLEU of both (scripts/bleu.py: sacrebleu, BLEU_TOKENIZE, its signature printed) on the raw references
#      (beam BEAM, pieces joined back into words), each at
#      its own length penalty chosen on dev (LENPEN=dev: scripts/sweep_lenpen.py, the best by dev BLEU, recorded
#      in FOLDER/lenpen.json; or LENPEN=N for both); an evaluation of an unchanged checkpoint at the same
#      settings is reused (FOLDER/eval.settings)
#   7. fairseq-interactive on raw source lines (sentencepiece encodes them, the predictor gives the candidates),
#      and a CTranslate2 export of the tuned model into RL_SAVE/ct2, the predictor as its vocabulary map, timed on
#      THREADS threads (skipped without ctranslate2, and for the control, LAMBDA=1: nothing to deploy)
#   8. the verdict: CE, every REINFORCE run in OUT and CE continued where run, side by side (BLEU and chrF) with
#      the paired bootstrap and length ratios, and whether REINFORCE helped (scripts/quickstart_verdict.py; also in
#      OUT/verdict.txt and OUT/verdict.json); with COMPARE=full, CE and REINFORCE are also trained with the full
#      softmax (OUT/ce-full, RL_SAVE-full) and the verdict says whether the small softmax kept the full one's BLEU
#      and how much faster its updates were (beside does_it_pay.py's prediction)
# BUDGET=60m (or 90m, 2h, 5400s; unset: no budget, the steps' own sizes) fits the whole run, evaluation, export
# and verdict included, into that time: after step 2 it prints the plan (scripts/time_budget.py: the time the
# evaluation needs set aside at step 2's measured decoding pace, the rest shared among the predictor, CE and
# REINFORCE, 1:6:3; each step's minutes, the updates they buy at step 2's paces, and what CE_UPDATES and RL_UPDATES
# would need), and each training stops at its time (fairseq-train --stop-time-hours, decided at its start from the
# time then left: a step that ends early leaves its time to the next); CE's warmup (unless WARMUP is set) is a tenth
# of the updates planned where that is less than 400; OUT/budget.json keeps the plan. A run started again gets
# BUDGET again, for the steps it has left.
# Each training step prints its pace (seconds per update, minutes to its budget) after its first updates and again,
# validation included, after the first validation that follows; its validations and every warning; the whole logs
# are in OUT/*.train.log.
# RAW holds train, valid and test .SRC and .TGT files: one sentence per line, aligned.
# Run from the project root with the project's environment active:
#   source .venv/bin/activate && RAW=my-corpus SRC=en TGT=de bash examples/quickstart/run.sh
# Each step is skipped once done (a training, once it has finished: FOLDER/.quickstart-done), so a stopped run
# continues where it was (a stopped training from its checkpoint_last.pt); another RL_LR, REWARD or LAMBDA with
# its own RL_SAVE (a folder in OUT, e.g. LAMBDA=1 RL_SAVE=OUT/ce-continued: the control) starts from the same CE
# checkpoint, and leaves the other runs' outputs as they are. To train a finished step further (a larger CE_UPDATES),
# delete its .quickstart-done.
# Each step records the settings that shape its outputs when it starts: the data's in OUT/data-bin.settings, the
# predictor's, CE's and each REINFORCE run's in FOLDER/quickstart.settings. Run again with another value of one of
# them (another K, REWARD, ARCH_ARGS, ...), the script stops before doing anything and names each setting that
# differs, with its old and new value: it would skip the finished step and report that step's results as those of
# today's settings. Run with the recorded values, or use another OUT (or RL_SAVE, for a REINFORCE setting), or
# remove the folder. A budget (VP_EPOCHS, CE_UPDATES, CE_PATIENCE, CE_EPOCHS, WARMUP, RL_UPDATES, BUDGET) may change for a
# step without its .quickstart-done (stopped, or that file deleted to train it further).
# Settings: RAW, SRC, TGT, OUT (every output; default checkpoints/quickstart), SP_VOCAB (sentencepiece pieces),
# EMPTY_LINES (fail: stop at a sentence pair with an empty side, naming its file and line; drop: leave such pairs
# out, and say how many), K (candidates per sentence; 500, the paper's for up to 10,000 dictionary entries: 1000
# above; 0, or K not below |V|, the target dictionary's size, trains the full softmax, as fairseq-train does with
# such a --small-vocab-size, without steps 2 and 3),
# SOFTMAX (auto, small or full: see step 2), COMPARE (off, or full: see step 8), BUDGET (above), VP_EPOCHS, CE_UPDATES, CE_PATIENCE, CE_EPOCHS (a cap; 0: none), WARMUP (CE's warmup updates; default 400,
# or a tenth of CE_UPDATES where that is less), ARCH_ARGS (the Transformer's flags), RL_UPDATES, RL_LR, REWARD,
# SAMPLES, LAMBDA, RL_SAVE (default OUT/rl), BEAM, LENPEN, BLEU_TOKENIZE (sacrebleu's tokenizer for every BLEU the
# script prints: 13a, sacrebleu's default, for detokenized text; none for text tokenized already), THREADS,
# DEVICE (cpu or cuda), SEED.
set -euo pipefail
: "${RAW:?RAW: the folder of your train, valid and test .SRC/.TGT files}"
SRC=${SRC:-en}
TGT=${TGT:-de}
OUT=${OUT:-checkpoints/quickstart}
SP_VOCAB=${SP_VOCAB:-8000}
EMPTY_LINES=${EMPTY_LINES:-fail}
K=${K:-500}
SOFTMAX=${SOFTMAX:-auto}
COMPARE=${COMPARE:-off}
VP_EPOCHS=${VP_EPOCHS:-20}  # on 8,000 pairs: dev recall@500 88.6 after 10 epochs, 90.8 after 20, no higher by 30
CE_UPDATES=${CE_UPDATES:-4000}
CE_PATIENCE=${CE_PATIENCE:-10}
CE_EPOCHS=${CE_EPOCHS:-0}
WARMUP_GIVEN=${WARMUP:+yes}  # (else CE's warmup follows its planned updates under BUDGET)
WARMUP=${WARMUP:-$(( CE_UPDATES / 10 < 400 ? (CE_UPDATES < 20 ? 1 : CE_UPDATES / 10) : 400 ))}
ARCH_ARGS=${ARCH_ARGS:-"--arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256
  --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --decoder-attention-heads 4 --share-all-embeddings --dropout 0.3"}
RL_UPDATES=${RL_UPDATES:-500}
RL_LR=${RL_LR:-3e-5}
REWARD=${REWARD:-gleu_bp}
SAMPLES=${SAMPLES:-4}
LAMBDA=${LAMBDA:-0.005}
RL_SAVE=${RL_SAVE:-$OUT/rl}
BEAM=${BEAM:-5}
LENPEN=${LENPEN:-dev}
BLEU_TOKENIZE=${BLEU_TOKENIZE:-13a}
THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cpu}
SEED=${SEED:-1}
BUDGET=${BUDGET:-}
# the settings checked before anything is written
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
case $EMPTY_LINES in
  fail|drop) ;;
  *) echo "EMPTY_LINES=$EMPTY_LINES: fail (stop at a sentence pair with an empty side) or drop (leave such pairs" \
       "out)" >&2; exit 2 ;;
esac
case $SOFTMAX in
  auto|small|full) ;;
  *) echo "SOFTMAX=$SOFTMAX: auto (follow scripts/does_it_pay.py's verdict), small (K candidates) or full" >&2
     exit 2 ;;
esac
case $COMPARE in
  off|full) ;;
  *) echo "COMPARE=$COMPARE: off, or full (also train the full softmax's CE and REINFORCE, and compare)" >&2
     exit 2 ;;
esac
if [ "$COMPARE" = full ] && [ "$SOFTMAX" = full ]; then
  echo "COMPARE=full compares the small softmax with the full one: leave SOFTMAX at auto (or small)" >&2
  exit 2
fi
case $K in
  ''|*[!0-9]*) echo "K=$K: K, the candidates per sentence, must be a whole number (500 for a target dictionary of" \
                 "up to 10,000 entries, 1000 above; 0 for the full softmax)" >&2; exit 2 ;;
esac
K=$(( 10#$K ))  # (no octal: 0500 is 500)
if ! python -c "import sys; from sacrebleu.metrics import BLEU; sys.exit(sys.argv[1] not in BLEU.TOKENIZERS)" \
    "$BLEU_TOKENIZE"; then
  echo "BLEU_TOKENIZE=$BLEU_TOKENIZE: not one of sacrebleu's tokenizers ($(python -c "from sacrebleu.metrics import \
BLEU; print(', '.join(sorted(BLEU.TOKENIZERS)))")): 13a for detokenized text, none for text tokenized already" >&2
  exit 2
fi
if [ -n "$BUDGET" ] && ! python scripts/time_budget.py check "$BUDGET" > /dev/null; then exit 2; fi
if [ "$K" -ge 1 ] && [ "$K" -le 4 ]; then
  echo "K=$K leaves no room for words beside the target dictionary's 4 special symbols: set K above 4 (500 for up" \
    "to 10,000 dictionary entries, 1000 above), or 0 for the full softmax" >&2
  exit 2
fi
ARCH_ARGS=$(tr -s '[:space:]' ' ' <<< "$ARCH_ARGS" | sed 's/^ //; s/ $//')  # one line, as it is recorded
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS PYTHONUNBUFFERED=1
DATA=$OUT/data-bin
COMMON=(--user-dir fairseq_smallvocab $DEV_ARGS --num-workers 0 --seed "$SEED" --no-progress-bar --log-format simple
        --log-interval 50)
RL_LOG=$(( RL_UPDATES / 10 < 1 ? 1 : (RL_UPDATES / 10 > 50 ? 50 : RL_UPDATES / 10) ))  # about 10 lines a run
step() { echo "== $*" >&2; }
# what a training prints on the screen (the whole log goes to its file): the checkpoint it starts from (a resumed
# run's update), pace, validations, warnings, the end
shown() { grep --line-buffered -E "${1:-pace: }|Loaded checkpoint|pace: |pace with validation: |valid on|done training|early stop|Stopping training due to cumulative| WARNING | ERROR " || [ $? -eq 1 ]; }

# What each step was made with (NAME=VALUE lines; after a "+", its budget, which may change while the step is not
# finished), checked against its record from an earlier run before anything runs.
DATA_SETTINGS=("RAW=$(readlink -m "$RAW")" "SRC=$SRC" "TGT=$TGT" "SP_VOCAB=$SP_VOCAB" "EMPTY_LINES=$EMPTY_LINES")
VP_SETTINGS=("K=$K" "SEED=$SEED" + "VP_EPOCHS=$VP_EPOCHS" "BUDGET=$BUDGET")
ce_settings() {  # (WARMUP follows CE_UPDATES, or BUDGET's plan, unless set: a budget)
  CE_SETTINGS=("K=$K" "SOFTMAX=$SOFTMAX" "ARCH_ARGS=$ARCH_ARGS" "SEED=$SEED"
               + "CE_UPDATES=$CE_UPDATES" "CE_PATIENCE=$CE_PATIENCE" "CE_EPOCHS=$CE_EPOCHS" "WARMUP=$WARMUP"
               "BUDGET=$BUDGET")
}
ce_settings
RL_SETTINGS=("LAMBDA=$LAMBDA" "REWARD=$REWARD" "SAMPLES=$SAMPLES" "RL_LR=$RL_LR" "K=$K" "ARCH_ARGS=$ARCH_ARGS"
             "SEED=$SEED" + "RL_UPDATES=$RL_UPDATES" "BUDGET=$BUDGET")
record() {  # record FILE NAME=VALUE...: the settings into FILE, one a line
  local pair
  for pair in "${@:2}"; do [ "$pair" = + ] || printf '%s\n' "$pair"; done > "$1"
}
refusals=""
check() {  # check FOLDER RECORD DONE FIX NAME=VALUE...: a refusal for each setting that RECORD holds another value of
  local folder=$1 file=$2 done=$3 fix=$4 pair had budget="" changed="" grown="" back="" more=""
  shift 4
  [ -f "$file" ] || return 0
  [ -e "$done" ] || [ -e "$folder/checkpoint_last.pt" ] || return 0  # recorded, but nothing made (it failed at start)
  for pair in "$@"; do
    if [ "$pair" = + ]; then budget=1; continue; fi
    if [ -n "$budget" ] && [ ! -e "$done" ]; then continue; fi  # a step not finished goes on to its new budget
    had=$(grep -m1 -e "^${pair%%=*}=" "$file") || continue  # (a record from before the setting was kept)
    if [ "$had" = "$pair" ]; then continue; fi
    case $had in *[[:space:]]*) back+="${back:+ }${pair%%=*}='${had#*=}'" ;; *) back+="${back:+ }$had" ;; esac
    had="${pair%%=*} was ${had#*=}, now ${pair#*=}"
    if [ -n "$budget" ]; then grown+="${grown:+; }$had"; else changed+="${changed:+; }$had"; fi
  done
  [ -n "$back" ] || return 0
  if [ -n "$grown" ] && [ -z "$changed" ]; then
    more="; to train it further, delete $done (it goes on from its checkpoint_last.pt)"
  fi
  refusals+="$folder was made with other settings ($file): ${changed:+$changed${grown:+; }}$grown. Run with the"
  refusals+=" recorded ones ($back) to use it as it is$more; or $fix"$'\n'
  return 0
}
NEW_OUT="set OUT to another folder to make everything with today's settings (or remove $OUT)."
check "$DATA" "$DATA.settings" "$DATA/stats.json" "$NEW_OUT" "${DATA_SETTINGS[@]}"
check "$OUT/vp" "$OUT/vp/quickstart.settings" "$OUT/vp/.quickstart-done" "$NEW_OUT" "${VP_SETTINGS[@]}"
for arm in "" -full; do  # (the full softmax's arms of COMPARE=full: the same settings)
  check "$OUT/ce$arm" "$OUT/ce$arm/quickstart.settings" "$OUT/ce$arm/.quickstart-done" "$NEW_OUT" "${CE_SETTINGS[@]}"
  check "$RL_SAVE$arm" "$RL_SAVE$arm/quickstart.settings" "$RL_SAVE$arm/.quickstart-done" "set RL_SAVE to another \
folder in OUT (e.g. RL_SAVE=$OUT/rl-2: it starts from the same CE model, and the verdict compares them), or remove \
$RL_SAVE$arm and $RL_SAVE$arm.train.log." "${RL_SETTINGS[@]}"
done
if [ -n "$refusals" ]; then
  printf '%s' "$refusals" | sed 's/^/error: /' >&2
  echo "(each step's outputs would be reported under today's settings, which did not make them; nothing was run)" >&2
  exit 2
fi
mkdir -p "$OUT/vp" "$OUT/ce" "$RL_SAVE"

step "1/8 sentencepiece ($SP_VOCAB pieces, one model for $SRC and $TGT) and binarizing: $DATA"
if [ ! -f "$DATA/stats.json" ]; then
  # (its messages also into OUT/data-bin.log: an empty line's names --empty-lines, the quick start's EMPTY_LINES)
  if ! { python scripts/prepare_data.py --raw-dir "$RAW" --src "$SRC" --tgt "$TGT" --dest "$DATA" \
           --subword sentencepiece --sp-vocab-size "$SP_VOCAB" --joined-dictionary --empty-lines "$EMPTY_LINES" \
           2>&1 1>&3 | tee "$DATA.log" >&2; } 3>&1; then
    if grep -q -e "--empty-lines drop" "$DATA.log"; then
      echo "error: in the quick start, EMPTY_LINES=drop leaves the sentence pairs with an empty side out" >&2
    fi
    exit 2
  fi
  record "$DATA.settings" "${DATA_SETTINGS[@]}"
fi
V=$(( $(wc -l < "$DATA/dict.$TGT.txt") + 4 ))  # |V| as fairseq counts it: the dictionary's entries and 4 specials
SMALL_K=$K
if [ "$COMPARE" = full ] && { [ "$K" = 0 ] || [ "$K" -ge "$V" ]; }; then
  echo "COMPARE=full compares the small softmax with the full one: set K above 4 and below |V| = $V" >&2
  exit 2
fi
if [ "$K" -ge "$V" ]; then  # as fairseq-train does with a --small-vocab-size of |V| or more
  echo "K=$K is not below the target dictionary's size, |V| = $V ($DATA/dict.$TGT.txt: $(( V - 4 )) entries and 4" \
    "special symbols): the full softmax, as fairseq-train does with --small-vocab-size $K; steps 2 and 3 (the small" \
    "softmax's) are skipped. For the small softmax, set K below $V." >&2
  SMALL_K=0
elif [ "$K" = 0 ]; then
  echo "K=0: the full softmax; steps 2 and 3 (the small softmax's) are skipped" >&2
elif [ "$SOFTMAX" = full ]; then
  echo "SOFTMAX=full: the full softmax; steps 2 and 3 (the small softmax's) are skipped" >&2
  SMALL_K=0
fi

step "2/8 does the small softmax pay on this model here (small vs full: ARCH_ARGS, |V| of $DATA, K = $K, a" \
  "REINFORCE step and beam $BEAM decoding, random weights; about a minute): $OUT/does-it-pay.txt"
PAYS_SETTINGS="ARCH_ARGS=$ARCH_ARGS K=$K SAMPLES=$SAMPLES BEAM=$BEAM THREADS=$THREADS DEVICE=$DEVICE"
if [ "$SMALL_K" = 0 ]; then
  echo "skipped: the full softmax ($([ "$SOFTMAX" = full ] && echo "SOFTMAX=full" || echo "K=$K"))"
elif [ "$(head -1 "$OUT/does-it-pay.txt" 2>/dev/null)" != "# $PAYS_SETTINGS" ] || [ ! -f "$OUT/does-it-pay.json" ]; then
  { echo "# $PAYS_SETTINGS"
    python scripts/does_it_pay.py --data "$DATA" -s "$SRC" -t "$TGT" --model-args "$ARCH_ARGS" --k "$K" \
      --rl-samples "$SAMPLES" --beam "$BEAM" --threads "$THREADS" --device "$DEVICE" \
      --json "$OUT/does-it-pay.json.tmp"; } > "$OUT/does-it-pay.txt.tmp"
  mv "$OUT/does-it-pay.json.tmp" "$OUT/does-it-pay.json"
  mv "$OUT/does-it-pay.txt.tmp" "$OUT/does-it-pay.txt"
fi
if [ "$SMALL_K" -gt 0 ]; then
  sed -n '/^|V| = /,$p' "$OUT/does-it-pay.txt"
  pays=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['verdict'])" "$OUT/does-it-pay.json")
  if [ "$pays" != pays ] && [ "$SOFTMAX" = auto ] && [ "$COMPARE" = full ]; then
    echo "The small softmax $pays here (above); COMPARE=full trains both, K=$K and the full softmax, and the" \
      "verdict compares them." >&2
  elif [ "$pays" != pays ] && [ "$SOFTMAX" = auto ]; then
    echo "The small softmax $pays here (above): the quick start trains and decodes with the full softmax" \
      "(--small-vocab-size 0), and step 3 (the predictor) is skipped. SOFTMAX=small keeps K=$K." >&2
    SMALL_K=0
  elif [ "$pays" != pays ]; then
    echo "The small softmax $pays here (above); SOFTMAX=small: the quick start keeps K=$K." >&2
  fi
fi
# the softmax CE trained with, which REINFORCE and decoding must keep (another decision on a finished CE: refused)
if [ -f "$OUT/ce/quickstart.softmax" ] && [ "$(cat "$OUT/ce/quickstart.softmax")" != "$SMALL_K" ]; then
  echo "error: $OUT/ce was trained with $(sed 's/^0$/the full softmax/; s/^[1-9].*/K = &/' "$OUT/ce/quickstart.softmax")," \
    "and today's settings decide $([ "$SMALL_K" = 0 ] && echo "the full softmax" || echo "K = $SMALL_K")" \
    "(SOFTMAX=$SOFTMAX, $OUT/does-it-pay.txt): set SOFTMAX to what CE used, or use another OUT" >&2
  exit 2
fi
if [ "$SMALL_K" -gt 0 ]; then
  SMALL=(--task translation_smallvocab -s "$SRC" -t "$TGT" --vocab-predictor "$OUT/vp/checkpoint_best.pt"
         --small-vocab-size "$K")
else
  SMALL=(--task translation_smallvocab -s "$SRC" -t "$TGT" --small-vocab-size 0)
fi
FULL=(--task translation_smallvocab -s "$SRC" -t "$TGT" --small-vocab-size 0)  # COMPARE=full's arms

# what step 7 exports: nothing for the control (LAMBDA=1: CE continued, nothing to deploy), nor without ctranslate2
CONTROL=
if awk -v lambda="$LAMBDA" 'BEGIN { exit !(lambda + 0 == 1) }'; then CONTROL=yes; fi
HAS_CT2=
if [ -z "$CONTROL" ] && python -c "import ctranslate2" 2>/dev/null; then HAS_CT2=yes; fi

# BUDGET: the plan of the trainings still to run (OUT/budget.json), and each one's --stop-time-hours at its start
STOP=()
if [ -n "$BUDGET" ]; then
  steps=()
  arms=("")
  if [ "$COMPARE" = full ]; then arms+=(-full); fi
  if [ "$SMALL_K" -gt 0 ] && [ ! -f "$OUT/vp/.quickstart-done" ]; then steps+=(vp); fi
  for arm in "${arms[@]}"; do [ -f "$OUT/ce$arm/.quickstart-done" ] || steps+=("ce$arm"); done
  for arm in "${arms[@]}"; do [ -f "$RL_SAVE$arm/.quickstart-done" ] || steps+=("rl$arm"); done
  export_after=
  if [ -n "$HAS_CT2" ]; then export_after=--export; fi
  if [ ${#steps[@]} -gt 0 ]; then
    step "BUDGET=$BUDGET: the plan ($OUT/budget.json)"
    python scripts/time_budget.py plan --budget "$BUDGET" --spent "$SECONDS" --steps "${steps[@]}" \
      --does-it-pay "$OUT/does-it-pay.json" --softmax "$([ "$SMALL_K" = 0 ] && echo full || echo small)" \
      --dev-sentences "$(wc -l < "$DATA/raw/valid.$TGT")" --test-sentences "$(wc -l < "$DATA/raw/test.$TGT")" \
      --models "$([ "$COMPARE" = full ] && echo 4 || echo 2)" $export_after \
      --caps "vp=$VP_EPOCHS" "ce=$CE_UPDATES" "rl=$RL_UPDATES" --out "$OUT/budget.json"
    planned=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['updates'].get('ce') or '')" \
      "$OUT/budget.json")
    if [ -z "$WARMUP_GIVEN" ] && [ -n "$planned" ] && [ "$(( planned / 10 ))" -lt "$WARMUP" ]; then
      WARMUP=$(( planned / 10 < 1 ? 1 : planned / 10 ))  # (inverse_sqrt's peak inside the updates CE will make)
      echo "CE's warmup: $WARMUP updates, a tenth of the $planned planned (WARMUP sets it)"
      ce_settings
    fi
  fi
fi
stop_at() {  # stop_at STEP CHECKPOINT: STOP, STEP's --stop-time-hours under BUDGET (CHECKPOINT: the one it loads)
  STOP=()
  if [ -z "$BUDGET" ]; then return; fi
  local hours
  hours=$(python scripts/time_budget.py limit --plan "$OUT/budget.json" --step "$1" --spent "$SECONDS" --start "$2")
  STOP=(--stop-time-hours "$hours")
}

step "3/8 the vocabulary predictor ($VP_EPOCHS epochs): $OUT/vp"
if [ "$SMALL_K" = 0 ]; then
  echo "skipped: the full softmax"
elif [ ! -f "$OUT/vp/.quickstart-done" ]; then
  record "$OUT/vp/quickstart.settings" "${VP_SETTINGS[@]}"
  stop_at vp "$OUT/vp/checkpoint_last.pt"
  fairseq-train "$DATA" "${COMMON[@]}" -s "$SRC" -t "$TGT" --task vocab_prediction --arch vocab_predictor \
    --criterion vocab_prediction_bce --recall-at "$K" --optimizer adagrad --lr 0.08 --weight-decay 1e-6 \
    --clip-norm 1.0 --batch-size 128 --max-epoch "$VP_EPOCHS" --best-checkpoint-metric "recall@$K" \
    --maximize-best-checkpoint-metric --save-dir "$OUT/vp" --no-epoch-checkpoints "${STOP[@]}" 2>&1 \
    | tee -a "$OUT/vp.train.log" | shown
  touch "$OUT/vp/.quickstart-done"
fi
if [ "$SMALL_K" -gt 0 ]; then
  python scripts/recall_curve.py --run "predictor=$OUT/vp/checkpoint_best.pt" --split valid --ks "$K"
fi

begin() {  # begin FOLDER K NAME=VALUE...: a training's folder, its settings and its softmax (K; 0: full) recorded
  local folder=$1 k=$2
  shift 2
  mkdir -p "$folder"
  record "$folder/quickstart.settings" "$@"
  echo "$k" > "$folder/quickstart.softmax"
}
train_ce() {  # train_ce FOLDER K TASK_FLAGS...: CE with the flags' softmax (K candidates; 0: full) into FOLDER, once
  local folder=$1
  if [ -f "$folder/.quickstart-done" ]; then return; fi
  begin "$folder" "$2" "${CE_SETTINGS[@]}"
  stop_at "$(basename "$folder")" "$folder/checkpoint_last.pt"
  shift 2
  fairseq-train "$DATA" "${COMMON[@]}" "$@" $ARCH_ARGS \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --optimizer adam --adam-betas '(0.9, 0.98)' \
    --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --clip-norm 1.0 --max-tokens 4096 \
    --eval-bleu --eval-bleu-remove-bpe sentencepiece --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
    --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --max-epoch "$CE_EPOCHS" \
    --max-update "$CE_UPDATES" --patience "$CE_PATIENCE" "${STOP[@]}" \
    --save-dir "$folder" --no-epoch-checkpoints 2>&1 | tee -a "$folder.train.log" | shown
  touch "$folder/.quickstart-done"
}
train_rl() {  # train_rl FOLDER CE_FOLDER K TASK_FLAGS...: REINFORCE from CE_FOLDER's best checkpoint, once
  local folder=$1 ce=$2 arm=
  if [ -f "$folder/.quickstart-done" ]; then return; fi
  begin "$folder" "$3" "${RL_SETTINGS[@]}"
  if [ "$3" = 0 ] && [ "$COMPARE" = full ]; then arm=-full; fi
  # (a resumed run loads its own last checkpoint; a new one, CE's best: fairseq counts the training time of either)
  stop_at "rl$arm" "$([ -f "$folder/checkpoint_last.pt" ] && echo "$folder/checkpoint_last.pt" || echo "$ce/checkpoint_best.pt")"
  shift 3
  fairseq-train "$DATA" "${COMMON[@]}" "$@" $ARCH_ARGS \
    --finetune-from-model "$ce/checkpoint_best.pt" --criterion smallvocab_reinforce --reward "$REWARD" \
    --reward-post-process sentencepiece --rl-samples "$SAMPLES" --rl-baseline loo --ce-weight "$LAMBDA" \
    --max-sample-len 100 --sample-len-ratio 1.5 --optimizer adam --lr "$RL_LR" --clip-norm 1.0 --batch-size 64 \
    --max-update "$RL_UPDATES" --validate-interval-updates 50 --save-interval-updates 50 --keep-interval-updates 1 \
    --eval-bleu --eval-bleu-remove-bpe sentencepiece --eval-bleu-args '{"beam": 1, "max_len_a": 1.5, "max_len_b": 10}' \
    --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --save-dir "$folder" --no-epoch-checkpoints \
    --log-interval "$RL_LOG" "${STOP[@]}" 2>&1 | tee -a "$folder.train.log" | shown "train_inner"
  touch "$folder/.quickstart-done"
  # (the interval checkpoint is there to resume a stopped run, as checkpoint_last.pt is: a finished run needs
  # neither twice)
  rm -f "$folder"/checkpoint_[0-9]*_[0-9]*.pt
}

step "4/8 CE $([ "$SMALL_K" = 0 ] && echo "with the full softmax" || echo "inside the $K candidates") (until dev" \
  "BLEU stops rising for $CE_PATIENCE epochs, at most $CE_UPDATES updates): $OUT/ce" \
  "$([ "$COMPARE" = full ] && echo "; COMPARE=full: the full softmax too, $OUT/ce-full")"
train_ce "$OUT/ce" "$SMALL_K" "${SMALL[@]}"
if [ "$COMPARE" = full ]; then train_ce "$OUT/ce-full" 0 "${FULL[@]}"; fi

step "5/8 REINFORCE ($REWARD, $SAMPLES samples, lambda $LAMBDA, Adam $RL_LR, $RL_UPDATES updates): $RL_SAVE" \
  "$([ "$COMPARE" = full ] && echo "; COMPARE=full: from the full softmax's CE too, $RL_SAVE-full")"
train_rl "$RL_SAVE" "$OUT/ce" "$SMALL_K" "${SMALL[@]}"
if [ "$COMPARE" = full ]; then train_rl "$RL_SAVE-full" "$OUT/ce-full" 0 "${FULL[@]}"; fi

step "6/8 test BLEU, beam $BEAM (length penalty: $LENPEN), against the raw references ($DATA/raw/test.$TGT: $RAW's," \
  "checked)"
GEN=(--max-len-a 1.5 --max-len-b 10 --batch-size 64 --post-process sentencepiece)
evaluate() {  # evaluate RUN TASK_FLAGS...: RUN's best checkpoint on test at its length penalty (sets lenpen)
  local run=$1 evaluated
  shift
  # an unchanged checkpoint evaluated at the same settings: its scores are reused
  evaluated="BEAM=$BEAM REQUESTED=$LENPEN BLEU_TOKENIZE=$BLEU_TOKENIZE CHECKPOINT=$(stat -c '%Y %s' \
    "$run/checkpoint_best.pt" 2>/dev/null || echo none)"
  if [ -f "$run/hyp-test.txt" ] && [ "$(grep -v '^LENPEN=' "$run/eval.settings" 2>/dev/null)" = "$evaluated" ]; then
    lenpen=$(sed -n 's/^LENPEN=//p' "$run/eval.settings")
    echo "$run: $(python scripts/bleu.py --tokenize "$BLEU_TOKENIZE" --ref "$DATA/raw/test.$TGT" "$run/hyp-test.txt")" \
      "(lenpen $lenpen; evaluated before)"
    return
  fi
  rm -f "$run/eval.settings"
  lenpen=$LENPEN
  if [ "$LENPEN" = dev ] && [ "$BEAM" -gt 1 ]; then  # every model at its own best on dev, so none is favoured
    python scripts/sweep_lenpen.py --path "$run/checkpoint_best.pt" --data "$DATA" --beam "$BEAM" --subset valid \
      --ref "$DATA/raw/valid.$TGT" --tokenize "$BLEU_TOKENIZE" --out "$run/lenpen.json" -- "${COMMON[@]}" "$@" \
      "${GEN[@]}"
    lenpen=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['best_lenpen'])" "$run/lenpen.json")
  elif [ "$LENPEN" = dev ]; then
    lenpen=1  # greedy: no finished hypotheses to rank
  fi
  # (its log, fairseq's configuration included, into a file: on the screen only where it fails)
  if ! fairseq-generate "$DATA" "${COMMON[@]}" "$@" --path "$run/checkpoint_best.pt" --gen-subset test \
      --beam "$BEAM" --lenpen "$lenpen" "${GEN[@]}" > "$run/generate-test.txt" 2> "$run/generate-test.log"; then
    tail -20 "$run/generate-test.log" >&2
    echo "error: fairseq-generate failed on $run (its log: $run/generate-test.log)" >&2
    exit 1
  fi
  grep "^H-" "$run/generate-test.txt" | sort -t- -k2,2n | cut -f3 > "$run/hyp-test.txt"
  printf '%s\n' "$evaluated" "LENPEN=$lenpen" > "$run/eval.settings"
  echo "$run: $(python scripts/bleu.py --tokenize "$BLEU_TOKENIZE" --ref "$DATA/raw/test.$TGT" "$run/hyp-test.txt")" \
    "(lenpen $lenpen)"
}
if [ "$COMPARE" = full ]; then
  evaluate "$OUT/ce-full" "${FULL[@]}"
  evaluate "$RL_SAVE-full" "${FULL[@]}"
fi
evaluate "$OUT/ce" "${SMALL[@]}"
evaluate "$RL_SAVE" "${SMALL[@]}"  # (last: step 7 decodes at RL_SAVE's length penalty)

step "7/8 fairseq-interactive on the first 3 test sources as raw text, and CTranslate2 (a REINFORCE run, not" \
  "the control): $RL_SAVE/ct2"
# (the tuned model at its own length penalty: lenpen is the loop's last, RL_SAVE's)
head -3 "$DATA/raw/test.$SRC" | fairseq-interactive "$DATA" "${COMMON[@]}" "${SMALL[@]}" \
  --path "$RL_SAVE/checkpoint_best.pt" --bpe sentencepiece --sentencepiece-model "$DATA/spm.$SRC.model" \
  --beam "$BEAM" --lenpen "$lenpen" --buffer-size 3 --batch-size 3 2>/dev/null | grep "^D-"

if [ -n "$CONTROL" ]; then
  echo "not exported: RL_SAVE=$RL_SAVE is the control (LAMBDA=$LAMBDA: CE continued, no REINFORCE), there to be" \
    "compared, not deployed; the export is of a REINFORCE run (its RL_SAVE)" >&2
elif [ -z "$HAS_CT2" ]; then
  echo "ctranslate2 is not installed (pip install ctranslate2): the export is skipped" >&2
else
  VMAP=(--vmap-from "$OUT/vp/checkpoint_best.pt" --k "$K")  # the predictor as its vocabulary map
  if [ "$SMALL_K" = 0 ]; then VMAP=(); fi
  # (with the map, the export times it on THREADS threads and says whether use_vmap=True pays)
  python scripts/export_ctranslate2.py --path "$RL_SAVE/checkpoint_best.pt" --data "$DATA" --out "$RL_SAVE/ct2" \
    "${VMAP[@]}" --threads "$THREADS" --force
  echo "the Deploy code for $RL_SAVE/ct2: README.md, Deploy with CTranslate2 (sources as sentencepiece pieces:" \
    "$DATA/spm.$SRC.model)"
fi

step "8/8 the verdict: CE and the runs in $OUT (REINFORCE, CE continued) on test, paired bootstrap"
runs=("$RL_SAVE")
for settings in "$OUT"/*/quickstart.settings; do  # REINFORCE's and the control's (the predictor's and CE's: no LAMBDA)
  folder=$(dirname "$settings")
  # (a run of the other softmax, COMPARE=full's, is compared below, not here)
  if [ -f "$folder/eval.settings" ] && grep -q '^LAMBDA=' "$settings" \
      && [ "$(cat "$folder/quickstart.softmax" 2>/dev/null || echo "$SMALL_K")" = "$SMALL_K" ]; then
    runs+=("$folder")
  fi
done
VERSUS_FULL=()
if [ "$COMPARE" = full ]; then
  VERSUS_FULL=(--full-ce "$OUT/ce-full" --full-rl "$RL_SAVE-full" --does-it-pay "$OUT/does-it-pay.json")
fi
python scripts/quickstart_verdict.py --ce "$OUT/ce" --runs "${runs[@]}" --ref "$DATA/raw/test.$TGT" \
  --ce-log "$OUT/ce.train.log" --tokenize "$BLEU_TOKENIZE" --out "$OUT/verdict.txt" --json "$OUT/verdict.json" \
  "${VERSUS_FULL[@]}"
