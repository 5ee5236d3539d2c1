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
after REINFORCE, with how many scores reach each comparison's bar.  ``--runs``
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
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

_LINE = re.compile(r"\| (train|valid) \| epoch (\d+) \|(.*)$")
_START = re.compile(r"'finetune_from_model': '([^']*)'")
_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_SESSION = "| fairseq_cli.train | {"  # the config line each start (or resume) of fairseq-train logs
# where it trained: the GPU fairseq's trainer names ("rank   0: capabilities = ... ; name = NVIDIA H100 ..."), else
# the CPU where the config says --cpu
_GPU = re.compile(r"rank +\d+: capabilities = .*; name = (.+?)\s*$")


def parse(path) -> dict:
    """{"name", "valid": [{epoch, metric: value, ...}], "train": [...], "start": checkpoint or None, "device":
    the GPU's name, "cpu" or None}; each record also has "elapsed", the seconds of training before its line
    (summed over the log's sessions: a resumed run's pause is not counted), where the log's lines have
    timestamps."""
    out = {"name": Path(path).name.replace(".train.log", ""), "valid": [], "train": [], "start": None,
           "device": None}
    before, first, last = 0.0, None, None  # the earlier sessions' seconds; this session's first and last times
    for line in Path(path).read_text(errors="replace").splitlines():
        stamp = _TIME.match(line)
        now = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").timestamp() if stamp else None
        if _SESSION in line and first is not None:
            before, first = before + (last - first), None
        if now is not None:
            first, last = (now if first is None else first), now
        start = _START.search(line)
        if start and out["start"] is None:
            out["start"] = start.group(1)
        gpu = _GPU.search(line)
        if gpu and out["device"] in (None, "cpu"):
            out["device"] = gpu.group(1)
        elif _SESSION in line and "'cpu': True" in line and out["device"] is None:
            out["device"] = "cpu"
        match = _LINE.search(line)
        if not match or (match.group(1) == "valid" and "valid on" not in line):
            continue
        record = {"epoch": int(match.group(2))}
        if now is not None:
            record["elapsed"] = before + (now - first)
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


RECIPE_STAGES = {"ce": "CE (best checkpoint)", "rl": "REINFORCE", "ctl-ce": "control: CE continued",
                 "ctl-constant": "control: constant reward"}
_RUN = re.compile(r"^(ce|rl|ctl-ce|ctl-constant)-k(\d+)-s(\d+)$")
DECODES = [("valid", ""), ("valid", ".beam5"), ("test", ""), ("test", ".beam5")]


def decode_name(split: str, tag: str) -> str:
    """A decode's column name: "dev greedy", "test beam 5", ..."""
    return f"{'dev' if split == 'valid' else split} {'beam 5' if tag else 'greedy'}"


def corpus_scores(hyp: Path, ref: Path):
    """sacrebleu's BLEU of a hypothesis file against the raw references (already tokenized: no further
    tokenization, as decode_multi30k.sh scores them), and its length ratio (hypothesis words / reference
    words: below 1, the brevity penalty takes its share)."""
    import sacrebleu

    hyps, refs = hyp.read_text().splitlines(), ref.read_text().splitlines()
    if len(hyps) != len(refs):
        raise SystemExit(f"{hyp}: {len(hyps)} lines, but {ref} has {len(refs)}")
    score = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True)  # tokenized on purpose
    return score.score, score.sys_len / score.ref_len


def corpus_bleu(hyp: Path, ref: Path) -> float:
    return corpus_scores(hyp, ref)[0]


