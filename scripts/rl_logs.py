#!/usr/bin/env python3
"""Summarize fairseq-train logs of CE and REINFORCE runs (``--log-format
simple``): the validations (dev BLEU of ``--eval-bleu``, reward, ...) and the
training epochs' metrics (reward, greedy_frac, entropy, train_wall, ...).

``table``: one row per log (name = the file name without ``.train.log``):
updates, the dev BLEU of each validation, the best, and the first and last
training epoch's reward / greedy_frac / entropy; ``--json`` writes every
parsed record.  ``start-epochs``: the paper's Figure 3: dev BLEU after
REINFORCE started from the CE checkpoint of epoch e (read from the run's
``--finetune-from-model .../checkpointE.pt``) beside the CE run's own dev BLEU
at epoch e, small and full softmax, as a table and a PNG.

    python scripts/rl_logs.py table runs/*.train.log --json rl.json
    python scripts/rl_logs.py start-epochs --ce small=ce-k500/train.log --ce full=ce-k0/train.log \\
        --rl small=rl-e1-k500/train.log --rl small=rl-e4-k500/train.log --rl full=... --out fig3.png
"""

import argparse
import json
import re
import sys
from pathlib import Path

_LINE = re.compile(r"\| (train|valid) \| epoch (\d+) \|(.*)$")
_START = re.compile(r"'finetune_from_model': '([^']*)'")


def parse(path) -> dict:
    """{"name", "valid": [{epoch, metric: value, ...}], "train": [...], "start": checkpoint or None}."""
    out = {"name": Path(path).name.replace(".train.log", ""), "valid": [], "train": [], "start": None}
    for line in Path(path).read_text(errors="replace").splitlines():
        start = _START.search(line)
        if start and out["start"] is None:
            out["start"] = start.group(1)
        match = _LINE.search(line)
        if not match or (match.group(1) == "valid" and "valid on" not in line):
            continue
        record = {"epoch": int(match.group(2))}
        for field in match.group(3).split("|"):
            parts = field.split()
            if len(parts) == 2:
                try:
                    record[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        out[match.group(1)].append(record)
    return out


def start_epoch(run: dict):
    """The CE epoch a fine-tuning run started from (checkpointE.pt), else None."""
    match = re.search(r"checkpoint(\d+)\.pt$", run["start"] or "")
    return int(match.group(1)) if match else None


def table(runs) -> str:
    head = ("| run | updates | dev BLEU per validation | best | reward (first / last epoch) | greedy_frac | "
            "entropy |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for run in runs:
        bleus = [v["bleu"] for v in run["valid"] if "bleu" in v]
        updates = max([v.get("num_updates", 0) for v in run["valid"] + run["train"]] or [0])
        first, last = (run["train"][0], run["train"][-1]) if run["train"] else ({}, {})

        def pair(key, ends=(first, last)):
            return " / ".join(f"{x[key]:g}" for x in ends if key in x) or "-"

        lines.append(f"| {run['name']} | {updates:.0f} | {' '.join(f'{b:.2f}' for b in bleus) or '-'} | "
                     f"{max(bleus) if bleus else float('nan'):.2f} | {pair('reward')} | {pair('greedy_frac')} | "
                     f"{pair('entropy')} |")
    return "\n".join(lines) + "\n"


def start_epoch_points(ce: dict, rl: dict) -> dict:
    """{label: [(epoch, CE dev BLEU at that epoch, dev BLEU after REINFORCE)]}, by start epoch."""
    points = {}
    for label, runs in rl.items():
        ce_bleu = {v["epoch"]: v["bleu"] for v in ce[label]["valid"] if "bleu" in v}
        rows = []
        for run in runs:
            epoch = start_epoch(run)
            bleus = [v["bleu"] for v in run["valid"] if "bleu" in v]
            if epoch is None or not bleus:
                raise ValueError(f"{run['name']}: no checkpointE.pt start or no dev BLEU in its log")
            rows.append((epoch, ce_bleu.get(epoch), bleus[-1]))
        points[label] = sorted(rows)
    return points


def _labelled(values, what):
    out = {}
    for value in values:
        label, sep, path = value.partition("=")
        if not sep:
            raise SystemExit(f"{what} {value}: expected LABEL=PATH (e.g. small=ce-k500/train.log)")
        out.setdefault(label, []).append(parse(path))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table", help="one row per log")
    t.add_argument("logs", nargs="+", type=Path)
    t.add_argument("--json", type=Path, help="write every parsed record here")
    s = sub.add_parser("start-epochs", help="REINFORCE from CE checkpoints of several epochs (Figure 3)")
    s.add_argument("--ce", action="append", required=True, help="LABEL=CE log (one per label)")
    s.add_argument("--rl", action="append", required=True, help="LABEL=REINFORCE log (several per label)")
    s.add_argument("--out", type=Path, help="PNG")
    args = parser.parse_args(argv)
    if args.command == "table":
        runs = [parse(path) for path in args.logs]
        sys.stdout.write(table(runs))
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1) + "\n")
        return
    ce = {label: runs[0] for label, runs in _labelled(args.ce, "--ce").items()}
    rl = _labelled(args.rl, "--rl")
    missing = sorted(set(rl) - set(ce))
    if missing:
        raise SystemExit(f"--rl {', '.join(missing)}: no --ce log with that label")
    points = start_epoch_points(ce, rl)
    print("| softmax | CE epoch | CE dev BLEU | after REINFORCE | change |")
    print("|---|---|---|---|---|")
    for label, rows in points.items():
        for epoch, before, after in rows:
            change = f"{after - before:+.2f}" if before is not None else "-"
            print(f"| {label} | {epoch} | {before if before is not None else '-'} | {after:.2f} | {change} |")
    if args.out:
        from smallvocab_tools.analysis.plotting import finish, new_figure

        plt, fig, ax = new_figure()
        for label, rows in points.items():
            line, = ax.plot([r[0] for r in rows], [r[2] for r in rows], marker="o", label=f"{label}: after REINFORCE")
            ax.plot([r[0] for r in rows], [r[1] for r in rows], linestyle="--", marker="x", color=line.get_color(),
                    label=f"{label}: CE checkpoint")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r[0] for rows in points.values() for r in rows}))
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        finish(plt, fig, ax, args.out, "CE epochs before REINFORCE", "dev BLEU",
               "REINFORCE (lambda = 0) from early CE checkpoints")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
