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
at epoch e, small and full softmax, as a table and a PNG.  ``recipe``: the
folder of examples/translation/run_transformer_rl_multi30k.sh (runs named
STAGE-kK-sSEED: ce, rl and the controls ctl-ce and ctl-constant): for each
softmax, stage and seed, sacrebleu's BLEU of its decodes (val and test2016,
greedy and beam 5) against the raw references, the best dev BLEU of its
training validations and the update it came at, minutes per epoch and
minutes to that best (from the log's timestamps, summed over resumed
sessions), a mean row over the seeds, and a PNG of dev BLEU against
REINFORCE updates (each run starting at its CE checkpoint's best; a marker
per seed). Under the
table, the comparisons the recipe is for (GAINS), per seed and their mean:
REINFORCE over its CE checkpoint and over the better control, small over full
after REINFORCE, with how many scores reach each comparison's bar; then, for a
folder, REINFORCE against its CE checkpoint and each control on test2016 beam
5, seed by seed: BLEU, chrF and length ratio of each, and REINFORCE's gains
with sacrebleu's paired bootstrap (``--bootstrap N`` resamples).  ``--runs``
adds the records of runs made elsewhere (the ``runs.json`` that ``--json``
wrote for another folder: another machine's seed, a GPU's), so that seeds
trained on different machines share one table; without a folder, the table
is made of those records alone.

    python scripts/rl_logs.py table runs/*.train.log --json rl.json
    python scripts/rl_logs.py start-epochs --ce small=ce-k500/train.log --ce full=ce-k0/train.log \\
        --rl small=rl-e1-k500/train.log --rl small=rl-e4-k500/train.log --rl full=... --out fig3.png
    python scripts/rl_logs.py recipe checkpoints/t32 --data data-bin/multi30k.en-de --tgt de \
        --markdown table.md --png dev_bleu.png
    python scripts/rl_logs.py recipe checkpoints/t32 --data data-bin/multi30k.en-de --runs gpu/runs.json
    python scripts/rl_logs.py tuning checkpoints/t32 checkpoints/tune/* --data data-bin/multi30k.en-de

``tuning``: several recipe folders (tuning variants, each its own OUT started
from the same CE runs with CE_FROM): one row per REINFORCE run, with the
settings that differ between them (from each run's recipe.settings), its best
dev BLEU in training, its decodes and their change over its CE run, and the
length ratio of its greedy dev output beside its CE run's (below 1 the outputs
are shorter than the references and BLEU's brevity penalty applies).
"""

import argparse
import json
import sys
from pathlib import Path

from smallvocab_tools.analysis import bleu as one_bleu
from smallvocab_tools.analysis.recipe_runs import merged_runs, recipe_runs, saved_runs
from smallvocab_tools.analysis.recipe_significance import significance_rows, significance_table
from smallvocab_tools.analysis.recipe_tables import gains_table, recipe_plot, recipe_table, tuning_table
from smallvocab_tools.analysis.train_logs import parse, start_epoch_plot, start_epoch_points, table


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
    r = sub.add_parser("recipe", help="the Transformer-RL recipe's folder: one table, one plot")
    r.add_argument("folder", type=Path, nargs="?", help="the recipe's OUT (optional with --runs)")
    r.add_argument("--data", type=Path, help="the binarized data (its raw/ references; needed with a folder)")
    r.add_argument("--runs", type=Path, action="append", default=[],
                   help="the records of runs made elsewhere, as --json wrote them (repeatable)")
    r.add_argument("--tgt", default="de", help="the target language")
    r.add_argument("--markdown", type=Path, help="write the table here too")
    r.add_argument("--png", type=Path, help="the plot of dev BLEU against REINFORCE updates")
    r.add_argument("--json", type=Path, help="write every run's record here")
    r.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="with a folder: REINFORCE against its CE checkpoint and each control on test2016 beam 5, per "
                        "seed, BLEU and chrF with sacrebleu's paired bootstrap of N resamples (0: not made)")
    one_bleu.add_tokenize_option(r)
    u = sub.add_parser("tuning", help="recipe folders of several settings (CE_FROM): their REINFORCE runs side by "
                                      "side, with the settings that differ")
    u.add_argument("folders", nargs="+", type=Path)
    u.add_argument("--data", type=Path, required=True, help="the binarized data (its raw/ references)")
    u.add_argument("--tgt", default="de", help="the target language")
    u.add_argument("--markdown", type=Path, help="write the table here too")
    one_bleu.add_tokenize_option(u)
    args = parser.parse_args(argv)
    if args.command == "tuning":
        text = tuning_table(args.folders, args.data, args.tgt, args.tokenize)
        sys.stdout.write(text)
        if args.markdown:
            args.markdown.write_text(text)
        return
    if args.command == "recipe":
        sources = [(path, saved_runs(path)) for path in args.runs]
        if args.folder is not None:
            if args.data is None:
                parser.error("recipe FOLDER needs --data (the references its decodes are scored against)")
            sources.insert(0, (args.folder, recipe_runs(args.folder, args.data, args.tgt, args.tokenize)))
        runs = merged_runs(sources)
        text = recipe_table(runs) + "\n" + gains_table(runs)
        if args.folder is not None:
            text += f"\nBLEU of the decodes: {one_bleu.signature(args.tokenize)}\n"
        rows = (significance_rows(args.folder, args.data, args.tgt, n_samples=args.bootstrap, tokenize=args.tokenize)
                if args.folder is not None and args.bootstrap > 0 else [])
        if rows:
            text += (f"\nREINFORCE against each comparison, per seed, test2016 beam 5 (paired bootstrap, "
                     f"{args.bootstrap} resamples):\n\n" + significance_table(rows))
        sys.stdout.write(text)
        if args.markdown:
            args.markdown.write_text(text)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1) + "\n")
        if args.png:
            print(f"wrote {recipe_plot(runs, args.png)}")
        return
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
        start_epoch_plot(points, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