def recipe_runs(folder: Path, data: Path, tgt: str):
    """One record per run folder STAGE-kK-sSEED: its decodes' BLEU, best dev BLEU, minutes per epoch and to
    the best, and its validations (updates, dev BLEU)."""
    runs = []
    for path in sorted(folder.iterdir()):
        match = _RUN.match(path.name)
        if not match or not (path / "train.log").is_file():
            continue
        log = parse(path / "train.log")
        valid = [v for v in log["valid"] if "bleu" in v]
        best = max(valid, key=lambda v: v["bleu"]) if valid else None
        times = [t["elapsed"] for t in log["train"] if "elapsed" in t]
        epochs = [b - a for a, b in zip([0.0] + times, times)]
        bleu, ratio = {}, {}
        for split, tag in DECODES:
            hyp = path / f"hyp-{split}{tag}.txt"
            if hyp.is_file():
                bleu[split + tag], ratio[split + tag] = corpus_scores(hyp, data / "raw" / f"{split}.{tgt}")
        runs.append({"stage": match.group(1), "k": int(match.group(2)), "seed": int(match.group(3)),
                     "bleu": bleu, "length_ratio": ratio, "best_dev": best["bleu"] if best else None,
                     "best_update": best.get("num_updates") if best else None,
                     "min_per_epoch": statistics.median(epochs) / 60 if epochs else None,
                     "min_to_best": best["elapsed"] / 60 if best and "elapsed" in best else None,
                     "device": log["device"], "curve": [(v.get("num_updates", 0), v["bleu"]) for v in valid]})
    if not runs:
        raise SystemExit(f"{folder}: no run folders named STAGE-kK-sSEED with a train.log")
    return runs


RECORD_KEYS = ("stage", "k", "seed", "bleu", "best_dev", "best_update", "min_per_epoch", "min_to_best", "curve")


def saved_runs(path: Path):
    """The run records in ``path`` (a ``recipe --json`` file), checked to be such records."""
    try:
        runs = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"--runs {path}: not readable as JSON ({err})") from None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and set(RECORD_KEYS) <= set(r) for r in runs):
        raise SystemExit(f"--runs {path}: not a list of run records ({', '.join(RECORD_KEYS)}), as "
                         "`rl_logs.py recipe FOLDER --json FILE` writes them")
    return runs


def merged_runs(sources):
    """The records of every (source, runs), refused where two sources have the same run (stage, K, seed)."""
    seen, runs = {}, []
    for source, records in sources:
        for r in records:
            key = (r["stage"], r["k"], r["seed"])
            if key in seen:
                raise SystemExit(f"{r['stage']}-k{r['k']}-s{r['seed']} is in both {seen[key]} and {source}: "
                                 "leave one of them out")
            seen[key] = source
            runs.append(r)
    if not runs:
        raise SystemExit("no runs: give a recipe folder, or --runs FILE")
    return runs


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


def run_settings(path: Path) -> dict:
    """A recipe run's recipe.settings ("epochs=E KEY=VALUE ... ARCH_ARGS=the model's flags") as a dict."""
    text = (path / "recipe.settings").read_text().strip() if (path / "recipe.settings").is_file() else ""
    head, _, arch = text.partition(" ARCH_ARGS=")
    settings = dict(field.split("=", 1) for field in head.split() if "=" in field)
    if arch:
        settings["ARCH_ARGS"] = arch
    return settings


def tuning_table(folders, data: Path, tgt: str) -> str:
    """One row per REINFORCE run of each recipe folder (a tuning variant: its own OUT, usually with
    CE_FROM): the settings that differ between the folders' runs, the best dev BLEU in training, the
    decodes, and their change over the folder's CE run of the same softmax and seed."""
    rows = []
    for folder in folders:
        runs = recipe_runs(folder, data, tgt)
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
    u = sub.add_parser("tuning", help="recipe folders of several settings (CE_FROM): their REINFORCE runs side by "
                                      "side, with the settings that differ")
    u.add_argument("folders", nargs="+", type=Path)
    u.add_argument("--data", type=Path, required=True, help="the binarized data (its raw/ references)")
    u.add_argument("--tgt", default="de", help="the target language")
    u.add_argument("--markdown", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    if args.command == "tuning":
        text = tuning_table(args.folders, args.data, args.tgt)
        sys.stdout.write(text)
        if args.markdown:
            args.markdown.write_text(text)
        return
    if args.command == "recipe":
        sources = [(path, saved_runs(path)) for path in args.runs]
        if args.folder is not None:
            if args.data is None:
                parser.error("recipe FOLDER needs --data (the references its decodes are scored against)")
            sources.insert(0, (args.folder, recipe_runs(args.folder, args.data, args.tgt)))
        runs = merged_runs(sources)
        text = recipe_table(runs) + "\n" + gains_table(runs)
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
