#!/usr/bin/env bash
# The project's demo, end to end on data it generates itself (run by `make demo`,
# with the project's .venv first on PATH): a synthetic parallel corpus, the
# vocabulary predictor, CE pre-training and REINFORCE of the translation model
# with the small vocabulary, decoding inside the predicted vocabulary, BLEU
# before and after REINFORCE, and REINFORCE steps small vs full softmax on the
# same batches for the speed line.  Ends with a summary (also in
# $DEMO_DIR/summary.json).
# Settings through the environment:
#   DEMO_DIR (default demo), DEMO_VOCAB (target words, default 10000),
#   DEMO_TRAIN (training sentences, default 25000), DEMO_VP_EPOCHS (predictor
#   epochs, default 5), DEMO_DIM (model size d, default 256), DEMO_CE_UPDATES
#   (default 600), DEMO_RL_UPDATES (default 150), DEMO_REWARD (REINFORCE's
#   --reward, default gleu_bp), DEMO_BENCH_STEPS (timed
#   REINFORCE steps per softmax and round, default 2), DEMO_BENCH_ROUNDS
#   (interleaved small/full rounds of the speed line, default 3),
#   DEMO_THREADS (torch threads, default 2).
set -euo pipefail
shopt -s inherit_errexit  # a failing command inside $(...) stops the demo too
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_VOCAB=${DEMO_VOCAB:-10000}
DEMO_TRAIN=${DEMO_TRAIN:-25000}
DEMO_VP_EPOCHS=${DEMO_VP_EPOCHS:-5}
DEMO_DIM=${DEMO_DIM:-256}
DEMO_CE_UPDATES=${DEMO_CE_UPDATES:-600}
DEMO_RL_UPDATES=${DEMO_RL_UPDATES:-150}
DEMO_REWARD=${DEMO_REWARD:-gleu_bp}
DEMO_BENCH_STEPS=${DEMO_BENCH_STEPS:-2}
DEMO_BENCH_ROUNDS=${DEMO_BENCH_ROUNDS:-3}
DEMO_THREADS=${DEMO_THREADS:-2}
export OMP_NUM_THREADS=$DEMO_THREADS MKL_NUM_THREADS=$DEMO_THREADS
BEGIN=$(date +%s)
step() { printf '\n== [%s] %s\n' "$(date -u -d "@$(( $(date +%s) - BEGIN ))" +%M:%S)" "$*"; }
# fairseq's log lines, shortened to what shows progress
progress() { grep --line-buffered -E "\| (train_inner|train|valid) \|" | sed -u -E 's/^.*\| (train_inner|train|valid) \|/  \1 |/'; }
COMMON=(--user-dir fairseq_smallvocab --cpu --num-workers 0 --seed 1 --no-progress-bar --log-format simple)

step "1/8 generating the synthetic corpus (|V_tgt| = $DEMO_VOCAB, $DEMO_TRAIN training sentences) into $DEMO_DIR/raw"
python scripts/make_synthetic_corpus.py --out "$DEMO_DIR/raw" --force \
  --tgt-vocab-size "$DEMO_VOCAB" --train-size "$DEMO_TRAIN"

step "2/8 binarizing with fairseq-preprocess into $DEMO_DIR/data-bin (every word kept)"
python scripts/prepare_data.py --raw-dir "$DEMO_DIR/raw" --src src --tgt tgt \
  --dest "$DEMO_DIR/data-bin" --min-count 1 --workers 2 --force

# the paper's rule for the size of the small vocabulary (K = 1000 above 10K words, else
# 500), capped by the dictionary: its words plus fairseq's 4 special symbols
V=$(( $(wc -l < "$DEMO_DIR/data-bin/dict.tgt.txt") + 4 ))
K=$(python -c "from fairseq_smallvocab.candidates.space import default_small_vocab_size as k; print(k($DEMO_VOCAB))")
K=$(( K < V ? K : V ))
DATA=(--task translation_smallvocab -s src -t tgt --small-vocab-size "$K"
      --vocab-predictor "$DEMO_DIR/predictor/checkpoint_best.pt" --candidates-dir "$DEMO_DIR/candidates")

step "3/8 training the vocabulary predictor ($DEMO_VP_EPOCHS epochs, K = $K) into $DEMO_DIR/predictor"
rm -rf "$DEMO_DIR/predictor" "$DEMO_DIR/candidates" "$DEMO_DIR/ce" "$DEMO_DIR/rl"
mkdir -p "$DEMO_DIR/predictor" "$DEMO_DIR/ce" "$DEMO_DIR/rl"
fairseq-train "$DEMO_DIR/data-bin" "${COMMON[@]}" \
  --task vocab_prediction --arch vocab_predictor --criterion vocab_prediction_bce \
  --recall-at "$K" --optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 \
  --batch-size 128 --max-epoch "$DEMO_VP_EPOCHS" --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 \
  --best-checkpoint-metric "recall@$K" --maximize-best-checkpoint-metric \
  --save-dir "$DEMO_DIR/predictor" --no-epoch-checkpoints --log-interval 100 2>&1 \
  | tee "$DEMO_DIR/predictor/train.log" | progress
