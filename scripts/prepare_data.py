#!/usr/bin/env python3
"""Check, (optionally) subword-encode and binarize a raw parallel corpus for fairseq.

Reads RAW/{train,valid,test}.{SRC,TGT} (prefixes configurable), checks that
each pair of files is sentence-aligned and has no empty lines (or drops such
pairs with --empty-lines drop), and writes DEST with:

    dict.SRC.txt, dict.TGT.txt, {train,valid,test}.SRC-TGT.{SRC,TGT}.{bin,idx}
                  fairseq-preprocess output, for fairseq-train/-generate
    raw/          the checked text that was binarized (references for BLEU)
    spm.SRC.model, spm.TGT.model
                  with --subword sentencepiece (decode with
                  fairseq-generate --post-process sentencepiece)
    stats.json    sentence/token/type/length statistics and OOV rates

DEST is written to a temporary folder and renamed when complete: a failed or
killed run leaves nothing that looks finished (and, on SIGTERM or Ctrl-C, no
fairseq-preprocess still running).

    python scripts/prepare_data.py --raw-dir demo/raw --src src --tgt tgt \\
        --dest demo/data-bin --min-count 1
"""

import argparse
import sys

from smallvocab_tools.data import prep
from smallvocab_tools.data.stats import format_stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", required=True, help="output folder for the binarized data")
    prep.add_prepare_args(parser)
    parser.add_argument("--raw-dir", required=True, help="folder with the raw text files")
    parser.add_argument("--src", required=True, help="source language suffix, e.g. en")
    parser.add_argument("--tgt", required=True, help="target language suffix, e.g. de")
    parser.add_argument("--train", default="train", help="file prefix of the training split")
    parser.add_argument("--valid", default="valid", help="file prefix of the validation split ('' for none)")
    parser.add_argument("--test", default="test", help="file prefix of the test split ('' for none)")
    args = parser.parse_args(argv)
    splits = {role: getattr(args, role) for role in ("train", "valid", "test") if getattr(args, role)}
    try:
        with prep.exit_on_sigterm():  # so that the cleanup runs: the temporary folder, fairseq-preprocess
            stats = prep.prepare(args.raw_dir, args.dest, args.src, args.tgt, splits, args.min_count,
                                 args.subword, args.sp_vocab_size, args.sp_model_type, args.empty_lines,
                                 args.workers, args.force, log=lambda m: print(m, file=sys.stderr),
                                 joined_dictionary=args.joined_dictionary)
    except prep.DataError as err:
        parser.exit(2, f"error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, f"interrupted: {args.dest} was not written\n")
    print(f"binarized into {args.dest}")
    print(format_stats(stats))


if __name__ == "__main__":
    main()
