#!/usr/bin/env python3
"""Rare-word tail statistics of tokenized text files, as a markdown table.

    python scripts/tail_stats.py demo/raw/train.tgt ../shared/data/multi30k/train.de
"""

import argparse
from collections import Counter

from smallvocab_tools.data.stats import tail_stats
from smallvocab_tools.data.text import read_lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    print("| file | tokens | types | seen once | seen <= 3 times | tokens in top 10% types | Zipf slope |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for path in args.files:
        counts = Counter(w for line in read_lines(path) for w in line.split())
        t = tail_stats(counts.values())
        print(f"| {path} | {sum(counts.values()):,} | {len(counts):,} | {t['singleton_share']:.1%} | "
              f"{t['at_most_3_share']:.1%} | {t['top10pct_token_share']:.1%} | {t['zipf_slope']} |")


if __name__ == "__main__":
    main()
