"""The quick start's verdict: its CE model, its REINFORCE run(s) and, where
run, CE continued for the same updates (the control, ``LAMBDA=1``) side by
side on the test set, with the differences, sacrebleu's paired bootstrap and
the length ratios, then one plain sentence per REINFORCE run: it helped, it
did not, or the test cannot tell.  A REINFORCE run is judged against the
control where there is one (the reward's own effect), else against the CE
model (which training longer alone may explain).  It also warns when the CE
model had not converged (its training stopped by the update or epoch cap
while dev BLEU was still rising), the first condition for a gain the docs
name.

Each run folder holds ``hyp-test.txt`` (the test hypotheses as words, in the
test set's order) and ``eval.settings`` (beam and length penalty); a
REINFORCE or control run also ``quickstart.settings`` (``LAMBDA=...`` and the
rest of its settings, one per line), which examples/quickstart/run.sh
writes.

With the full softmax's arms (``--full-ce`` and ``--full-rl``, the quick start's ``COMPARE=full``), the verdict
answers the other question too: the small softmax against the full one, CE against CE and REINFORCE against
REINFORCE, each with BLEU, chrF, the paired bootstrap's p, the training's seconds (fairseq's ``wall``) and its
seconds per update (the pace line), beside the ratio ``does_it_pay.py`` predicted (``--does-it-pay``)."""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from smallvocab_tools.analysis import bleu
from smallvocab_tools.analysis.paired_bleu import read

SIGNIFICANT = 0.05


def settings(path: Path) -> Dict[str, str]:
    """NAME=VALUE lines of a file (none where it is missing)."""
    if not path.is_file():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def is_control(folder: Path) -> bool:
    """CE continued: the run's CE weight (lambda) is 1, so it draws no samples."""
    value = settings(folder / "quickstart.settings").get("LAMBDA", "")
    try:
        return float(value) == 1.0
    except ValueError:
        return False


def ce_not_converged(log: Path) -> Optional[str]:
    """A warning when the CE training log ends without fairseq's early stop and with its best dev BLEU at its
    last validation (still rising when its cap stopped it); None otherwise."""
    if not log.is_file():
        return None
    text = log.read_text(errors="replace")
    if "early stop since valid performance hasn't improved" in text:
        return None
    valid = re.findall(r"valid on 'valid' subset .*?\| bleu ([\d.]+) .*?\| num_updates (\d+) .*?\| best_bleu ([\d.]+)",
                       text)
    if len(valid) < 2:
        return None
    bleu, updates, best = valid[-1]
    if float(bleu) < float(best):
        return None
    return (f"warning: CE stopped at its cap ({int(updates):,} updates) with dev BLEU still rising (its best, "
            f"{float(best):.2f}, at its last validation): REINFORCE from a model that has not converged gains "
            "partly what more CE would. Train CE further (a larger CE_UPDATES or CE_EPOCHS, then delete "
            "OUT/ce/.quickstart-done), or judge REINFORCE against the control (LAMBDA=1 with its own RL_SAVE).")


