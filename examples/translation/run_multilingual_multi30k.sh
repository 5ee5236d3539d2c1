#!/usr/bin/env bash
# REINFORCE on a multilingual model: Multi30k en -> {de, fr}, one stock fairseq Transformer for both pairs.
#   1. The data: both pairs binarized with one shared dictionary (scripts/prepare_multi30k.py --multilingual).
#   2. The stock model: fairseq-train --task translation_multi_simple_epoch (stock fairseq: no plugin),
#      language tokens as M2M-100 uses them (--encoder-langtok src --decoder-langtok), STOCK_EPOCHS epochs.
#   3. A vocabulary predictor per pair (the plugin's, on the same data): recall@K on each pair's val.
#   4. CE fine-tuning of the stock model with the plugin's task, small softmax (K) and full (0), FT_EPOCHS.
#   5. From the small CE checkpoint, for each seed in SEEDS: REINFORCE (RL_UPDATES updates, SAMPLES samples,
#      leave-one-out, GLEU, LAMBDA) and its control, CE continued (lambda 1) with the same optimizer and budget.
#   6. Every run decoded on test2016 for each pair (beam BEAM, inside its candidates; the stock and full ones
#      with the full softmax; the length penalty LENPEN, by default each run's own for each pair, chosen on val); BLEU per pair, and sacrebleu's paired bootstrap of every run against the CE
#      checkpoint, and of each REINFORCE run against its own control: OUT/table.md.
# A step whose result exists is skipped (a stopped training resumes from its checkpoint_last.pt), so the
# recipe continues where it stopped. Run from the project root with the project's environment active:
#   source .venv/bin/activate && bash examples/translation/run_multilingual_multi30k.sh
# Settings: DATA, OUT, K, SEEDS, STOCK_EPOCHS, VP_EPOCHS, FT_EPOCHS, RL_UPDATES, LR (REINFORCE's and the
# control's), LAMBDA, SAMPLES, BEAM, LENPEN (dev, or a number), LENPENS, THREADS, ARCH_ARGS (the model's flags;
# default: transformer_multi30k_multilingual.args), MAX_TOKENS, SAVE_EVERY (updates between checkpoints).
set -euo pipefail
DATA=${DATA:-data-bin/multi30k.en-de.en-fr}
OUT=${OUT:-checkpoints/ml-multi30k}
K=${K:-1000}
SEEDS=${SEEDS:-1 2}
STOCK_EPOCHS=${STOCK_EPOCHS:-5}
VP_EPOCHS=${VP_EPOCHS:-10}
FT_EPOCHS=${FT_EPOCHS:-1}
RL_UPDATES=${RL_UPDATES:-200}
LR=${LR:-3e-5}
LAMBDA=${LAMBDA:-0.005}
SAMPLES=${SAMPLES:-4}
BEAM=${BEAM:-5}
LENPEN=${LENPEN:-dev}  # dev: each model's own, per pair, chosen on val over LENPENS (scripts/sweep_lenpen.py)
LENPENS=${LENPENS:-0.6,0.8,1.0,1.2,1.4,1.6,2.0,2.5,3.0}
THREADS=${THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-4096}
HERE=$(dirname "$0")
ARCH_ARGS=${ARCH_ARGS:-$(cat "$HERE/transformer_multi30k_multilingual.args")}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
PAIRS="en-de en-fr"
LANGS=(--lang-pairs en-de,en-fr --encoder-langtok src --decoder-langtok)
OURS=(--user-dir fairseq_smallvocab --task translation_multi_smallvocab "${LANGS[@]}")
# a checkpoint (and a validation) every SAVE_EVERY updates as well as at each epoch's end: a stopped run resumes
# within its epoch (an epoch of the stock model takes about 18 minutes on 2 free cores)
SAVE_EVERY=${SAVE_EVERY:-50}
COMMON=(--cpu --num-workers 0 --no-progress-bar --log-format simple --log-interval 50 --no-epoch-checkpoints
        --save-interval-updates "$SAVE_EVERY" --keep-interval-updates 1)
CE_ARGS=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1 --optimizer adam --adam-betas "(0.9, 0.98)"
         --clip-norm 1.0 --max-tokens "$MAX_TOKENS")
mkdir -p "$OUT"

[ -d "$DATA" ] || python scripts/prepare_multi30k.py --pairs $PAIRS --multilingual --out-dir "$(dirname "$DATA")"

finished() { [ -f "$1/finished" ]; }  # finished SAVE: the run trained to its end
# train SAVE ARGS...: fairseq-train into SAVE (resumed from its checkpoint_last.pt), then marked finished; a run
# started with other arguments (another K, LR, LAMBDA, ...) is refused rather than resumed or reported as today's
train() {
  local save=$1 asked
  shift
  asked=$(printf '%s\n' "$@")
  if [ -f "$save/recipe.args" ] && [ "$(cat "$save/recipe.args")" != "$asked" ]; then
    echo "$save was trained with other arguments (its recipe.args) than asked now: move it away (or set OUT to" \
      "another folder) to train it again" >&2
    exit 2
  fi
  finished "$save" && return
  mkdir -p "$save"
  printf '%s\n' "$asked" > "$save/recipe.args"
  fairseq-train "$DATA" "$@" "${COMMON[@]}" --save-dir "$save" >> "$save/train.log" 2>&1 \
    || { echo "training $save failed: see $save/train.log" >&2; tail -5 "$save/train.log" >&2; exit 1; }
  touch "$save/finished"
}

# 2. the stock multilingual model (stock fairseq's task and model; --user-dir only lets torch >= 2.6 read the
#    argparse Namespace of the checkpoint it resumes from)
# shellcheck disable=SC2086
train "$OUT/stock" --user-dir fairseq_smallvocab --task translation_multi_simple_epoch "${LANGS[@]}" $ARCH_ARGS "${CE_ARGS[@]}" --lr 0.001 \
  --lr-scheduler inverse_sqrt --warmup-updates 400 --max-epoch "$STOCK_EPOCHS" --seed 1