python scripts/recall_curve.py --run "predictor=$DEMO_DIR/predictor/checkpoint_best.pt" --split test \
  --ks "100,$((K / 2)),$K,$((2 * K))" --png "$DEMO_DIR/recall.png" 2>/dev/null | tee "$DEMO_DIR/recall.md"

step "4/8 CE pre-training with the small vocabulary (K = $K, d = $DEMO_DIM, $DEMO_CE_UPDATES updates) into $DEMO_DIR/ce"
# candidates: the predictor's top K per sentence, computed once per split into
# $DEMO_DIR/candidates (training lists hold every gold word)
fairseq-train "$DEMO_DIR/data-bin" "${COMMON[@]}" "${DATA[@]}" \
  --arch lstm_smallvocab --embed-dim "$DEMO_DIM" --criterion cross_entropy \
  --optimizer adam --lr 0.002 --clip-norm 1.0 --batch-size 128 --max-update "$DEMO_CE_UPDATES" \
  --save-dir "$DEMO_DIR/ce" --no-epoch-checkpoints --log-interval 50 2>&1 | tee "$DEMO_DIR/ce/train.log" | progress

# greedy decoding of the test split inside the predicted vocabulary, scored against the raw references by the
# project's one BLEU (scripts/bleu.py: sacrebleu, its default tokenizer; the demo's words and punctuation are
# spaced already, which 13a keeps as they are)
decode() {  # decode CHECKPOINT OUT: the BLEU
  fairseq-generate "$DEMO_DIR/data-bin" "${COMMON[@]}" "${DATA[@]}" --path "$1" --gen-subset test \
    --beam 1 --max-len-a 1.2 --max-len-b 10 --batch-size 128 > "$2.log" 2>&1
  grep "^H-" "$2.log" | sort -t- -k2,2n | cut -f3 > "$2.txt"
  python scripts/bleu.py --score-only --ref "$DEMO_DIR/raw/test.tgt" "$2.txt"
}

step "5/8 decoding the test split inside the predicted vocabulary (greedy)"
BLEU_CE=$(decode "$DEMO_DIR/ce/checkpoint_last.pt" "$DEMO_DIR/test-ce")
echo "  BLEU after CE: $BLEU_CE ($(python -c "from smallvocab_tools.analysis.bleu import signature; print(signature())"))"

step "6/8 REINFORCE with the small vocabulary ($DEMO_RL_UPDATES updates; reward $DEMO_REWARD, learned baseline, lambda 0.005) into $DEMO_DIR/rl"
fairseq-train "$DEMO_DIR/data-bin" "${COMMON[@]}" "${DATA[@]}" \
  --arch lstm_smallvocab --embed-dim "$DEMO_DIM" --criterion smallvocab_reinforce --reward "$DEMO_REWARD" --ce-weight 0.005 \
  --max-sample-len 100 --sample-len-ratio 1.5 --finetune-from-model "$DEMO_DIR/ce/checkpoint_last.pt" \
  --optimizer sgd --lr 0.1 --clip-norm 1.0 --batch-size 128 --max-update "$DEMO_RL_UPDATES" \
  --save-dir "$DEMO_DIR/rl" --no-epoch-checkpoints --log-interval 10 2>&1 | tee "$DEMO_DIR/rl/train.log" | progress

step "7/8 decoding the test split after REINFORCE"
BLEU_RL=$(decode "$DEMO_DIR/rl/checkpoint_last.pt" "$DEMO_DIR/test-rl")
echo "  BLEU after REINFORCE: $BLEU_RL (the same signature)"

step "8/8 REINFORCE steps, small vocabulary vs full softmax (|V| = $V), same batches and weights"
# each softmax in a fresh process: 1 untimed step, then $DEMO_BENCH_STEPS timed ones; small and full
# alternate for $DEMO_BENCH_ROUNDS rounds, and the speed line is the median of the rounds' ratios
python scripts/benchmark.py --data "$DEMO_DIR/data-bin" --source-lang src --target-lang tgt \
  --candidates-dir "$DEMO_DIR/candidates" --k "$K" --modes reinforce --embed-dim "$DEMO_DIM" \
  --checkpoint "$DEMO_DIR/rl/checkpoint_last.pt" --steps "$DEMO_BENCH_STEPS" --warmup 1 \
  --rounds "$DEMO_BENCH_ROUNDS" \
  --threads "$DEMO_THREADS" --json "$DEMO_DIR/bench.json" > /dev/null

step "done in $(( ($(date +%s) - BEGIN) / 60 )) min $(( ($(date +%s) - BEGIN) % 60 )) s"
python scripts/demo_summary.py --demo-dir "$DEMO_DIR" --k "$K" --bleu-ce "$BLEU_CE" --bleu-rl "$BLEU_RL"