def compare(ce: Path, runs: List[Path], ref: Path, n_samples: int = 1000, tokenize: str = bleu.TOKENIZE
            ) -> List[Dict]:
    """One row per run (CE first): BLEU (``bleu.metric(tokenize)``), chrF, the length ratio as BLEU counts it,
    and its BLEU and chrF differences to CE and to the control, each with the paired bootstrap's p."""
    refs = read(ref)
    hyps = {}
    for folder in [ce, *runs]:
        lines = read(folder / "hyp-test.txt")
        if len(lines) != len(refs):
            raise ValueError(f"{folder / 'hyp-test.txt'}: {len(lines)} hypotheses for the {len(refs)} references "
                             f"of {ref}: decode the whole test set")
        hyps[folder] = lines
    control = next((run for run in runs if is_control(run)), None)
    rows = []
    against_ce = bleu.paired([(str(f), hyps[f]) for f in [ce, *runs]], refs, n_samples, tokenize, chrf=True)
    against_control: Dict[Path, Dict[str, Tuple[float, float]]] = {}
    if control is not None:
        others = [run for run in runs if run != control]
        if others:
            results = bleu.paired([(str(f), hyps[f]) for f in [control, *others]], refs, n_samples, tokenize,
                                  chrf=True)
            against_control = {run: {name: _difference(values[i + 1], values[0]) for name, values in results.items()}
                               for i, run in enumerate(others)}
    for i, folder in enumerate([ce, *runs]):
        score = bleu.corpus(hyps[folder], refs, tokenize, what=str(folder / "hyp-test.txt"))
        assert abs(score.bleu - against_ce["BLEU"][i].score) < 1e-9  # one BLEU: the bootstrap's is the corpus's
        rows.append({"run": folder, "kind": "CE" if folder == ce else "CE continued" if folder == control
                     else "REINFORCE", "bleu": score.bleu, "chrf": against_ce["chrF"][i].score,
                     "len_ratio": score.length_ratio, "lenpen": settings(folder / "eval.settings").get("LENPEN", "-"),
                     "vs_ce": None if folder == ce else _difference(against_ce["BLEU"][i], against_ce["BLEU"][0]),
                     "chrf_vs_ce": None if folder == ce else _difference(against_ce["chrF"][i],
                                                                          against_ce["chrF"][0]),
                     "vs_control": against_control.get(folder, {}).get("BLEU"),
                     "chrf_vs_control": against_control.get(folder, {}).get("chrF"), "signature": score.signature})
    return rows


def training_time(log: Path) -> Dict[str, Optional[float]]:
    """A training log's seconds (fairseq's ``wall`` meter as it last logged it) and seconds per update (its first
    pace line: the updates alone, before any validation): None where the log says nothing."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    walls = re.findall(r"\| wall (\d+(?:\.\d+)?)\b", text)
    paces = re.findall(r"\bpace: ([\d.]+) s/update", text)
    return {"seconds": float(walls[-1]) if walls else None, "sec_per_update": float(paces[0]) if paces else None}


def softmax_rows(pairs: List[Tuple[str, Path, Path]], ref: Path, n_samples: int = 1000,
                 tokenize: str = bleu.TOKENIZE) -> List[Dict]:
    """One row per (what, the small softmax's folder, the full one's): both BLEUs and chrFs, small minus full with
    the paired bootstrap's p, and each training's time (``training_time`` of FOLDER.train.log)."""
    refs = read(ref)
    rows = []
    for what, small, full in pairs:
        hyps = {}
        for folder in (small, full):
            lines = read(folder / "hyp-test.txt")
            if len(lines) != len(refs):
                raise ValueError(f"{folder / 'hyp-test.txt'}: {len(lines)} hypotheses for the {len(refs)} references "
                                 f"of {ref}: decode the whole test set")
            hyps[folder] = lines
        results = bleu.paired([("full", hyps[full]), ("small", hyps[small])], refs, n_samples, tokenize, chrf=True)
        times = {name: training_time(folder.with_name(folder.name + ".train.log"))
                 for name, folder in (("small", small), ("full", full))}
        rows.append({"what": what, "small": small, "full": full, "bleu": results["BLEU"][1].score,
                     "full_bleu": results["BLEU"][0].score, "chrf": results["chrF"][1].score,
                     "full_chrf": results["chrF"][0].score,
                     "bleu_vs_full": _difference(results["BLEU"][1], results["BLEU"][0]),
                     "chrf_vs_full": _difference(results["chrF"][1], results["chrF"][0]),
                     "seconds": times["small"]["seconds"], "full_seconds": times["full"]["seconds"],
                     "sec_per_update": times["small"]["sec_per_update"],
                     "full_sec_per_update": times["full"]["sec_per_update"]})
    return rows


def _ratio(full, small) -> str:
    return f"{full / small:.2f}x" if full and small else "-"


def _number(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def softmax_table(rows: List[Dict]) -> str:
    head = ("| what | BLEU small | BLEU full | BLEU small - full | chrF small - full | seconds small / full | "
            "s/update small / full | speed |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        out.append(f"| {r['what']} | {r['bleu']:.2f} | {r['full_bleu']:.2f} | {_cell(r['bleu_vs_full'])} | "
                   f"{_cell(r['chrf_vs_full'])} | {_number(r['seconds'], '.0f')} / {_number(r['full_seconds'], '.0f')} "
                   f"| {_number(r['sec_per_update'], '.3f')} / {_number(r['full_sec_per_update'], '.3f')} | "
                   f"{_ratio(r['full_sec_per_update'], r['sec_per_update'])} |")
    return "\n".join(out)


def softmax_verdicts(rows: List[Dict], predicted: Optional[Dict[str, float]] = None) -> List[str]:
    """One sentence per row: did the small softmax keep the full one's BLEU, and how much faster did it train (the
    pace lines' ratio, beside ``predicted``: does_it_pay.py's ratio for the row's kind, "CE" or "REINFORCE", and
    how far the runs' ratio is from it)."""
    out = []
    for r in rows:
        delta, p = _shown(r["bleu_vs_full"])
        if float(p) < SIGNIFICANT:
            quality = f"{'gained' if float(delta) > 0 else 'lost'} {delta} test BLEU against the full softmax (p = {p})"
        else:
            quality = f"made no BLEU difference the test can tell from the full softmax ({delta}, p = {p})"
        speed = ""
        if r["sec_per_update"] and r["full_sec_per_update"]:
            measured = r['full_sec_per_update'] / r['sec_per_update']
            speed = f"; its updates {measured:.2f}x as fast"
            said = (predicted or {}).get(r["what"].split()[0])
            if said:
                speed += f" (scripts/does_it_pay.py predicted {said:.2f}x: {measured / said - 1:+.0%})"
        out.append(f"Verdict (softmax, {r['what']}): the small softmax {quality}{speed}.")
    return out


