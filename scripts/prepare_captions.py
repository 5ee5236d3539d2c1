#!/usr/bin/env python3
"""Binarize a captioning set for ``--task captioning_smallvocab``.

Reads RAW in one of two layouts:

* this project's (scripts/make_synthetic_captions.py): RAW/{train,valid,test}.LANG,
  RAW/{split}.npy, RAW/{split}.index;
* Kiros et al.'s precomputed features (--kiros f8k or --kiros coco; the files of
  their visual-semantic-embedding code, which the paper used): RAW/NAME_{train,dev,
  test}_caps.txt and RAW/NAME_{train,dev,test}_ims.npy (dev becomes valid).
  Captions are lowercased and tokenized; features become float32 with one row
  per image (rows repeated per caption are merged).

Writes DEST (only when complete): dict.LANG.txt and {split}.LANG-None.LANG.{bin,idx}
(fairseq-preprocess --only-source), {split}.npy, {split}.index, raw/{split}.LANG
(the references for scripts/caption_bleu.py) and stats.json.

    python scripts/prepare_captions.py --raw-dir data/captions-raw --dest data-bin/captions
    python scripts/prepare_captions.py --kiros f8k --raw-dir ~/data/f8k --dest data-bin/f8k --min-count 5
"""

import argparse
import json
import sys

from smallvocab_tools.data.caption_prep import prepare_captions
from smallvocab_tools.data.errors import DataError


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raw-dir", required=True, help="folder of the captions and features")
    parser.add_argument("--dest", required=True, help="output folder")
    parser.add_argument("--lang", default="en", help="the captions' suffix (this project's layout) and "
                                                     "the dictionary's name")
    parser.add_argument("--kiros", metavar="NAME", help="read Kiros et al.'s NAME_{split}_{caps.txt,ims.npy}")
    parser.add_argument("--captions-per-image", type=int, default=5, help="(--kiros) captions per image")
    parser.add_argument("--min-count", type=int, default=1,
                        help="keep words seen at least this often in train; the rest become <unk>")
    parser.add_argument("--l2-normalize", action="store_true", help="scale every feature row to unit length")
    parser.add_argument("--splits", nargs="+", default=["train", "valid", "test"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    args = parser.parse_args(argv)
    if args.captions_per_image < 1 or args.min_count < 1:
        parser.exit(2, "error: --captions-per-image and --min-count must be >= 1\n")
    try:
        stats = prepare_captions(args.raw_dir, args.dest, args.lang, args.kiros, args.captions_per_image,
                                 args.min_count, args.l2_normalize, tuple(args.splits), args.workers, args.force,
                                 log=lambda m: print(m, file=sys.stderr))
    except DataError as err:
        parser.exit(2, f"error: {err}\n")
    print(f"binarized into {args.dest}")
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
