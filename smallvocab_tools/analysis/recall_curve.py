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
from pathlib import Path

from smallvocab_tools.analysis.plotting import finish, new_figure
from smallvocab_tools.data.output_dir import output_file_problem

DEFAULT_KS = [50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000]


def parse_run(text):
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"a run looks like LABEL=PREDICTOR[@DATA], not {text!r}")
    predictor, _, data = rest.partition("@")
    return label, predictor, data or None


def _listed(ks):
    return ", ".join(map(str, ks))


# judgement: on Multi30k the predictor is 10 points above the frequency list at K = 500; a new user's, 1.5 points
# above it, bought nothing
WEAK_MARGIN = 3.0


def measure(runs, split, ks, batch_size=256, log=print):
    """{label: {K: recall}} for each run and each data folder's baseline.  A
    K above a run's vocabulary size |V| is left out of its curve (noted with
    ``log``); a run with no K left is an error, raised before any
    computation.  A run less than WEAK_MARGIN points above the frequency
    list at some K gets a warning (``log``) with what to do."""
    from fairseq_smallvocab.predictor.inference import frequency_scores, load_predictor, recall_at
    from fairseq_smallvocab.predictor.scoring import versus_frequency

    loaded = []
    for label, predictor, data in runs:
        model, task = load_predictor(predictor, data)
        vocab = len(task.target_dictionary)
        run_ks = [k for k in ks if k <= vocab]
        if not run_ks:
            raise ValueError(f"{label}: every K ({_listed(ks)}) is above its target vocabulary size |V| = {vocab}; "
                             f"pass --ks with values up to {vocab}")
        loaded.append((label, model, task, vocab, run_ks))
    for label, _, _, vocab, run_ks in loaded:
        if len(run_ks) < len(ks):
            log(f"note: K = {_listed(k for k in ks if k > vocab)} left out for {label}: above its target "
                f"vocabulary size |V| = {vocab}")
    curves, baselines = {}, {}
    for label, model, task, _, run_ks in loaded:
        curves[label] = recall_at(model, task, split, run_ks, batch_size)
        folder = str(task.cfg.data)
        if folder not in baselines:
            baselines[folder] = recall_at(model, task, split, run_ks, batch_size, scores=frequency_scores(task))
        for k in run_ks:
            recall, frequency = curves[label][k], baselines[folder][k]
            if recall - frequency < WEAK_MARGIN:
                adds = "little" if recall > frequency else "nothing"
                log(f"warning: {label}: recall@{k} {recall:.2f}% is "
                    f"{versus_frequency(recall, frequency, WEAK_MARGIN)} (the {k} most frequent training words for "
                    f"every input): the predictor adds {adds}. Train it longer or on more data, raise K, or use the "
                    "full softmax (--small-vocab-size 0)")
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


def check_png(path):
    """Why the plot cannot be written at ``path`` (None when it can), told
    before the recall is computed rather than after."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(path)
    problem = output_file_problem(path, "recall.png")
    if problem:
        return problem
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix[1:].lower()
    if suffix and suffix not in formats:
        return f"'{suffix}' is not an image format matplotlib writes ({', '.join(sorted(formats))}); use .png"
    return None


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
    problem = check_png(args.png) if args.png else None
    if problem:
        parser.exit(2, f"error: --png {args.png}: {problem}\n")
    from fairseq_smallvocab.predictor.inference import PredictorError  # after the command line: --help is quick

    try:
        ks = sorted({int(k) for k in args.ks.split(",") if k.strip()})
        curves = measure(args.runs, args.split, ks, args.batch_size, log=lambda m: print(m, file=sys.stderr))
    except (PredictorError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(markdown(curves, [k for k in ks if any(k in curve for curve in curves.values())]))
    if args.png:
        try:
            plot(curves, args.png, args.title or f"recall@K on the {args.split} split")
        except OSError as err:  # e.g. the disk filled up meanwhile: the table above is printed
            parser.exit(2, f"error: --png {args.png}: the plot could not be written ({err})\n")
        print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