def _difference(result, base) -> Tuple[float, float]:
    """A run's BLEU minus the other's, and the paired bootstrap's p.  No difference at all is no evidence of one:
    p = 1 (sacrebleu's bootstrap gives two identical outputs its smallest p, 1 / (resamples + 1), as every
    resample differs by exactly the observed 0)."""
    delta = result.score - base.score
    return delta, 1.0 if delta == 0 else result.p_value


def _shown(delta_p) -> Tuple[str, str]:
    """The difference and p as the table and the verdict print them (-0.00 as +0.00)."""
    delta, p = delta_p
    text = f"{delta:+.2f}"
    return ("+0.00" if float(text) == 0 else text), f"{p:.3f}"


def _cell(delta_p) -> str:
    return "-" if delta_p is None else "{} (p = {})".format(*_shown(delta_p))


def table(rows: List[Dict]) -> str:
    """The runs side by side (BLEU and chrF, each difference with its p), then BLEU's signature."""
    with_control = any(row["kind"] == "CE continued" for row in rows)
    head = ("| run | what | test BLEU | chrF | length ratio | lenpen | BLEU vs CE | chrF vs CE |"
            + (" BLEU vs CE continued | chrF vs CE continued |" if with_control else ""))
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        out.append(f"| {row['run'].name} | {row['kind']} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
                   f"{row['len_ratio']:.3f} | {row['lenpen']} | {_cell(row['vs_ce'])} | {_cell(row['chrf_vs_ce'])} |"
                   + (f" {_cell(row['vs_control'])} | {_cell(row['chrf_vs_control'])} |" if with_control else ""))
    return "\n".join(out) + f"\n\nBLEU: {rows[0]['signature']}"


