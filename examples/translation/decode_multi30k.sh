#!/usr/bin/env bash
# Greedy decoding of Multi30k val and test2016 with SAVE/checkpoint_best.pt
# inside the K candidates (K=0: full softmax); sacrebleu's score per split, as
# fairseq-generate reports it and against the raw references.
# Used by run_multi30k.sh and run_reinforce_multi30k.sh (same settings;
# DEVICE=cuda decodes on the GPU; CKPT, default SAVE/checkpoint_best.pt).
set -euo pipefail
: "${DATA:?}" "${CANDS:?}" "${K:?}" "${SAVE:?}"
CKPT=${CKPT:-$SAVE/checkpoint_best.pt}
DEV_ARGS=$([ "${DEVICE:-cpu}" = cpu ] && echo --cpu || true)
for split in valid test; do
  fairseq-generate "$DATA" --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de \
    --candidates-dir "$CANDS" --small-vocab-size "$K" --path "$CKPT" \
    --gen-subset "$split" --beam 1 --max-len-a 1.5 --max-len-b 10 --batch-size 128 $DEV_ARGS \
    --scoring sacrebleu > "$SAVE/generate-$split.txt"
  echo "$split: $(tail -1 "$SAVE/generate-$split.txt")"
  # against the raw references (fairseq's own scorer sees <unk> for reference words outside the
  # dictionary); the text is tokenized already, so no further tokenization (as multi-bleu.perl)
  grep "^H-" "$SAVE/generate-$split.txt" | sort -t- -k2,2n | cut -f3 > "$SAVE/hyp-$split.txt"
  echo "$split, raw references: $(sacrebleu -tok none -b "$DATA/raw/$split.de" -i "$SAVE/hyp-$split.txt" 2>/dev/null)"
done
