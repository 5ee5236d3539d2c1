#!/usr/bin/env python3
"""Binarize Multi30k task 1 (tokenized, lowercased) for fairseq.

Reads train / val / test2016 .{en,de,fr} from a local folder (default:
../shared/data/multi30k beside the project, when it exists), or, with
--download, fetches the official tokenized task-1 files
(data/task1/tok/{train,val,test_2016_flickr}.lc.norm.tok.LANG) from the
dataset's public repository.  For each language pair it writes
OUT_DIR/multi30k.SRC-TGT (word level; words seen at least twice by default,
the paper's setting) or OUT_DIR/multi30k.SRC-TGT.spmN (--subword
sentencepiece), with .joined after either for --joined-dictionary, through scripts/prepare_data.py's pipeline: checked,
written atomically, with stats.json.  With --multilingual the pairs go into
one folder, OUT_DIR/multi30k.PAIR.PAIR..., binarized with one shared
dictionary (words), for fairseq's translation_multi_simple_epoch and the
plugin's translation_multi_smallvocab.

    python scripts/prepare_multi30k.py --out-dir data-bin --pairs en-de en-fr
    python scripts/prepare_multi30k.py --download --out-dir data-bin
    python scripts/prepare_multi30k.py --out-dir data-bin --pairs en-de en-fr --multilingual [--tagged]
"""

import argparse
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from smallvocab_tools.data import prep
from smallvocab_tools.data.multilingual_prep import prepare_multilingual, prepare_target_tagged
from smallvocab_tools.data.output_dir import check_dest_apart_from_inputs
from smallvocab_tools.data.stats import format_stats

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "multi30k"
OFFICIAL_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/tok"
# our file prefix -> the official file's prefix
OFFICIAL_NAMES = {"train": "train.lc.norm.tok", "val": "val.lc.norm.tok",
                  "test2016": "test_2016_flickr.lc.norm.tok"}
SPLITS = {"train": "train", "valid": "val", "test": "test2016"}


def download(url, langs, dest: Path, log=print):
    """Fetch the official files for ``langs`` into ``dest`` under our names."""
    for ours, theirs in OFFICIAL_NAMES.items():
        for lang in langs:
            src = f"{url.rstrip('/')}/{theirs}.{lang}"
            target = dest / f"{ours}.{lang}"
            log(f"downloading {src}")
            try:
                with urllib.request.urlopen(src, timeout=60) as response, open(target, "wb") as f:
                    shutil.copyfileobj(response, f)
            except (urllib.error.URLError, OSError) as err:
                raise prep.DataError(f"cannot download {src}: {err}; pass --source DIR with the "
                                     "files train/val/test2016.LANG instead") from err


def parse_pair(text):
    parts = text.split("-")
    if len(parts) != 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"a pair looks like en-de, not {text!r}")
    return parts[0], parts[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--source", type=Path, default=None,
                       help=f"folder with train/val/test2016.LANG (default: {DEFAULT_SOURCE})")
    where.add_argument("--download", action="store_true", help="fetch the official files instead")
    parser.add_argument("--download-url", default=OFFICIAL_URL, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path, default=REPO / "data-bin")
    parser.add_argument("--pairs", nargs="+", type=parse_pair, default=[("en", "de")],
                        help="language pairs, e.g. en-de en-fr (default: en-de)")
    parser.add_argument("--multilingual", action="store_true",
                        help="every pair into one folder with one shared dictionary (words only)")
    parser.add_argument("--tagged", action="store_true",
                        help="with --multilingual: also FOLDER.tagged, the data of one vocabulary predictor for "
                             "every pair told the target language (each source behind its target language's "
                             "token; val per pair: valid, valid1, ...)")
    prep.add_prepare_args(parser)
    args = parser.parse_args(argv)
    if args.multilingual and args.subword != "none":
        parser.error("--multilingual binarizes words: leave out --subword")
    if args.multilingual and args.joined_dictionary:
        parser.error("--multilingual makes one dictionary for every language already: leave out --joined-dictionary")
    if args.tagged and not args.multilingual:
        parser.error("--tagged goes with --multilingual")

    def log(message):
        print(message, file=sys.stderr)

    langs = sorted({lang for pair in args.pairs for lang in pair})
    tmp = None
    try:
        if args.download:
            tmp = Path(tempfile.mkdtemp(prefix="multi30k-"))
            download(args.download_url, langs, tmp, log)
            source = tmp
        else:
            source = args.source or DEFAULT_SOURCE
            if not source.is_dir():
                raise prep.DataError(f"no Multi30k folder at {source}; pass --source DIR or --download")
        if args.multilingual:
            dest = args.out_dir / ("multi30k." + ".".join(f"{s}-{t}" for s, t in args.pairs))
            if not args.download:
                check_dest_apart_from_inputs(dest, [source], "--out-dir")
            stats = prepare_multilingual(source, dest, args.pairs, SPLITS, args.min_count or 2, args.workers,
                                         args.force, log=log)
            print(f"binarized {', '.join(stats['lang_pairs'])} into {dest} "
                  f"(one dictionary of {stats['shared_dictionary_words']} words)")
            if args.tagged:
                tagged = dest.with_name(dest.name + ".tagged")
                prepare_target_tagged(dest, tagged, args.pairs, workers=args.workers, force=args.force, log=log)
                print(f"binarized the target-tagged sources into {tagged}")
            return
        for src, tgt in args.pairs:
            name = f"multi30k.{src}-{tgt}"
            if args.subword == "sentencepiece":
                name += f".spm{args.sp_vocab_size}"
            if args.joined_dictionary:
                name += ".joined"
            dest = args.out_dir / name
            if not args.download:
                check_dest_apart_from_inputs(dest, [source], "--out-dir")
            stats = prep.prepare(source, dest, src, tgt, SPLITS, args.min_count, args.subword,
                                 args.sp_vocab_size, args.sp_model_type, args.empty_lines,
                                 args.workers, args.force, log=log, joined_dictionary=args.joined_dictionary)
            print(f"binarized {src}-{tgt} into {dest}")
            print(format_stats(stats))
    except prep.DataError as err:
        parser.exit(2, f"error: {err}\n")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