def verdicts(rows: List[Dict], sentences: int) -> List[str]:
    """One sentence per REINFORCE run: against the control where there is one, else against CE."""
    out = []
    control = next((row for row in rows if row["kind"] == "CE continued"), None)
    for row in rows:
        if row["kind"] != "REINFORCE":
            continue
        delta_p, other = (row["vs_control"], "CE continued") if control else (row["vs_ce"], "CE")
        name = row["run"].name
        # the wording follows the numbers as printed (the table's too): a p shown as 0.050 is not significant,
        # and a difference shown as +0.00 is none
        delta, p = _shown(delta_p)
        significant = float(p) < SIGNIFICANT
        if float(delta) == 0:
            line = (f"Verdict ({name}): inconclusive: {delta} test BLEU against {other}, p = {p} (no difference "
                    f"to the second decimal on {sentences:,} test sentences).")
        elif significant and float(delta) > 0:
            line = f"Verdict ({name}): REINFORCE helped: {delta} test BLEU over {other} (p = {p})."
        elif significant:
            line = f"Verdict ({name}): REINFORCE did not help: {delta} test BLEU against {other} (p = {p})."
        else:
            line = (f"Verdict ({name}): inconclusive: {delta} test BLEU against {other}, p = {p} (not "
                    f"significant at {SIGNIFICANT} on {sentences:,} test sentences).")
        if control is None:
            line += (" Without the control (CE continued for the same updates: LAMBDA=1 with its own RL_SAVE) a "
                     "difference to CE may be training longer rather than the reward.")
        out.append(line)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ce", type=Path, required=True, help="the CE run's folder")
    parser.add_argument("--runs", type=Path, nargs="+", required=True,
                        help="REINFORCE and control folders (quickstart.settings, hyp-test.txt)")
    parser.add_argument("--ref", type=Path, required=True, help="the raw test references")
    parser.add_argument("--ce-log", type=Path, help="the CE training log, for the convergence warning")
    parser.add_argument("--n-samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--full-ce", type=Path, help="the full softmax's CE run (to compare the small softmax with)")
    parser.add_argument("--full-rl", type=Path, help="the full softmax's REINFORCE run (from --full-ce)")
    parser.add_argument("--does-it-pay", type=Path,
                        help="does_it_pay.py's --json (its predicted CE and REINFORCE ratios)")
    parser.add_argument("--out", type=Path, help="also write the table and verdict here (text)")
    parser.add_argument("--json", type=Path, help="also write the rows and verdicts here (JSON)")
    bleu.add_tokenize_option(parser)
    args = parser.parse_args(argv)
    runs = [run for run in dict.fromkeys(args.runs) if run.resolve() != args.ce.resolve()]
    runs = list({run.resolve(): run for run in runs}.values())  # one folder named two ways: once
    try:
        rows = compare(args.ce, runs, args.ref, args.n_samples, args.tokenize)
        pairs = [(what, small, full) for what, small, full in
                 (("CE", args.ce, args.full_ce), ("REINFORCE", runs[0] if runs else None, args.full_rl)) if full]
        if any(small is None for _, small, _ in pairs):
            raise ValueError("--full-rl needs the small softmax's REINFORCE run (the first of --runs)")
        versus_full = softmax_rows(pairs, args.ref, args.n_samples, args.tokenize)
        pays = json.loads(args.does_it_pay.read_text()) if args.does_it_pay and args.does_it_pay.is_file() else {}
        predicted = {"CE": pays.get("ce_ratio"), "REINFORCE": pays.get("step_ratio")}
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    said = verdicts(rows, len(read(args.ref)))
    warning = ce_not_converged(args.ce_log) if args.ce_log else None
    parts = [table(rows), *said]
    if versus_full:
        versus_said = softmax_verdicts(versus_full, predicted)
        said += versus_said
        parts += ["", "The small softmax against the full one:", "", softmax_table(versus_full), *versus_said]
    text = "\n".join(parts + ([warning] if warning else []))
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        record = {"rows": [{**row, "run": str(row["run"])} for row in rows], "verdicts": said, "warning": warning,
                  "versus_full": [{**row, "small": str(row["small"]), "full": str(row["full"])} for row in versus_full],
                  "does_it_pay_step_ratio": predicted["REINFORCE"], "does_it_pay_ce_ratio": predicted["CE"],
                  "references": str(args.ref), "bootstrap_resamples": args.n_samples}
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
