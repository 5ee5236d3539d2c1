"""BLEU of several runs per language pair, and sacrebleu's paired bootstrap
of each against a baseline run: the multilingual recipe's table.

Each run is a folder with ``hyp-test.LANG.txt`` (one hypothesis per line in
the test set's order) beside the pair's references ``ref-test.LANG.txt``
(the same for every run; the first run's are read).  Rows: run x pair;
columns: BLEU, the difference to the baseline, and the bootstrap's p-value
(sacrebleu's ``PairedTest``, ``--n-samples`` resamples; p < 0.05: the
difference is unlikely under the null hypothesis of equal systems).
``--versus RUN=OTHER`` adds a second table: RUN against OTHER alone (a
REINFORCE run against its own control, say), by the same test."""

import argparse
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from smallvocab_tools.analysis import bleu

read = bleu.read_lines  # (what the verdict and the records' tools read their files with)


def paired_bootstrap(systems: Sequence[Tuple[str, List[str]]], refs: List[str], n_samples: int,
                     tokenize: str = bleu.TOKENIZE):
    """sacrebleu's paired bootstrap of systems[1:] against systems[0] (``bleu.paired``): one BLEU result per
    system."""
    return bleu.paired(systems, refs, n_samples, tokenize)["BLEU"]


def _hypotheses(folder: Path, lang: str, refs: List[str]) -> List[str]:
    hyps = read(folder / f"hyp-test.{lang}.txt")
    if len(hyps) != len(refs):
        raise ValueError(f"{folder / f'hyp-test.{lang}.txt'}: {len(hyps)} hypotheses for {len(refs)} "
                         "references: decode the whole test set")
    return hyps


def _named(runs: Sequence[Tuple[str, Path]], name: str) -> Path:
    for run, folder in runs:
        if run == name:
            return folder
    raise ValueError(f"the run '{name}' is not among the runs ({', '.join(n for n, _ in runs)})")


def compare(runs: Sequence[Tuple[str, Path]], baseline: str, langs: Sequence[str], n_samples: int = 1000,
            tokenize: str = bleu.TOKENIZE) -> List[Dict]:
    """One dict per (run, language): bleu, delta (vs the baseline), p (None for the baseline itself); the
    resamples are sacrebleu's (its seed: SACREBLEU_SEED, 12345 by default)."""
    _named(runs, baseline)
    rows = []
    for lang in langs:
        refs = read(runs[0][1] / f"ref-test.{lang}.txt")
        ordered = [r for r in runs if r[0] == baseline] + [r for r in runs if r[0] != baseline]
        results = paired_bootstrap([(name, _hypotheses(folder, lang, refs)) for name, folder in ordered], refs,
                                   n_samples, tokenize)
        base = results[0].score
        for (name, _), result in zip(ordered, results):
            p = getattr(result, "p_value", None)
            rows.append({"run": name, "lang": lang, "bleu": round(result.score, 2),
                         "delta": round(result.score - base, 2), "p": None if name == baseline else p})
    return rows


def versus(runs: Sequence[Tuple[str, Path]], pairs: Sequence[Tuple[str, str]], langs: Sequence[str],
           n_samples: int = 1000, tokenize: str = bleu.TOKENIZE) -> List[Dict]:
    """One dict per (run, other, language): the run's BLEU minus the other's and the paired bootstrap's p of
    the run against that other run alone."""
    rows = []
    for lang in langs:
        refs = read(runs[0][1] / f"ref-test.{lang}.txt")
        for name, other in pairs:
            systems = [(n, _hypotheses(_named(runs, n), lang, refs)) for n in (other, name)]
            base, result = paired_bootstrap(systems, refs, n_samples, tokenize)
            rows.append({"run": name, "other": other, "lang": lang,
                         "delta": round(result.score - base.score, 2), "p": result.p_value})
    return rows


def table(rows: List[Dict], baseline: str) -> str:
    out = [f"| run | pair | test BLEU | vs {baseline} | paired bootstrap p |", "|---|---|---:|---:|---:|"]
    for r in rows:
        p = "-" if r["p"] is None else f"{r['p']:.4f}"
        out.append(f"| {r['run']} | {r['lang']} | {r['bleu']:.2f} | {r['delta']:+.2f} | {p} |")
    return "\n".join(out)


def versus_table(rows: List[Dict]) -> str:
    out = ["| run | against | pair | BLEU difference | paired bootstrap p |", "|---|---|---|---:|---:|"]
    out += [f"| {r['run']} | {r['other']} | {r['lang']} | {r['delta']:+.2f} | {r['p']:.4f} |" for r in rows]
    return "\n".join(out)


def _split(parser, option: str, item: str, form: str) -> Tuple[str, str]:
    """``item`` of ``option`` split at its '=' (``form`` says what the two sides are), or the parser's error."""
    name, sep, value = item.partition("=")
    if not sep or not name or not value:
        parser.error(f"{option} {item!r}: give {form}")
    return name, value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                        help="a run and its folder (hyp-test.LANG.txt, ref-test.LANG.txt); repeat")
    parser.add_argument("--baseline", required=True, help="the run the others are compared with")
    parser.add_argument("--langs", nargs="+", required=True, help="target languages (hyp-test.LANG.txt)")
    parser.add_argument("--versus", action="append", default=[], metavar="RUN=OTHER",
                        help="also compare RUN with OTHER alone (both among the runs); repeat")
    parser.add_argument("--n-samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    bleu.add_tokenize_option(parser)
    args = parser.parse_args(argv)
    runs = [(name, Path(folder)) for name, folder in (_split(parser, "--run", i, "NAME=FOLDER") for i in args.run)]
    pairs = [_split(parser, "--versus", item, "RUN=OTHER") for item in args.versus]
    try:
        text = table(compare(runs, args.baseline, args.langs, args.n_samples, args.tokenize), args.baseline)
        if pairs:
            text += "\n\n" + versus_table(versus(runs, pairs, args.langs, args.n_samples, args.tokenize))
        text += f"\n\nBLEU: {bleu.signature(args.tokenize)}"
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
