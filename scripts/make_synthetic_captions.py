#!/usr/bin/env python3
"""Generate the project's embedded synthetic captioning set: scenes (objects
with attributes, counts and positions, and a place) rendered into d_f-value
image features by a fixed sparse random projection plus noise, each with several
differently worded captions (see smallvocab_tools/data/synthetic_captions.py).
The same arguments always give the same bytes.

Writes OUT/{train,valid,test}.LANG (one caption per line), OUT/{split}.npy
(float32 features, one row per image), OUT/{split}.index (each caption's image
row) and OUT/config.json; binarize with scripts/prepare_captions.py.

    python scripts/make_synthetic_captions.py --out data/captions-raw
"""

import argparse
import sys

from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.output_dir import atomic_output_dir
from smallvocab_tools.data.prep import add_config_args, config_from_args
from smallvocab_tools.data.synthetic_captions import CaptionConfig, write_captions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (must not exist unless --force)")
    parser.add_argument("--lang", default="en", help="the captions' file suffix")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    add_config_args(parser, CaptionConfig)
    args = parser.parse_args(argv)
    cfg = config_from_args(args, CaptionConfig)
    try:
        cfg.validate()
        with atomic_output_dir(args.out, overwrite=args.force) as tmp:
            stats = write_captions(tmp, cfg, args.lang)
    except (ValueError, DataError) as err:
        parser.exit(2, f"error: {err}\n")
    for split, s in stats.items():
        print(f"{split}: {s['images']} images, {s['captions']} captions, {s['types']} word types", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
