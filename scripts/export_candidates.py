#!/usr/bin/env python3
"""Write each example's top-K predicted target words for one or more splits.

For the training split the gold target words are always included (the top K
of o + the gold indicator: the paper's 100% training recall), except for the
sentences fairseq-train skips as too long (--max-source-positions,
--max-target-positions); for the other splits the list is the predictor's
top K.  The unknown word is always
included.  Output per split: OUT/SPLIT.kK.npy (N x K ids, best first,
memory-mappable) and OUT/SPLIT.kK.json (how it was made); see
fairseq_smallvocab/predictor/lists.py.

    python scripts/export_candidates.py --predictor ckpt/vp/checkpoint_best.pt \\
        --data data-bin/multi30k.en-de --splits train valid test --k 500 --out-dir cands/
"""

import argparse
import logging
import sys

from fairseq_smallvocab.predictor.inference import PredictorError, export_split, file_sha256, load_predictor


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictor", required=True, help="vocab_predictor checkpoint")
    parser.add_argument("--data", default=None, help="data folder (default: the one the predictor was trained on)")
    parser.add_argument("--source-features", default=None, help="image-feature folder, for feature predictors")
    parser.add_argument("--splits", nargs="+", default=["train", "valid", "test"])
    parser.add_argument("--k", type=int, required=True, help="candidates per example (1..|V|)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--gold", choices=["train", "always", "never"], default="train",
                        help="force the gold words in: for the training split only (default), every split, "
                             "or none; the tasks refuse lists with gold words for evaluated splits (optimistic "
                             "scores) unless given --allow-gold-candidates")
    for side in ("source", "target"):
        parser.add_argument(f"--max-{side}-positions", type=int, default=1024,
                            help=f"gold words are forced in only for sentences whose {side} is at most this long: "
                                 "fairseq-train skips longer ones (give the value it trains with; default: "
                                 "fairseq's 1024)")
    parser.add_argument("--batch-size", type=int, default=256, help="most sentences per prediction batch")
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        overrides = {"source_features": args.source_features} if args.source_features else {}
        model, task = load_predictor(args.predictor, args.data, **overrides)
        digest = file_sha256(args.predictor)
        for split in args.splits:
            gold = args.gold == "always" or (args.gold == "train" and split == task.cfg.train_subset)
            path, ids, seconds = export_split(model, task, split, args.k, args.out_dir, args.predictor, digest,
                                              gold, args.batch_size, gold_within=(args.max_source_positions,
                                                                                  args.max_target_positions))
            print(f"{split}: {ids.shape[0]} examples x K={args.k} -> {path} "
                  f"({seconds:.2f} s, {1000 * seconds / max(1, ids.shape[0]):.2f} ms per example"
                  f"{', gold words included' if gold else ''})")
    except (PredictorError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
