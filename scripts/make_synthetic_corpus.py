#!/usr/bin/env python3
"""Generate the project's embedded synthetic parallel corpus (raw text).

Zipfian word frequencies, a target vocabulary of the requested size (every
target word occurs in train), sentence lengths in [min-len, max-len], and a
seeded source-to-target mapping with one-to-many and many-to-one words, gender
agreement and local reordering (see smallvocab_tools/data/synthetic.py).  The
same arguments always give the same bytes.

Writes OUT/{train,valid,test}.{src,tgt} (ready for fairseq-preprocess, or
scripts/prepare_data.py), OUT/lexicon.tsv (the content-word mapping) and
OUT/corpus.json (the settings and counts).

    python scripts/make_synthetic_corpus.py --out demo/raw --tgt-vocab-size 24000
"""

import argparse
import sys

from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.prep import add_config_args, config_from_args
from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (must not exist unless --force)")
    parser.add_argument("--src-lang", default="src")
    parser.add_argument("--tgt-lang", default="tgt")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    add_config_args(parser, SyntheticConfig)
    args = parser.parse_args(argv)
    cfg = config_from_args(args, SyntheticConfig)
    try:
        info = write_corpus(args.out, cfg, args.src_lang, args.tgt_lang, overwrite=args.force)
    except (ValueError, DataError) as err:
        parser.exit(2, f"error: {err}\n")
    print(f"wrote {args.out}: sentences {info['sentences']} (train includes "
          f"{info['coverage_sentences']} coverage sentences), target vocabulary "
          f"{info['tgt_vocab_size']}, source vocabulary {info['src_vocab_size']}", file=sys.stderr)


if __name__ == "__main__":
    main()
