#!/usr/bin/env python3
"""Multi-reference BLEU of fairseq-generate's captions: each image's
hypothesis against every caption of that image (sacrebleu).

Reads fairseq-generate's output (a file or stdin; the D- lines, else the H-
lines) for a split of a folder written by scripts/prepare_captions.py, with or
without --one-caption-per-image (told apart by the number of hypotheses: one
per image or one per caption).  References are the captions as binarized
(DATA/raw/SPLIT.LANG), without <unk> replacement.  The output's ids and its
references (T- lines) must be the split's: an output of another split is
refused, naming both.

    fairseq-generate DATA --user-dir fairseq_smallvocab --task captioning_smallvocab \\
        --path ckpt.pt --gen-subset test --one-caption-per-image --beam 5 > gen.out
    python scripts/caption_bleu.py --data DATA --split test gen.out
"""

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from smallvocab_tools.analysis import bleu as one_bleu


def read_output(lines):
    """({example id: hypothesis}, {example id: reference}): hypotheses from
    D- lines when there are any, else H- lines; references from T- lines."""
    found = {"D": {}, "H": {}, "T": {}}
    for line in lines:
        line = line.rstrip("\n")
        m = re.match(r"^([DH])-(\d+)\t[^\t]*\t?(.*)$", line) or re.match(r"^(T)-(\d+)\t(.*)$", line)
        if m:
            found[m.group(1)].setdefault(int(m.group(2)), m.group(3))
    return found["D"] or found["H"], found["T"]


def _ids(ids, limit=5):
    ids = sorted(ids)
    return ", ".join(map(str, ids[:limit])) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def same_caption(target: str, caption: str) -> bool:
    """Whether a T- line is this caption: fairseq-generate writes unknown
    words as <<unk>> (--min-count above 1), and --tokenizer or
    --post-process may join tokens, so spacing is not compared then."""
    t, c = target.split(), caption.split()
    if len(t) == len(c) and all(a == b or a == "<<unk>>" for a, b in zip(t, c)):
        return True
    return "".join(t) == "".join(c)


def score(hyps_by_id, captions, index, tokenize=one_bleu.TOKENIZE, targets=None):
    """(sacrebleu BLEU, images scored, its signature: ``bleu.signature``).  Ids are caption numbers when there is
    one hypothesis per caption, else ordinals of the images' first captions.
    ``targets`` (the T- lines, {id: reference}) are checked against the
    split's captions: the ids of two splits of the same size fit both."""
    from fairseq_smallvocab.data.caption_refs import (
        captions_by_image,
        first_caption_of_each_image,
        multi_reference_bleu,
        reference_streams,
    )

    firsts = first_caption_of_each_image(index)
    if len(hyps_by_id) == len(captions):
        caption_of = np.arange(len(captions))
    elif len(hyps_by_id) == len(firsts):
        caption_of = firsts
    else:
        raise ValueError(f"{len(hyps_by_id)} hypotheses, but the split has {len(captions)} captions of "
                         f"{len(firsts)} images: give the whole fairseq-generate output of this split")
    outside = set(hyps_by_id) - set(range(len(caption_of)))
    if outside:
        kind = "captions" if len(caption_of) == len(captions) else "images"
        missing = set(range(len(caption_of))) - set(hyps_by_id)
        raise ValueError(f"hypothesis id {_ids(outside)} is outside the split's {len(caption_of)} {kind} "
                         f"(ids 0..{len(caption_of) - 1}; missing: {_ids(missing)}): it was decoded from another "
                         "split or data folder; pass the --split (fairseq-generate's --gen-subset) and --data it "
                         "was decoded from")
    wrong = [i for i in sorted(targets or {}) if i < len(caption_of)
             and not same_caption(targets[i], captions[caption_of[i]])]
    if wrong:
        i = wrong[0]
        raise ValueError(f"{len(wrong)} of the {len(targets)} references in its T- lines are not the split's "
                         f"captions (T-{i}: {targets[i]!r}, line {caption_of[i] + 1} of the split: "
                         f"{captions[caption_of[i]]!r}): it was decoded from another split or data folder; pass the "
                         "--split (fairseq-generate's --gen-subset) and --data it was decoded from")
    refs_of = captions_by_image(captions, index)
    hyp_of_image = {}
    for i, hyp in sorted(hyps_by_id.items()):
        hyp_of_image.setdefault(int(index[caption_of[i]]), hyp)  # the image's first caption's decode
    rows = sorted(hyp_of_image)
    hyps = [hyp_of_image[r] for r in rows]
    refs = [refs_of[r] for r in rows]
    one_bleu.check_words(hyps, "the hypotheses")
    return (multi_reference_bleu(hyps, refs, tokenize), len(rows),
            one_bleu.signature(tokenize, reference_streams(refs)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("generate_output", nargs="?", help="fairseq-generate's output (default: stdin)")
    parser.add_argument("--data", required=True, help="the folder scripts/prepare_captions.py wrote")
    parser.add_argument("--split", default="test")
    parser.add_argument("--lang", default=None, help="the captions' suffix (default: from dict.LANG.txt)")
    one_bleu.add_tokenize_option(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON record instead of sacrebleu's line")
    args = parser.parse_args(argv)
    data = Path(args.data)
    from fairseq_smallvocab.data.datasets import single_dictionary_lang

    lang = args.lang or single_dictionary_lang(data)
    if lang is None:
        parser.exit(2, f"error: cannot tell the captions' language in {data} (one dict.LANG.txt expected): "
                       "pass --lang\n")
    refs_path, index_path = data / "raw" / f"{args.split}.{lang}", data / f"{args.split}.index"
    for path in (refs_path, index_path):
        if not path.is_file():
            parser.exit(2, f"error: {path} not found; --data must be a folder written by prepare_captions.py\n")
    captions = refs_path.read_text(encoding="utf-8").splitlines()
    index = np.loadtxt(index_path, dtype=np.int64, ndmin=1)
    stream = open(args.generate_output, encoding="utf-8") if args.generate_output else sys.stdin
    with stream:
        hyps, targets = read_output(stream)
    if not hyps:
        parser.exit(2, "error: no H-/D- lines in the input (run fairseq-generate without --quiet)\n")
    try:
        bleu, images, signature = score(hyps, captions, index, args.tokenize, targets)
    except ValueError as err:
        parser.exit(2, f"error: {args.generate_output or 'the input'} does not fit --split {args.split} of "
                       f"{data} ({refs_path}: {len(captions)} captions): {err}\n")
    if args.json:
        print(json.dumps({"bleu": round(bleu.score, 2), "images": images, "references": len(captions),
                          "precisions": [round(p, 2) for p in bleu.precisions], "bp": round(bleu.bp, 4),
                          "signature": signature}))
    else:
        print(f"{args.split}: {images} images, {len(captions)} references: {bleu} ({signature})")


if __name__ == "__main__":
    main()
