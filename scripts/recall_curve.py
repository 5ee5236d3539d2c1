#!/usr/bin/env python3
"""Recall@K of vocabulary predictors over a range of K (the paper's Figure 1),
beside the frequency baseline (the K most frequent training target words for
every input, no model), as a markdown table and a PNG plot.

Each --run is LABEL=PREDICTOR[@DATA]: a predictor checkpoint, evaluated on its
own training data folder or on DATA.  The baseline is drawn once per data
folder.

    python scripts/recall_curve.py --run "En-De=ckpt/vp/checkpoint_best.pt" \\
        --split valid --png docs/recall_multi30k.png
"""

import argparse
import logging
import sys

from fairseq_smallvocab.predictor import PredictorError, frequency_scores, load_predictor, recall_at
from smallvocab_tools.analysis.plotting import finish, new_figure

DEFAULT_KS = [50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000]


def parse_run(text):
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"a run looks like LABEL=PREDICTOR[@DATA], not {text!r}")
    predictor, _, data = rest.partition("@")
    return label, predictor, data or None


def measure(runs, split, ks, batch_size=256):
    """{label: {K: recall}} for each run and each data folder's baseline."""
    curves, baselines = {}, {}
    for label, predictor, data in runs:
        model, task = load_predictor(predictor, data)
        vocab = len(task.target_dictionary)
        run_ks = [k for k in ks if k <= vocab]
        curves[label] = recall_at(model, task, split, run_ks, batch_size)
        folder = str(task.cfg.data)
        if folder not in baselines:
            baselines[folder] = recall_at(model, task, split, run_ks, batch_size, scores=frequency_scores(task))
    for folder, curve in baselines.items():
        name = "frequency baseline" if len(baselines) == 1 else f"frequency baseline ({folder})"
        curves[name] = curve
    return curves


def markdown(curves, ks):
    header = "| K | " + " | ".join(curves) + " |"
    rows = [header, "| ---: | " + " | ".join("---:" for _ in curves) + " |"]
    for k in ks:
        cells = [f"{curve[k]:.2f}" if k in curve else "-" for curve in curves.values()]
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(curves, path, title):
    plt, fig, ax = new_figure()
    for label, curve in curves.items():
        ks = sorted(curve)
        style = "--" if label.startswith("frequency baseline") else "-"
        ax.plot(ks, [curve[k] for k in ks], style, marker="o", markersize=3, label=label)
    ax.set_xscale("log")
    finish(plt, fig, ax, path, "K (size of the predicted vocabulary)", "recall of target tokens (%)", title)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", dest="runs", action="append", type=parse_run, required=True,
                        help="LABEL=PREDICTOR[@DATA]; repeat for several predictors or datasets")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="comma-separated K values")
    parser.add_argument("--png", default=None, help="write the plot here")
    parser.add_argument("--title", default=None)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        ks = sorted({int(k) for k in args.ks.split(",") if k.strip()})
        curves = measure(args.runs, args.split, ks, args.batch_size)
    except (PredictorError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(markdown(curves, [k for k in ks if any(k in curve for curve in curves.values())]))
    if args.png:
        plot(curves, args.png, args.title or f"recall@K on the {args.split} split")
        print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