# 3. one predictor per pair, the paper's settings
SPEC=
for pair in $PAIRS; do
  src=${pair%-*} tgt=${pair#*-}
  train "$OUT/vp-$pair" --user-dir fairseq_smallvocab --task vocab_prediction -s "$src" -t "$tgt" \
    --arch vocab_predictor --criterion vocab_prediction_bce --recall-at "100,500,$K" --label-smoothing 0.1 \
    --optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 \
    --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --max-epoch "$VP_EPOCHS" \
    --best-checkpoint-metric "recall@$K" --maximize-best-checkpoint-metric --seed 1
  SPEC=${SPEC:+$SPEC,}$pair:$OUT/vp-$pair/checkpoint_best.pt
  echo "predictor $pair, best val recall@$K: $(grep -o "best_recall@$K [0-9.]*" "$OUT/vp-$pair/train.log" | tail -1)"
done

# 4. CE fine-tuning of the stock model, small softmax and full, the same model and code
for k in "$K" 0; do
  # shellcheck disable=SC2086
  train "$OUT/ce-k$k" "${OURS[@]}" --vocab-predictor "$SPEC" --small-vocab-size "$k" $ARCH_ARGS "${CE_ARGS[@]}" \
    --lr 1e-4 --finetune-from-model "$OUT/stock/checkpoint_best.pt" --max-epoch "$FT_EPOCHS" --seed 1
done

# 5. REINFORCE and its control (CE continued), from the small CE checkpoint, each seed
for seed in $SEEDS; do
  for run in rl ctl-ce; do
    lambda=$LAMBDA
    [ "$run" = ctl-ce ] && lambda=1
    # shellcheck disable=SC2086
    train "$OUT/$run-s$seed" "${OURS[@]}" --vocab-predictor "$SPEC" --small-vocab-size "$K" $ARCH_ARGS \
      --criterion smallvocab_reinforce --rl-samples "$SAMPLES" --rl-baseline loo --ce-weight "$lambda" \
      --optimizer adam --lr "$LR" --max-tokens "$MAX_TOKENS" \
      --finetune-from-model "$OUT/ce-k$K/checkpoint_last.pt" --max-update "$RL_UPDATES" --seed "$seed"
  done
done

# 6. decoding and the table (the stock model's best checkpoint, where fine-tuning started; the others' last)
lines() {  # lines H|T FIELD < fairseq-generate's output: that field of its H- or T- lines, in the test set's order
  awk -F'\t' -v tag="$1-" -v field="$2" 'index($1, tag) == 1 { print substr($1, 3) "\t" $field }' | sort -n -k1,1 \
    | cut -f2-
}
decode() {  # decode SAVE CKPT K TASK...: test2016 of each pair, hypotheses and references in the test set's order
  local save=$1 ckpt=$2 k=$3 pair tgt
  shift 3
  for pair in $PAIRS; do
    tgt=${pair#*-}
    [ -f "$save/hyp-test.$tgt.txt" ] && continue
    local gen=("$@" -s "${pair%-*}" -t "$tgt" --batch-size 64 --required-batch-size-multiple 1 --max-len-a 1.5
               --max-len-b 10 --cpu ${k:+--small-vocab-size $k}) lenpen=$LENPEN
    if [ "$BEAM" -gt 1 ] && [ "$lenpen" = dev ]; then  # the length penalty of this model and pair, chosen on val
      python scripts/sweep_lenpen.py --path "$save/$ckpt" --data "$DATA" --beam "$BEAM" --subset valid \
        --lenpens "$LENPENS" --out "$save/lenpen.$tgt.json" -- "${gen[@]}" 2>> "$save/generate.log"
      lenpen=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['best_lenpen'])" "$save/lenpen.$tgt.json")
    fi
    [ "$lenpen" = dev ] && lenpen=1  # greedy
    fairseq-generate "$DATA" "${gen[@]}" --path "$save/$ckpt" --gen-subset test --beam "$BEAM" --lenpen "$lenpen" \
      > "$save/generate-test.$tgt.txt" 2>> "$save/generate.log"
    lines H 3 < "$save/generate-test.$tgt.txt" > "$save/hyp-test.$tgt.txt.tmp"
    lines T 2 < "$save/generate-test.$tgt.txt" > "$save/ref-test.$tgt.txt"
    mv "$save/hyp-test.$tgt.txt.tmp" "$save/hyp-test.$tgt.txt"
  done
}
decode "$OUT/stock" checkpoint_best.pt "" --user-dir fairseq_smallvocab --task translation_multi_simple_epoch "${LANGS[@]}"
decode "$OUT/ce-k0" checkpoint_last.pt 0 "${OURS[@]}"
RUNS=(--run "stock=$OUT/stock" --run "ce-full=$OUT/ce-k0")
VERSUS=()  # each REINFORCE run in the table against its own control alone
for save in "$OUT/ce-k$K" "$OUT"/rl-s* "$OUT"/ctl-ce-s*; do
  [ -d "$save" ] || continue
  decode "$save" checkpoint_last.pt "$K" "${OURS[@]}"
  run=$(basename "$save")
  RUNS+=(--run "$run=$save")
  [[ $run == rl-s* && -d "$OUT/ctl-ce-${run#rl-}" ]] && VERSUS+=(--versus "$run=ctl-ce-${run#rl-}")
done
python scripts/paired_bleu.py "${RUNS[@]}" --baseline "ce-k$K" "${VERSUS[@]}" --langs de fr --out "$OUT/table.md"
