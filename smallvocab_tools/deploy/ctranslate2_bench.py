"""An exported CTranslate2 model on a data split: BLEU with and without its vocabulary map, and tokens per
second at each batch size and compute type (``scripts/bench_ctranslate2.py``); and the export's check of
whether the map pays (``map_verdict``).

The sentences are the split's binarized ones, as fairseq reads them (a word outside the dictionary is
``<unk>``): what CTranslate2 is given is what fairseq-generate decodes.  Timings (``ctranslate2_speed``): the
Deploy code's call, ``translate_batch(pieces, beam_size=B, use_vmap=...)``, on consecutive batches of the
sentences, in a process that imports ctranslate2 alone, on ``--threads`` threads (default: OMP_NUM_THREADS, else
2), the translator warmed up first; tokens are the output pieces the Deploy code gets (no eos).  Each
configuration translates the split ``--rounds`` times each way, the map's runs and the runs without it
alternating (order swapped every round); the median round is reported, and the map's speed-up as the median of
the rounds' ratios with their range.  BLEU: the project's one BLEU (``smallvocab_tools.analysis.bleu``:
sacrebleu, ``--tokenize``, printed with its signature) on words (the data folder's text; sentencepiece or
subword-nmt pieces joined, as fairseq-generate --post-process does), and for any hypothesis file given with
``--compare NAME=FILE`` (one line per sentence in the split's order, e.g. the plugin's decoding; its pieces
joined too where it holds pieces)."""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from smallvocab_tools.analysis import bleu as bleu_lib
from smallvocab_tools.deploy import ctranslate2_speed as speed


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


def bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str = bleu_lib.TOKENIZE) -> bleu_lib.Score:
    """The corpus BLEU of ``hyps`` against ``refs`` (both words) through the project's one BLEU: a ``Score``
    whose str() carries sacrebleu's signature."""
    return bleu_lib.corpus(hyps, refs, tokenize)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(model_dir, sources, refs, compute_types, batches, beams, rounds, threads, max_len, out_dir=None,
        scheme=None, tokenize: str = bleu_lib.TOKENIZE, measure: Optional[Callable] = None,
        say: Callable[[str], None] = _stderr):
    """The records of every (compute type, beam, batch, map) configuration over ``sources`` (token lists),
    scored against ``refs`` (words): the hypotheses' pieces of ``scheme`` are joined into words first.
    ``measure``: ``ctranslate2_speed.measure`` (a test gives its own)."""
    measure = measure or speed.measure
    has_map = (Path(model_dir) / "vmap.txt").is_file()
    sides = ("full", "vmap") if has_map else ("full",)
    records = []
    for compute_type in compute_types:
        for beam in beams:
            for batch in batches:
                say(f"{compute_type}, beam {beam}, batches of {batch}: {rounds} round(s) "
                    + ("with and without the map, alternating" if has_map else "(no vocabulary map in the model)"))
                result = measure(model_dir, sources, threads, batch, beam, rounds, sides, compute_type, max_len)
                summary = speed.speeds(result)
                for side in sides:
                    text = as_words([" ".join(h) for h in result["hyps"][side]], scheme)
                    name = f"ct2-{compute_type}-beam{beam}-batch{batch}-{side}"
                    if out_dir:
                        Path(out_dir, name + ".txt").write_text("\n".join(text) + "\n")
                    score = bleu(text, refs, tokenize)
                    record = {"name": name, "compute_type": compute_type, "beam": beam, "batch": batch,
                              "vmap": side == "vmap", "bleu": score.bleu, "bleu_signature": score.signature,
                              "seconds": summary[side]["seconds"], "tokens": summary[side]["tokens"],
                              "tokens_per_s": summary[side]["tokens_per_s"], "sentences": len(sources),
                              "rounds": rounds, "threads": threads}
                    if side == "vmap" and "ratio" in summary:
                        record.update(speedup=summary["ratio"], speedup_low=summary["low"],
                                      speedup_high=summary["high"])
                    records.append(record)
    return records


