#!/usr/bin/env bash
# Greedy decoding (BEAM=N: beam search of width N) of Multi30k val and test2016
# with SAVE/checkpoint_best.pt inside the K candidates (K=0: full softmax);
# sacrebleu's score per split, as fairseq-generate reports it and against the
# raw references.  Writes SAVE/generate-SPLIT.txt and SAVE/hyp-SPLIT.txt (with
# BEAM=N > 1: generate-SPLIT.beamN.txt, hyp-SPLIT.beamN.txt).  A beam search's
# length penalty (LENPEN) is chosen on val by default (LENPEN=dev:
# scripts/sweep_lenpen.py over LENPENS, the best by val BLEU, recorded in
# SAVE/lenpen.beamN.json), so that every model a recipe compares decodes test2016
# at its own best; LENPEN=1 is fairseq's default (the results page's tables
# before 2026-11-28 decoded with it).  What a beam decode was asked for
# (lenpen=dev with its LENPENS, or lenpen=N) is kept in SAVE/hyp.beamN.settings,
# written once both splits are; with SKIP_DONE=1 a decode whose hypotheses and
# record are today's is skipped, and any other is made again (so the recipes'
# tables never show a decode under a length penalty it did not have).
# Used by run_multi30k.sh, run_reinforce_multi30k.sh, run_transformer_multi30k.sh and
# run_transformer_rl_multi30k.sh (same settings;
# DEVICE=cuda decodes on the GPU; CKPT, default SAVE/checkpoint_best.pt; SRC
# and TGT, the languages, default en and de).
set -euo pipefail
: "${DATA:?}" "${CANDS:?}" "${K:?}" "${SAVE:?}"
CKPT=${CKPT:-$SAVE/checkpoint_best.pt}
BEAM=${BEAM:-1}
SRC=${SRC:-en}
TGT=${TGT:-de}
TAG=$([ "$BEAM" = 1 ] && echo "" || echo ".beam$BEAM")
LENPEN=${LENPEN:-dev}
LENPENS=${LENPENS:-0.6,0.8,1.0,1.2,1.4,1.6,2.0,2.5,3.0}
DEVICE=${DEVICE:-cpu}
case $DEVICE in cpu) DEV_ARGS=--cpu ;; cuda) DEV_ARGS= ;; *) echo "DEVICE=$DEVICE: cpu or cuda" >&2; exit 2 ;; esac
GEN=(--user-dir fairseq_smallvocab --task translation_smallvocab -s "$SRC" -t "$TGT" --candidates-dir "$CANDS"
     --small-vocab-size "$K" --max-len-a 1.5 --max-len-b 10 --batch-size 128 $DEV_ARGS)
if [ "$BEAM" = 1 ]; then
  LENPEN=1  # greedy: no finished hypotheses to rank
fi
ASKED="lenpen=$LENPEN"
if [ "$LENPEN" = dev ]; then ASKED="$ASKED lenpens=$LENPENS"; fi
RECORD=$SAVE/hyp$TAG.settings
if [ "${SKIP_DONE:-0}" = 1 ] && [ -f "$SAVE/hyp-test$TAG.txt" ] && [ -f "$RECORD" ] && [ "$(cat "$RECORD")" = "$ASKED" ]
then
  exit 0
fi
rm -f "$RECORD"  # until both splits are written again
if [ "$LENPEN" = dev ]; then
  python scripts/sweep_lenpen.py --path "$CKPT" --data "$DATA" --beam "$BEAM" --subset valid --lenpens "$LENPENS" \
    --ref "$DATA/raw/valid.$TGT" --out "$SAVE/lenpen$TAG.json" -- "${GEN[@]}"
  LENPEN=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['best_lenpen'])" "$SAVE/lenpen$TAG.json")
fi
for split in valid test; do
  fairseq-generate "$DATA" "${GEN[@]}" --path "$CKPT" --gen-subset "$split" --beam "$BEAM" --lenpen "$LENPEN" \
    --scoring sacrebleu > "$SAVE/generate-$split$TAG.txt"
  echo "$split$TAG: $(tail -1 "$SAVE/generate-$split$TAG.txt")"
  # against the raw references (fairseq's own scorer sees <unk> for reference words outside the
  # dictionary), by the project's one BLEU (scripts/bleu.py: sacrebleu's default tokenizer, with its signature)
  # written whole or not at all (a file cut short by a kill would read as a finished decode to the recipes)
  grep "^H-" "$SAVE/generate-$split$TAG.txt" | sort -t- -k2,2n | cut -f3 > "$SAVE/hyp-$split$TAG.txt.part"
  mv "$SAVE/hyp-$split$TAG.txt.part" "$SAVE/hyp-$split$TAG.txt"
  echo "$split$TAG, raw references: $(python scripts/bleu.py --ref "$DATA/raw/$split.$TGT" "$SAVE/hyp-$split$TAG.txt")"
done
echo "$ASKED" > "$RECORD"
