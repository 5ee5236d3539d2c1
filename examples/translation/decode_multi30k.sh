#!/usr/bin/env bash
# Greedy decoding of Multi30k val and test2016 with SAVE/checkpoint_best.pt
# inside the K candidates (K=0: full softmax); sacrebleu's score per split.
# Used by run_multi30k.sh and run_reinforce_multi30k.sh (same settings).
set -euo pipefail
: "${DATA:?}" "${CANDS:?}" "${K:?}" "${SAVE:?}"
for split in valid test; do
  fairseq-generate "$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de \
    --candidates-dir "$CANDS" --small-vocab-size "$K" --path "$SAVE/checkpoint_best.pt" \
    --gen-subset "$split" --beam 1 --max-len-a 1.5 --max-len-b 10 --batch-size 128 --cpu \
    --scoring sacrebleu > "$SAVE/generate-$split.txt"
  echo "$split: $(tail -1 "$SAVE/generate-$split.txt")"
done