@dataclass
class MapVerdict:
    """What the export's check measured and says: tokens/s with and without the map (medians of the rounds),
    the rounds' ratios (median, range), the verdict (``ctranslate2_speed.judge``), the BLEUs, and ``text``, the
    line printed (its str())."""

    sentences: int
    split: str
    beam: int
    batch: int
    threads: int
    rounds: int
    with_map: float
    without: float
    ratio: float
    low: float
    high: float
    kind: str
    bleu_with: bleu_lib.Score
    bleu_without: bleu_lib.Score
    text: str

    def __str__(self) -> str:
        return self.text


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def verdict_text(sentences: int, split: str, beam: int, batch: int, threads: int, rounds: int, with_map: float,
                 without: float, ratio: float, low: float, high: float, bleu_with: bleu_lib.Score,
                 bleu_without: bleu_lib.Score, margin: float = speed.MARGIN):
    """(verdict, the line that says it): what was measured, then exactly one sentence of advice, which follows
    ``ctranslate2_speed.judge`` of the rounds' ratios; where the map pays but costs more than a BLEU point on these
    sentences, the advice says so."""
    kind = speed.judge(ratio, low, high, margin)
    signature = bleu_with.signature if bleu_with.signature == bleu_without.signature else \
        f"with it: {bleu_with.signature}; without: {bleu_without.signature}"
    said = (f"the vocabulary map on {sentences} {split} sentences (beam {beam}, batches of {batch}, "
            f"{_threads(threads)}, {rounds} rounds each way): {with_map:.0f} tokens/s with it, {without:.0f} without, "
            f"{ratio:.2f}x (rounds {low:.2f}x-{high:.2f}x); BLEU {bleu_with.bleu:.2f} with it, "
            f"{bleu_without.bleu:.2f} without ({signature}). ")
    loss = bleu_without.bleu - bleu_with.bleu
    if kind == speed.PAYS and loss > 1.0:
        return kind, said + (f"It pays here in speed but costs {loss:.2f} BLEU on these sentences: translate with "
                             "use_vmap=True where that speed is worth more than the BLEU.")
    if kind == speed.PAYS:
        return kind, said + "It pays here: translate with use_vmap=True."
    if kind == speed.SLOWS:
        return kind, said + ("It slows translation here (the model's |V| is small beside the words a batch "
                             "allows): translate without it (use_vmap=False).")
    why = "the rounds' ratios reach 1.00x" if low <= 1 <= high else f"the ratio is within {margin:.0%} of 1.00x"
    return kind, said + (f"No clear difference here ({why}, the machine's noise): translate without it "
                         "(use_vmap=False), which loses no word outside the map.")


def map_verdict(model_dir, data, src: str, tgt: str, split: str, sentences: int = 200, beam: int = 5,
                batch: int = 32, threads: Optional[int] = None, rounds: int = speed.DEFAULT_ROUNDS,
                max_len: int = 256, tokenize: str = bleu_lib.TOKENIZE, measure: Optional[Callable] = None,
                say: Callable[[str], None] = _stderr) -> MapVerdict:
    """Whether the model's vocabulary map pays here: the first ``sentences`` of ``split`` translated with and
    without it as the Deploy code translates (``ctranslate2_speed``: beam, batch and threads as given, ``threads``
    None: OMP_NUM_THREADS, else 2; ``rounds`` each way, alternating), each step said through ``say`` (stderr) as
    it finishes, and a line that says which to use.  The map restricts each step's output layer to the words a
    batch allows; where |V| is small beside those, building the restriction costs more than it saves.  ``src``
    and ``tgt`` (None: the data folder's pair, where its file names tell it).  ``measure``:
    ``ctranslate2_speed.measure`` (a test gives its own)."""
    if rounds < speed.MIN_ROUNDS:
        raise ValueError(f"{rounds} round(s): the check needs {speed.MIN_ROUNDS} or more (the spread of the rounds "
                         f"decides between a speed-up and noise; {speed.DEFAULT_ROUNDS} by default)")
    if sentences < 1:
        raise ValueError(f"{sentences} sentences: the check needs 1 or more (0 skips it)")
    threads, where = speed.threads_from(threads)
    if not (src and tgt):
        from fairseq.data.data_utils import infer_language_pair

        src, tgt = infer_language_pair(data)
    all_sources, all_refs = split_tokens(data, src, tgt, split)
    scheme = target_scheme(data, tgt)
    sources, refs = all_sources[:sentences], as_words(all_refs[:sentences], scheme)
    held = "" if len(all_sources) >= sentences else f" (all it holds: fewer than the {sentences} asked)"
    say(f"checking whether the vocabulary map pays on this machine (--check-map N sentences; 0 skips it): the "
        f"first {len(sources)} {split} sentences{held}, the Deploy code's translate_batch(pieces, beam_size={beam}, "
        f"use_vmap=True/False) on batches of {batch}, on {speed.describe_threads(threads, where)}, {rounds} rounds "
        "with and without the map, alternating")
    measure = measure or speed.measure
    result = measure(model_dir, sources, threads, batch, beam, rounds, speed.SIDES, "default", max_len)
    summary = speed.speeds(result)
    scores = {side: bleu(as_words([" ".join(h) for h in result["hyps"][side]], scheme), refs, tokenize)
              for side in speed.SIDES}
    numbers = dict(sentences=len(sources), split=split, beam=beam, batch=batch, threads=threads, rounds=rounds,
                   with_map=summary["vmap"]["tokens_per_s"], without=summary["full"]["tokens_per_s"],
                   ratio=summary["ratio"], low=summary["low"], high=summary["high"])
    kind, text = verdict_text(**numbers, bleu_with=scores["vmap"], bleu_without=scores["full"])
    return MapVerdict(**numbers, kind=kind, bleu_with=scores["vmap"], bleu_without=scores["full"], text=text)


