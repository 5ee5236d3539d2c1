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
writes."""

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from smallvocab_tools.analysis.paired_bleu import paired_bootstrap, read

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


def _length_ratio(hyps: List[str], refs: List[str]) -> float:
    """Hypothesis over reference length as corpus BLEU counts them (its brevity penalty's input)."""
    from sacrebleu.metrics import BLEU

    score = BLEU().corpus_score(hyps, [refs])
    return score.sys_len / max(1, score.ref_len)


def compare(ce: Path, runs: List[Path], ref: Path, n_samples: int = 1000) -> List[Dict]:
    """One row per run (CE first): BLEU, length ratio, and its difference to CE and to the control, each with
    the paired bootstrap's p."""
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
    against_ce = paired_bootstrap([(str(f), hyps[f]) for f in [ce, *runs]], refs, n_samples)
    against_control = {}
    if control is not None:
        others = [run for run in runs if run != control]
        if others:
            results = paired_bootstrap([(str(f), hyps[f]) for f in [control, *others]], refs, n_samples)
            against_control = {run: _difference(result, results[0]) for run, result in zip(others, results[1:])}
    for folder, result in zip([ce, *runs], against_ce):
        rows.append({"run": folder, "kind": "CE" if folder == ce else "CE continued" if folder == control
                     else "REINFORCE", "bleu": result.score, "len_ratio": _length_ratio(hyps[folder], refs),
                     "lenpen": settings(folder / "eval.settings").get("LENPEN", "-"),
                     "vs_ce": None if folder == ce else _difference(result, against_ce[0]),
                     "vs_control": against_control.get(folder)})
    return rows


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
    with_control = any(row["kind"] == "CE continued" for row in rows)
    head = "| run | what | test BLEU | length ratio | lenpen | vs CE |" + (" vs CE continued |" if with_control else "")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        out.append(f"| {row['run'].name} | {row['kind']} | {row['bleu']:.2f} | {row['len_ratio']:.3f} | "
                   f"{row['lenpen']} | {_cell(row['vs_ce'])} |" + (f" {_cell(row['vs_control'])} |"
                                                                    if with_control else ""))
    return "\n".join(out)


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
    args = parser.parse_args(argv)
    runs = [run for run in dict.fromkeys(args.runs) if run.resolve() != args.ce.resolve()]
    runs = list({run.resolve(): run for run in runs}.values())  # one folder named two ways: once
    try:
        rows = compare(args.ce, runs, args.ref, args.n_samples)
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    print(table(rows))
    for line in verdicts(rows, len(read(args.ref))):
        print(line)
    warning = ce_not_converged(args.ce_log) if args.ce_log else None
    if warning:
        print(warning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
