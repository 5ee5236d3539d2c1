"""The tables and the plot of the recipe's run records (``recipe_runs``):
``rl_logs.py recipe``'s table (per softmax, stage and seed, with the mean over
the seeds) and the comparisons the recipe is for (GAINS), ``rl_logs.py
tuning``'s table of several recipe folders' REINFORCE runs side by side, and
the plot of dev BLEU against REINFORCE updates."""

import statistics
from pathlib import Path

from smallvocab_tools.analysis import bleu as one_bleu
from smallvocab_tools.analysis.recipe_runs import DECODES, RECIPE_STAGES, decode_name, recipe_runs, run_settings


def cell(value, fmt="{:.2f}"):
    """A table cell: the value formatted, "-" where there is none."""
    return "-" if value is None else fmt.format(value)


def recipe_table(runs) -> str:
    head = ("| softmax | run | seed | " + "".join(f"{decode_name(split, tag)} | " for split, tag in DECODES)
            + "best dev BLEU in training | at update | min / epoch | min to best | device |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    order = list(RECIPE_STAGES)
    for k in sorted({r["k"] for r in runs}, reverse=True):
        for stage in order:
            group = sorted((r for r in runs if r["k"] == k and r["stage"] == stage), key=lambda r: r["seed"])
            rows = [(str(r["seed"]), r) for r in group]
            if len(group) > 1:  # the mean over the seeds that have each value
                mean = {"bleu": {key: statistics.mean(r["bleu"][key] for r in group if key in r["bleu"])
                                 for key in {key for r in group for key in r["bleu"]}}}
                devices = {r.get("device") for r in group}
                mean["device"] = devices.pop() if len(devices) == 1 else "mixed"
                # minutes are averaged only over seeds trained on one kind of device
                timed = ("min_per_epoch", "min_to_best") if mean["device"] != "mixed" else ()
                for key in ("best_dev", "best_update", *timed):
                    values = [r[key] for r in group if r[key] is not None]
                    mean[key] = statistics.mean(values) if values else None
                rows.append(("mean", {"min_per_epoch": None, "min_to_best": None, **mean}))
            for seed, r in rows:
                softmax = f"small (K = {k})" if k else "full"
                lines.append(f"| {softmax} | {RECIPE_STAGES[stage]} | {seed} | " + " | ".join(
                    cell(r["bleu"].get(split + tag)) for split, tag in DECODES) +
                    f" | {cell(r['best_dev'])} | {cell(r['best_update'], '{:.0f}')} | "
                    f"{cell(r['min_per_epoch'], '{:.1f}')} | {cell(r['min_to_best'], '{:.1f}')} | "
                    f"{r.get('device') or '-'} |")
    return "\n".join(lines) + "\n"


# The recipe's comparisons, each with the bar its README sets: (what, bar, the run, the runs it is compared
# with; of several, the best on each score). "small" is every K > 0 in the folder, "full" is K = 0.
GAINS = [("small: REINFORCE - its CE checkpoint", 0.7, ("small", "rl"), [("small", "ce")]),
         ("small: REINFORCE - the better control", 0.4, ("small", "rl"),
          [("small", "ctl-ce"), ("small", "ctl-constant")]),
         ("full: REINFORCE - its CE checkpoint", None, ("full", "rl"), [("full", "ce")]),
         ("full: REINFORCE - the better control", 0.4, ("full", "rl"), [("full", "ctl-ce"), ("full", "ctl-constant")]),
         ("REINFORCE: small - full", -0.3, ("small", "rl"), [("full", "rl")])]


def gains_table(runs) -> str:
    """The recipe's comparisons (GAINS) on each decode, per seed and (with several seeds) their mean over the
    seeds that have both sides, with how many of the scores meet the bar."""
    shown = [(split, tag) for split, tag in DECODES if any(split + tag in r["bleu"] for r in runs)]
    decodes = [split + tag for split, tag in shown]
    head = ("| comparison | bar | seed | " + "".join(f"{decode_name(split, tag)} | " for split, tag in shown)
            + "scores at the bar |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    seeds = sorted({r["seed"] for r in runs})
    bleu = {(r["k"], r["stage"], r["seed"]): r["bleu"] for r in runs}
    smalls = sorted({r["k"] for r in runs if r["k"]})
    for small in smalls:
        k = {"small": small, "full": 0}
        for what, bar, (kind, stage), against in GAINS:
            if len(smalls) > 1:
                what = what.replace("small", f"small (K = {small})")
            per_seed = {}
            for seed in seeds:
                diffs = {}
                for key in decodes:
                    mine = bleu.get((k[kind], stage, seed), {}).get(key)
                    others = [bleu.get((k[o_kind], o_stage, seed), {}).get(key) for o_kind, o_stage in against]
                    others = [o for o in others if o is not None]
                    if mine is not None and others:
                        diffs[key] = mine - max(others)
                if diffs:
                    per_seed[str(seed)] = diffs
            if len(per_seed) > 1:
                per_seed["mean"] = {key: statistics.mean(d[key] for d in per_seed.values() if key in d)
                                    for key in decodes if any(key in d for d in per_seed.values())}
            for seed, diffs in per_seed.items():
                # a score meets its bar as the table shows it (to two decimals)
                met = "-" if bar is None else f"{sum(round(d, 2) >= bar for d in diffs.values())} of {len(diffs)}"
                lines.append(f"| {what} | {'-' if bar is None else f'{bar:+.1f}'} | {seed} | " + "".join(
                    f"{cell(diffs.get(key), '{:+.2f}')} | " for key in decodes) + f"{met} |")
    return "\n".join(lines) + "\n"


def tuning_table(folders, data: Path, tgt: str, tokenize: str = one_bleu.TOKENIZE) -> str:
    """One row per REINFORCE run of each recipe folder (a tuning variant: its own OUT, usually with
    CE_FROM): the settings that differ between the folders' runs, the best dev BLEU in training, the
    decodes, and their change over the folder's CE run of the same softmax and seed."""
    rows = []
    for folder in folders:
        runs = recipe_runs(folder, data, tgt, tokenize)
        ce = {(r["k"], r["seed"]): r for r in runs if r["stage"] == "ce"}
        for r in runs:
            if r["stage"] == "rl":
                rows.append((folder, r, ce.get((r["k"], r["seed"])),
                             run_settings(folder / f"rl-k{r['k']}-s{r['seed']}")))
    if not rows:
        raise SystemExit(f"{', '.join(map(str, folders))}: no REINFORCE run (rl-kK-sSEED) with a train.log")
    keys = [key for key in dict.fromkeys(key for *_, settings in rows for key in settings)
            if len({settings.get(key) for *_, settings in rows}) > 1]
    decodes = [(split, tag) for split, tag in DECODES if any(split + tag in r["bleu"] for _, r, _, _ in rows)]
    head = ("| folder | " + "".join(f"{key} | " for key in keys) + "softmax | seed | best dev BLEU in training | "
            "at update | " + "".join(f"{decode_name(split, tag)} (change over CE) | " for split, tag in decodes)
            + "dev greedy length ratio (CE's) | min to best |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for folder, r, ce, settings in sorted(rows, key=lambda row: (-row[1]["k"], row[1]["seed"])):
        cells = [folder.name, *(settings.get(key, "-") for key in keys), f"small (K = {r['k']})" if r["k"] else "full",
                 str(r["seed"]), cell(r["best_dev"]), cell(r["best_update"], "{:.0f}")]
        for split, tag in decodes:
            value, before = r["bleu"].get(split + tag), (ce or {"bleu": {}})["bleu"].get(split + tag)
            cells.append(cell(value) + ("" if value is None or before is None else f" ({value - before:+.2f})"))
        ratio, before = r["length_ratio"].get("valid"), (ce or {"length_ratio": {}})["length_ratio"].get("valid")
        cells.append(cell(ratio, "{:.3f}") + ("" if ratio is None or before is None else f" ({before:.3f})"))
        cells.append(cell(r["min_to_best"], "{:.1f}"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def recipe_plot(runs, path: Path):
    """Dev BLEU against REINFORCE updates: each REINFORCE or control run from its CE checkpoint's best."""
    from smallvocab_tools.analysis.plotting import finish, new_figure

    plt, fig, ax = new_figure((7, 4.5))
    start = {(r["k"], r["seed"]): r["best_dev"] for r in runs if r["stage"] == "ce"}
    styles = {"rl": "-", "ctl-ce": "--", "ctl-constant": ":"}
    drawn = [r for r in runs if r["stage"] != "ce" and r["curve"]]
    # the line's style says the run, its colour the softmax, its marker the seed (named in the legend with several)
    seeds = sorted({r["seed"] for r in drawn})
    markers = {seed: ".xs^v+*"[i % 7] for i, seed in enumerate(seeds)}  # past 7 seeds, the markers repeat
    labelled = {}  # (k, stage) -> its legend entry
    for r in sorted(drawn, key=lambda r: (-r["k"], r["stage"], r["seed"])):
        first = start.get((r["k"], r["seed"]))
        points = ([(0, first)] if first is not None else []) + r["curve"]
        key = (r["k"], r["stage"])
        label = None if key in labelled else f"{'small' if r['k'] else 'full'}: {RECIPE_STAGES[r['stage']]}"
        labelled.setdefault(key, label)
        ax.plot([p[0] for p in points], [p[1] for p in points], linestyle=styles[r["stage"]],
                marker=markers[r["seed"]], color="C0" if r["k"] else "C1", label=label if len(seeds) == 1 else None)
    if len(seeds) > 1:  # a run's entry without a marker (no one seed's), then a marker's entry per seed
        for (k, stage), label in labelled.items():
            ax.plot([], [], linestyle=styles[stage], color="C0" if k else "C1", label=label)
        for seed in seeds:
            ax.plot([], [], linestyle="none", marker=markers[seed], color="gray", label=f"seed {seed}")
    return finish(plt, fig, ax, path, "updates after the CE checkpoint", "dev BLEU (greedy, --eval-bleu)",
                  "REINFORCE from the best CE checkpoint, with its controls")