def table(records, compared: Dict[str, bleu_lib.Score]) -> str:
    """The records (and the --compare files' BLEU) as a Markdown table, then the BLEUs' sacrebleu signature."""
    rows = ["| decoder | compute | beam | batch | vocabulary map | BLEU | tokens/s | map speed-up |",
            "|---|---|---|---|---|---:|---:|---:|"]
    for r in records:
        speedup = ""
        if "speedup" in r:
            speedup = f"{r['speedup']:.2f}x"
            if r["rounds"] > 1:
                speedup += f" ({r['speedup_low']:.2f}-{r['speedup_high']:.2f})"
        rows.append(f"| CTranslate2 | {r['compute_type']} | {r['beam']} | {r['batch']} | "
                    f"{'predictor' if r['vmap'] else 'none'} | {r['bleu']:.2f} | {r['tokens_per_s']:.0f} | {speedup} |")
    for name, score in compared.items():
        rows.append(f"| {name} | | | | | {score.bleu:.2f} | | |")
    signatures = sorted({r["bleu_signature"] for r in records} | {s.signature for s in compared.values()})
    said = "\n".join(f"BLEU: sacrebleu on words, {sig}" for sig in signatures)
    speedups = any("speedup" in r for r in records)
    return ("\n".join(rows) + "\n" + (said + "\n" if said else "")
            + ("map speed-up: the median of the rounds' ratios (tokens/s with the map / without), their range in "
               "brackets\n" if speedups else ""))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a folder written by scripts/export_ctranslate2.py")
    parser.add_argument("--data", help="the data folder (default: the one the export recorded)")
    parser.add_argument("--split", default="test")
    parser.add_argument("-s", "--source-lang")
    parser.add_argument("-t", "--target-lang")
    parser.add_argument("--compute-types", default="int8,float32")
    parser.add_argument("--batches", default="1,32", help="sentences per translate_batch call, comma-separated")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of each configuration, with and without the map alternating")
    parser.add_argument("--threads", type=int,
                        help=f"CTranslate2's intra-op threads (default: OMP_NUM_THREADS, else {speed.DEFAULT_THREADS})")
    parser.add_argument("--max-len", type=int, default=256, help="CTranslate2's max_decoding_length")
    bleu_lib.add_tokenize_option(parser)
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=FILE",
                        help="a hypothesis file (one line per sentence of the split) to score beside them")
    parser.add_argument("--out", help="a folder for the hypotheses, records.json and table.md")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: 1 or more")
    try:
        threads, where = speed.threads_from(args.threads)
    except ValueError as err:
        parser.error(str(err))
    try:
        ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
        batches, beams = ints(args.batches), ints(args.beams)
    except ValueError:
        parser.error(f"--batches {args.batches} / --beams {args.beams}: whole numbers, comma-separated (e.g. 1,32)")
    if min(batches + beams) < 1:
        parser.error(f"--batches {args.batches} / --beams {args.beams}: each 1 or more")
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
        try:
            compared[name] = bleu(compared_words(name, hyps), refs, args.tokenize)
        except ValueError as err:
            raise SystemExit(f"error: --compare {item}: {err}") from None
    print(f"timing {len(sources)} {args.split} sentences as the Deploy code translates them, on "
          f"{speed.describe_threads(threads, where)}", file=sys.stderr, flush=True)
    try:
        records = run(args.model, sources, refs, args.compute_types.split(","), batches, beams, args.rounds,
                      threads, args.max_len, args.out, scheme, args.tokenize)
    except (speed.SpeedError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    text = table(records, compared)
    print(text, end="")
    if args.out:
        scores = {name: {"bleu": s.bleu, "bleu_signature": s.signature} for name, s in compared.items()}
        Path(args.out, "records.json").write_text(json.dumps({"records": records, "compared": scores}, indent=2))
        Path(args.out, "table.md").write_text(text)
