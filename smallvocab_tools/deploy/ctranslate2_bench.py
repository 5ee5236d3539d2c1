"""An exported CTranslate2 model on a data split: BLEU with and without its vocabulary map, and tokens per
second at each batch size and compute type (``scripts/bench_ctranslate2.py``).

The sentences are the split's binarized ones, as fairseq reads them (a word outside the dictionary is
``<unk>``): what CTranslate2 is given is what fairseq-generate decodes.  Timings: each configuration
translates the whole split ``--rounds`` times, the map's runs and the runs without it alternating (order
swapped every round), on ``--threads`` threads; the median round is reported.  BLEU: sacrebleu on words
(the data folder's text; sentencepiece or subword-nmt pieces joined, as fairseq-generate --post-process
does), and for any hypothesis file given with ``--compare NAME=FILE`` (one line per sentence in the split's
order, e.g. the plugin's decoding; its pieces joined too where it holds pieces)."""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence


def target_scheme(data, tgt: str):
    """The subword scheme of the target dictionary (e.g. "sentencepiece"), None for words."""
    from fairseq.data import Dictionary

    from fairseq_smallvocab.data.subwords import subword_scheme

    found = subword_scheme(Dictionary.load(str(Path(data) / f"dict.{tgt}.txt")))
    return found[0] if found else None


def as_words(lines: Sequence[str], scheme) -> List[str]:
    """Lines of pieces joined into words as fairseq-generate's --post-process does (unchanged for words)."""
    from fairseq.data.data_utils import post_process

    return list(lines) if scheme is None else [post_process(line, scheme) for line in lines]


def compared_words(name: str, lines: Sequence[str]) -> List[str]:
    """A --compare file's lines as words: pieces in a file are joined (said on stderr), words kept as they are."""
    from fairseq_smallvocab.data.subwords import SUBWORD_MARKS

    marked = {s for s, mark in SUBWORD_MARKS.items() if sum(mark in line for line in lines) > len(lines) / 2}
    if not marked:
        return list(lines)
    found = sorted(marked)[0]
    print(f"--compare {name}: its lines hold {found} pieces; joined into words before scoring", file=sys.stderr)
    return as_words(lines, found)


def split_tokens(data, src: str, tgt: str, split: str):
    """(source token lists, reference strings) of a binarized split, in its order."""
    from fairseq.data import Dictionary

    from fairseq_smallvocab.data.binarized import load_binarized

    folder = Path(data)
    sides = []
    for lang in (src, tgt):
        d = Dictionary.load(str(folder / f"dict.{lang}.txt"))
        prefix = folder / f"{split}.{src}-{tgt}.{lang}"
        ds = load_binarized(str(prefix), d)  # checked first: a truncated file or foreign ids are named
        if ds is None:
            raise FileNotFoundError(f"no binarized {split} data for {lang} in {folder} ({prefix}.bin/.idx)")
        sides.append([[d[t] for t in ds[i].tolist() if t != d.eos()] for i in range(len(ds))])
    return sides[0], [" ".join(words) for words in sides[1]]


def translate(translator, sources, batch: int, beam: int, use_vmap: bool, max_len: int):
    """(hypotheses as token lists, seconds) of one pass over ``sources``."""
    start = time.perf_counter()
    results = translator.translate_batch(sources, max_batch_size=batch, beam_size=beam, use_vmap=use_vmap,
                                         max_decoding_length=max_len)
    seconds = time.perf_counter() - start
    return [r.hypotheses[0] for r in results], seconds


def bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(list(hyps), [list(refs)]).score


def run(model_dir, sources, refs, compute_types, batches, beams, rounds, threads, max_len, out_dir=None,
        scheme=None):
    """The records of every (compute type, beam, batch, map) configuration over ``sources`` (token lists),
    scored against ``refs`` (words): the hypotheses' pieces of ``scheme`` are joined into words first."""
    import ctranslate2

    has_map = (Path(model_dir) / "vmap.txt").is_file()
    maps = (False, True) if has_map else (False,)
    records = []
    for compute_type in compute_types:
        translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type,
                                            intra_threads=threads, inter_threads=1)
        translate(translator, sources[:8], 8, 1, False, max_len)  # warm-up
        for beam in beams:
            for batch in batches:
                seconds: Dict[bool, List[float]] = {m: [] for m in maps}
                hyps = {}
                for r in range(rounds):
                    for use_vmap in (maps if r % 2 == 0 else maps[::-1]):
                        hyps[use_vmap], s = translate(translator, sources, batch, beam, use_vmap, max_len)
                        seconds[use_vmap].append(s)
                for use_vmap in maps:
                    tokens = sum(len(h) + 1 for h in hyps[use_vmap])  # eos included, as generated
                    sec = statistics.median(seconds[use_vmap])
                    text = as_words([" ".join(h) for h in hyps[use_vmap]], scheme)
                    name = f"ct2-{compute_type}-beam{beam}-batch{batch}-{'vmap' if use_vmap else 'full'}"
                    if out_dir:
                        Path(out_dir, name + ".txt").write_text("\n".join(text) + "\n")
                    records.append({"name": name, "compute_type": compute_type, "beam": beam, "batch": batch,
                                    "vmap": use_vmap, "bleu": bleu(text, refs), "seconds": sec,
                                    "tokens_per_s": tokens / sec, "sentences": len(sources)})
    return records


