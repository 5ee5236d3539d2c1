"""BLEU of several runs per language pair, and sacrebleu's paired bootstrap
of each against a baseline run: the multilingual recipe's table.

Each run is a folder with ``hyp-test.LANG.txt`` (one hypothesis per line in
the test set's order) beside the pair's references ``ref-test.LANG.txt``
(the same for every run; the first run's are read).  Rows: run x pair;
columns: BLEU, the difference to the baseline, and the bootstrap's p-value
(sacrebleu's ``PairedTest``, ``--n-samples`` resamples; p < 0.05: the
difference is unlikely under the null hypothesis of equal systems)."""

import argparse
from pathlib import Path
from typing import Dict, List, Sequence, Tuple


def read(path: Path) -> List[str]:
    lines = path.read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def compare(runs: Sequence[Tuple[str, Path]], baseline: str, langs: Sequence[str], n_samples: int = 1000
            ) -> List[Dict]:
    """One dict per (run, language): bleu, delta (vs the baseline), p (None for the baseline itself); the
    resamples are sacrebleu's (its seed: SACREBLEU_SEED, 12345 by default)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    names = [name for name, _ in runs]
    if baseline not in names:
        raise ValueError(f"the baseline run '{baseline}' is not among the runs ({', '.join(names)})")
    rows = []
    for lang in langs:
        refs = read(runs[0][1] / f"ref-test.{lang}.txt")
        systems = []
        for name, folder in runs:
            hyps = read(folder / f"hyp-test.{lang}.txt")
            if len(hyps) != len(refs):
                raise ValueError(f"{folder / f'hyp-test.{lang}.txt'}: {len(hyps)} hypotheses for {len(refs)} "
                                 "references: decode the whole test set")
            systems.append((name, hyps))
        ordered = [s for s in systems if s[0] == baseline] + [s for s in systems if s[0] != baseline]
        _, results = PairedTest(ordered, {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=n_samples)()
        base = results["BLEU"][0].score
        for (name, _), result in zip(ordered, results["BLEU"]):
            p = getattr(result, "p_value", None)
            rows.append({"run": name, "lang": lang, "bleu": round(result.score, 2),
                         "delta": round(result.score - base, 2), "p": None if name == baseline else p})
    return rows


def table(rows: List[Dict], baseline: str) -> str:
    out = [f"| run | pair | test BLEU | vs {baseline} | paired bootstrap p |", "|---|---|---:|---:|---:|"]
    for r in rows:
        p = "-" if r["p"] is None else f"{r['p']:.4f}"
        out.append(f"| {r['run']} | {r['lang']} | {r['bleu']:.2f} | {r['delta']:+.2f} | {p} |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                        help="a run and its folder (hyp-test.LANG.txt, ref-test.LANG.txt); repeat")
    parser.add_argument("--baseline", required=True, help="the run the others are compared with")
    parser.add_argument("--langs", nargs="+", required=True, help="target languages (hyp-test.LANG.txt)")
    parser.add_argument("--n-samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    runs = []
    for item in args.run:
        name, sep, folder = item.partition("=")
        if not sep or not name:
            parser.error(f"--run {item!r}: give NAME=FOLDER")
        runs.append((name, Path(folder)))
    try:
        text = table(compare(runs, args.baseline, args.langs, args.n_samples), args.baseline)
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
