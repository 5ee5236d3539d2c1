#!/usr/bin/env bash
# The project's demo on data it generates itself (run by `make demo`, with the
# project's .venv first on PATH). Settings through the environment:
#   DEMO_DIR (default demo), DEMO_VOCAB (target vocabulary, default 24000),
#   DEMO_TRAIN (training sentences, default 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_VOCAB=${DEMO_VOCAB:-24000}
DEMO_TRAIN=${DEMO_TRAIN:-50000}
step() { printf '\n== %s\n' "$*"; }

step "1/2 generating the synthetic corpus (|V_tgt| = $DEMO_VOCAB, $DEMO_TRAIN training sentences) into $DEMO_DIR/raw"
python scripts/make_synthetic_corpus.py --out "$DEMO_DIR/raw" --force \
  --tgt-vocab-size "$DEMO_VOCAB" --train-size "$DEMO_TRAIN"

step "2/2 binarizing with fairseq-preprocess into $DEMO_DIR/data-bin (every word kept)"
python scripts/prepare_data.py --raw-dir "$DEMO_DIR/raw" --src src --tgt tgt \
  --dest "$DEMO_DIR/data-bin" --min-count 1 --workers 2 --force

step "done: train with fairseq-train $DEMO_DIR/data-bin --user-dir fairseq_smallvocab ..."