def map_verdict(model_dir, data, src: str, tgt: str, split: str, sentences: int = 200, beam: int = 5,
                batch: int = 32, threads: int = 2, rounds: int = 2, max_len: int = 256) -> str:
    """Whether the model's vocabulary map pays here: the first ``sentences`` of ``split`` translated with and
    without it (beam, batch, threads as given; ``rounds`` each, alternating, the median taken), and a sentence
    that says which to use.  The map restricts each step's output layer to the words it allows; where |V| is
    small beside the words a batch allows, building the restriction costs more than it saves.  ``src`` and
    ``tgt`` (None: the data folder's pair, where its file names tell it)."""
    if not (src and tgt):
        from fairseq.data.data_utils import infer_language_pair

        src, tgt = infer_language_pair(data)
    all_sources, all_refs = split_tokens(data, src, tgt, split)
    scheme = target_scheme(data, tgt)
    sources, refs = all_sources[:sentences], as_words(all_refs[:sentences], scheme)
    records = {r["vmap"]: r for r in run(model_dir, sources, refs, ["default"], [batch], [beam], rounds, threads,
                                         max_len, scheme=scheme)}
    with_map, without = records[True], records[False]
    ratio = with_map["tokens_per_s"] / without["tokens_per_s"]
    said = (f"the vocabulary map on {len(sources)} {split} sentences, beam {beam}, batch {batch}, {threads} "
            f"thread(s): {with_map['tokens_per_s']:.0f} tokens/s with it, {without['tokens_per_s']:.0f} without "
            f"({ratio:.2f}x); BLEU {with_map['bleu']:.2f} with it, {without['bleu']:.2f} without. ")
    if ratio >= 1.1:
        return said + "It pays here: translate with use_vmap=True."
    if ratio < 0.95:
        return said + ("It slows beam search here (the model's |V| is small beside the words a batch allows): "
                       "translate without it (use_vmap=False).")
    return said + ("No clear difference here: either (use_vmap=False loses no word outside the map; "
                   "scripts/bench_ctranslate2.py measures more rounds and batch sizes).")


def table(records, compared: Dict[str, float]) -> str:
    rows = ["| decoder | compute | beam | batch | vocabulary map | BLEU | tokens/s | map speed-up |",
            "|---|---|---|---|---|---:|---:|---:|"]
    full = {(r["compute_type"], r["beam"], r["batch"]): r["tokens_per_s"] for r in records if not r["vmap"]}
    for r in records:
        key = (r["compute_type"], r["beam"], r["batch"])
        speed = f"{r['tokens_per_s'] / full[key]:.2f}x" if r["vmap"] and key in full else ""
        rows.append(f"| CTranslate2 | {r['compute_type']} | {r['beam']} | {r['batch']} | "
                    f"{'predictor' if r['vmap'] else 'none'} | {r['bleu']:.2f} | {r['tokens_per_s']:.0f} | {speed} |")
    for name, score in compared.items():
        rows.append(f"| {name} | | | | | {score:.2f} | | |")
    return "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a folder written by scripts/export_ctranslate2.py")
    parser.add_argument("--data", help="the data folder (default: the one the export recorded)")
    parser.add_argument("--split", default="test")
    parser.add_argument("-s", "--source-lang")
    parser.add_argument("-t", "--target-lang")
    parser.add_argument("--compute-types", default="int8,float32")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-len", type=int, default=256, help="CTranslate2's max_decoding_length")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=FILE",
                        help="a hypothesis file (one line per sentence of the split) to score beside them")
    parser.add_argument("--out", help="a folder for the hypotheses, records.json and table.md")
    args = parser.parse_args(argv)
    meta_file = Path(args.model) / "smallvocab_export.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    data = args.data or meta.get("data")
    if not data:
        raise SystemExit(f"error: {args.model} records no data folder (not written by export_ctranslate2.py): "
                         "give --data")
    src, tgt = args.source_lang or meta.get("source_lang"), args.target_lang or meta.get("target_lang")
    if not (src and tgt):
        from fairseq.data.data_utils import infer_language_pair

        src, tgt = infer_language_pair(data)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    sources, refs = split_tokens(data, src, tgt, args.split)
    scheme = target_scheme(data, tgt)
    refs = as_words(refs, scheme)  # BLEU on words, whatever the model's pieces
    if scheme:
        print(f"the target dictionary holds {scheme} pieces: every BLEU here is on words (pieces joined, as "
              f"fairseq-generate --post-process {scheme})", file=sys.stderr)
    compared = {}  # checked before the timings: a wrong file stops here, not after them
    for item in args.compare:
        name, _, path = item.rpartition("=")
        if not name or not Path(path).is_file():
            raise SystemExit(f"error: --compare {item}: NAME=FILE, with FILE a hypothesis file")
        hyps = Path(path).read_text().splitlines()
        if len(hyps) != len(refs):
            raise SystemExit(f"error: --compare {item}: {len(hyps)} lines, the split has {len(refs)} sentences")
        compared[name] = bleu(compared_words(name, hyps), refs)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    records = run(args.model, sources, refs, args.compute_types.split(","), ints(args.batches), ints(args.beams),
                  args.rounds, args.threads, args.max_len, args.out, scheme)
    text = table(records, compared)
    print(text, end="")
    if args.out:
        Path(args.out, "records.json").write_text(json.dumps({"records": records, "compared": compared}, indent=2))
        Path(args.out, "table.md").write_text(text)
