"""The report of examples/translation/run_rl_budget_multi30k.sh: fine-tuning arms given the same seconds from one
converged CE start (runs named ARM-kK-sSEED, each with its recipe.settings; the start's decodes in start-kK).

- ``runs``: one record per run: its arm, K and seed, seconds per update (the probe's, ``budget.py``) and
  updates, its decodes' BLEU (dev and test2016, greedy and beam 5, against the raw references) with the length
  ratio, and its curve: the greedy dev BLEU of each validation against the budget's seconds (updates x seconds
  per update, so that runs that shared the cores compare), starting at the start's own dev BLEU.
- ``comparisons``: each arm against the control arm on test2016 beam 5 (each at its dev length penalty): per seed
  (the same seed's run of each) and pooled over the seeds (their sentences concatenated), BLEU and chrF gains with
  sacrebleu's paired bootstrap, the dev gain beside it.
- ``table`` / ``plot``: the page's table and figure, the budget said above the table.

Every run of the folder must have had the same budget (its recipe.settings ``budget=``), and ``--control`` must be
one of its arms: the report refuses otherwise, before it scores anything or writes a file.

    python scripts/rl_budget_report.py checkpoints/rl-budget-multi30k.en-de --data data-bin/multi30k.en-de --tgt de \
      --control ce-k500 --markdown table.md --png dev_bleu_seconds.png --json runs.json
"""

import argparse
import json
import math
import re
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from smallvocab_tools.analysis import bleu as one_bleu
from smallvocab_tools.analysis.paired_bleu import read
from smallvocab_tools.analysis.recipe_runs import DECODES, corpus_scores, decode_name
from smallvocab_tools.analysis.train_logs import parse
from smallvocab_tools.data.output_dir import output_file_problem

_RUN = re.compile(r"^(\w+)-k(\d+)-s(\d+)$")


class ReportError(Exception):
    """What the folder or the arguments lack for the report, said before any work."""


def settings(path: Path) -> dict:
    """A run's recipe.settings: KEY=VALUE words, ``flags=`` last and taking the rest of the line."""
    text = path.read_text().strip()
    head, _, flags = text.partition(" flags=")
    out = dict(word.split("=", 1) for word in head.split() if "=" in word)
    out["flags"] = flags
    return out


def _number(record: dict, field: str, path: Path, integer: bool = False) -> float:
    """``record[field]`` as a positive finite number (a whole one where ``integer``), or a ReportError naming the
    file and the field."""
    text = record.get(field)
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 < value < math.inf:
        raise ReportError(f"{path}: {field}={text if text is not None else '(missing)'} is not a "
                          f"{'whole number' if integer else 'number'} above 0; the recipe writes this file: move "
                          f"the run's folder away and run the recipe again to retrain it")
    return value


def recipe_runs(folder: Path) -> List[dict]:
    """The runs of the folder (ARM-kK-sSEED with recipe.settings and train.log): their folder, arm, K, seed and
    settings, the numbers checked (``updates``, ``budget``, ``seconds_per_update``)."""
    out = []
    for path in sorted(folder.iterdir()):
        match = _RUN.match(path.name)
        if not match or not (path / "recipe.settings").is_file() or not (path / "train.log").is_file():
            continue
        record = settings(path / "recipe.settings")
        for field in ("updates", "budget", "seconds_per_update"):
            record[field] = _number(record, field, path / "recipe.settings", integer=field == "updates")
        out.append({"path": path, "arm": f"{match.group(1)}-k{match.group(2)}", "k": int(match.group(2)),
                    "seed": int(match.group(3)), "settings": record})
    return out


def seconds(value: float) -> str:
    """A budget as said: "3,600 s", "2.5 s"."""
    return f"{value:,.0f} s" if value == int(value) else f"{value:,.6g} s"


def the_budget(found: List[dict], folder: Path) -> Optional[float]:
    """The one budget of the runs ``found`` (``recipe_runs``), None without runs; a ReportError where they differ:
    arms given different seconds do not compare."""
    by_budget: Dict[float, List[str]] = {}
    for r in found:
        by_budget.setdefault(r["settings"]["budget"], []).append(r["path"].name)
    if len(by_budget) > 1:
        said = "; ".join(f"{seconds(b)}: {', '.join(names)}" for b, names in sorted(by_budget.items()))
        raise ReportError(f"the runs of {folder} were trained for different budgets ({said}); arms compare only at "
                          "equal seconds: move the runs of the other budgets to a folder of their own and report "
                          "each folder")
    return next(iter(by_budget), None)


def check_control(found: List[dict], folder: Path, control: str, decode: str = "test.beam5"):
    """A ReportError unless ``control`` is an arm of the runs ``found`` (``recipe_runs``) and, where any run has
    decoded ``decode``, one of the control's runs has."""
    arms = sorted({r["arm"] for r in found})
    if not arms:
        raise ReportError(f"{folder} holds no runs (ARM-kK-sSEED folders with recipe.settings and train.log): "
                          "give the recipe's OUT once its runs are trained")
    if control not in arms:
        raise ReportError(f"--control {control}: {folder} has no run of that arm (its arms: {', '.join(arms)}); "
                          "give one of them")
    decoded = sorted({r["arm"] for r in found if (r["path"] / f"hyp-{decode}.txt").is_file()})
    if decoded and control not in decoded:
        raise ReportError(f"--control {control}: none of its runs has hyp-{decode}.txt (the decoded arms: "
                          f"{', '.join(decoded)}); decode its runs first (the recipe does, run again), or give one "
                          "of those")


def _decodes(folder: Path, data: Path, tgt: str, tokenize: str = one_bleu.TOKENIZE) -> dict:
    out = {}
    for split, tag in DECODES:
        hyp = folder / f"hyp-{split}{tag}.txt"
        if hyp.is_file():
            bleu, ratio = corpus_scores(hyp, data / "raw" / f"{split}.{tgt}", tokenize)
            out[decode_name(split, tag)] = {"bleu": round(bleu, 2), "length_ratio": round(ratio, 4)}
    return out


def runs(folder: Path, data: Path, tgt: str, tokenize: str = one_bleu.TOKENIZE) -> List[dict]:
    """Every run of the folder (see the module), the start's decodes as arm "start" (seed 0)."""
    out = []
    starts = {}
    for path in sorted(folder.glob("start-k*")):
        k = int(path.name[len("start-k"):])
        starts[k] = _decodes(path, data, tgt, tokenize)
        out.append({"arm": "start", "k": k, "seed": 0, "decodes": starts[k], "curve": []})
    for run in recipe_runs(folder):
        path, k, record = run["path"], run["k"], run["settings"]
        pace = record["seconds_per_update"]
        start = starts.get(k, {}).get("dev greedy", {}).get("bleu")
        curve = [(0.0, start)] if start is not None else []
        curve += [(v["num_updates"] * pace, v["bleu"]) for v in parse(path / "train.log")["valid"] if "bleu" in v]
        out.append({"arm": run["arm"], "k": k, "seed": run["seed"], "seconds_per_update": pace,
                    "updates": record["updates"], "budget": record["budget"],
                    "flags": record["flags"], "decodes": _decodes(path, data, tgt, tokenize),
                    "curve": curve})
    return out


def comparisons(folder: Path, data: Path, tgt: str, control: str, decode: str = "test.beam5",
                n_samples: int = 1000, tokenize: str = one_bleu.TOKENIZE) -> List[dict]:
    """Each arm against ``control`` on ``decode`` (hyp-DECODE.txt), per seed and pooled over the seeds both have
    (``bleu.paired``: BLEU and chrF over the same resamples)."""
    split = decode.split(".")[0]
    refs = read(data / "raw" / f"{split}.{tgt}")
    found: Dict[str, Dict[int, List[str]]] = {}
    for path in sorted(folder.iterdir()):
        match = _RUN.match(path.name)
        hyp = path / f"hyp-{decode}.txt"
        if match and hyp.is_file():
            hyps = read(hyp)
            if len(hyps) != len(refs):
                raise SystemExit(f"{hyp}: {len(hyps)} lines, but {data / 'raw' / f'{split}.{tgt}'} has {len(refs)}")
            found.setdefault(f"{match.group(1)}-k{match.group(2)}", {})[int(match.group(3))] = hyps
    if control not in found:  # (none decoded: check_control refuses a control without the decode)
        return []
    rows = []
    for arm in sorted(a for a in found if a != control):
        seeds = sorted(set(found[arm]) & set(found[control]))
        groups = [(str(s), [s]) for s in seeds] + ([("pooled", seeds)] if len(seeds) > 1 else [])
        for name, group in groups:
            pooled_refs = [r for _ in group for r in refs]
            systems = [(control, [h for s in group for h in found[control][s]]),
                       (arm, [h for s in group for h in found[arm][s]])]
            results = one_bleu.paired(systems, pooled_refs, n_samples, tokenize, chrf=True)
            ratio = one_bleu.corpus(systems[1][1], pooled_refs, tokenize).length_ratio
            rows.append({"arm": arm, "control": control, "seeds": name, "bleu": results["BLEU"][1].score,
                         "control_bleu": results["BLEU"][0].score,
                         "bleu_gain": results["BLEU"][1].score - results["BLEU"][0].score,
                         "bleu_p": results["BLEU"][1].p_value,
                         "chrf_gain": results["chrF"][1].score - results["chrF"][0].score,
                         "chrf_p": results["chrF"][1].p_value, "length_ratio": ratio})
    return rows


def _cell(record: dict, column: str) -> str:
    value = record["decodes"].get(column)
    return f"{value['bleu']:.2f}" if value else "-"


def _budgets(records: List[dict]) -> str:
    """The runs' budget as shown ("" for none; runs of several budgets are refused before, but said if given)."""
    return " / ".join(seconds(b) for b in sorted({r["budget"] for r in records if r["arm"] != "start"}))


def table(records: List[dict], rows: List[dict], decode: str = "test beam 5") -> str:
    """The runs' table and, below it, the comparisons'; above them, the runs' budget (each arm's updates at its
    probed seconds per update)."""
    budgets = _budgets(records)
    title = (f"Budget: {budgets} of training per run (its updates x its arm's "
             "probed seconds per update)\n\n" if budgets else "")
    head = ("| arm | K | seed | s / update | updates | best dev greedy in training | "
            + " | ".join(decode_name(split, tag) for split, tag in DECODES) + f" | {decode} length ratio |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(records, key=lambda r: (r["arm"] != "start", r["arm"], r["k"], r["seed"])):
        ratio = r["decodes"].get(decode, {}).get("length_ratio")
        if r["arm"] == "start":
            cells = ["the start (CE)", str(r["k"]), "-", "-", "-", "-"]
        else:
            best = max((b for _, b in r["curve"][1:]), default=None)
            cells = [r["arm"], str(r["k"]), str(r["seed"]), f"{r['seconds_per_update']:.2f}", str(r["updates"]),
                     f"{best:.2f}" if best is not None else "-"]
        cells += [_cell(r, decode_name(split, tag)) for split, tag in DECODES]
        cells.append(f"{ratio:.3f}" if ratio is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if rows:
        lines += ["", f"| arm | against | seeds | {decode} BLEU | its BLEU | gain (p) | chrF gain (p) | length ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['arm']} | {r['control']} | {r['seeds']} | {r['bleu']:.2f} | {r['control_bleu']:.2f} | "
                         f"{r['bleu_gain']:+.2f} ({r['bleu_p']:.4f}) | {r['chrf_gain']:+.2f} ({r['chrf_p']:.4f}) | "
                         f"{r['length_ratio']:.3f} |")
    return title + "\n".join(lines) + "\n"


def plot(records: List[dict], path, title: Optional[str] = None):
    from smallvocab_tools.analysis.plotting import finish, new_figure

    if title is None:
        budgets = _budgets(records)
        title = "Greedy dev BLEU against the budget's seconds" + (f" ({budgets})" if budgets else "")

    plt, fig, ax = new_figure((7, 4.5))
    arms = sorted({r["arm"] for r in records if r["arm"] != "start"})
    for i, arm in enumerate(arms):
        runs_of_arm = [r for r in records if r["arm"] == arm and r["curve"]]
        for j, r in enumerate(runs_of_arm):
            xs, ys = zip(*r["curve"])
            ax.plot([x / 60 for x in xs], ys, marker="o", markersize=3, color=f"C{i}",
                    linestyle="-" if r["k"] else "--", alpha=0.9 if j == 0 else 0.5,
                    label=f"{arm} ({'small' if r['k'] else 'full'})" if j == 0 else None)
    return finish(plt, fig, ax, path, "minutes of the budget (updates x the arm's probed seconds per update)",
                  "dev BLEU (greedy)", title)


def main(argv: Optional[List[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the recipe's OUT")
    parser.add_argument("--data", type=Path, required=True, help="the binarized corpus (its raw/ references)")
    parser.add_argument("--tgt", required=True, help="the target language")
    parser.add_argument("--control", default="ce-k500", help="the arm every other is compared with")
    parser.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    one_bleu.add_tokenize_option(parser)
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder")
    if args.bootstrap < 1:
        parser.error(f"--bootstrap {args.bootstrap}: give 1 or more resamples (1000 is usual)")
    for flag, example in (("markdown", "table.md"), ("png", "dev_bleu_seconds.png"), ("json", "runs.json")):
        problem = getattr(args, flag) and output_file_problem(getattr(args, flag), example)
        if problem:
            parser.error(f"--{flag} {getattr(args, flag)}: {problem}")
    try:
        found = recipe_runs(args.folder)
        budget = the_budget(found, args.folder)
        check_control(found, args.folder, args.control)
        decoded = [r["path"] for r in found] + sorted(args.folder.glob("start-k*"))
        missing = sorted({str(args.data / "raw" / f"{split}.{args.tgt}") for path in decoded for split, tag in DECODES
                          if (path / f"hyp-{split}{tag}.txt").is_file()
                          and not (args.data / "raw" / f"{split}.{args.tgt}").is_file()})
        if missing:
            raise ReportError(f"--data {args.data} --tgt {args.tgt}: the references {', '.join(missing)} are "
                              "missing; give the binarized corpus the runs were trained on (its raw/ folder)")
        records = runs(args.folder, args.data, args.tgt, args.tokenize)
        rows = comparisons(args.folder, args.data, args.tgt, args.control, n_samples=args.bootstrap,
                           tokenize=args.tokenize)
    except ReportError as err:
        parser.exit(2, f"error: {err}\n")
    text = table(records, rows)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    if args.png:
        plot(records, args.png)
    if args.json:
        args.json.write_text(json.dumps({"budget": budget, "runs": records, "comparisons": rows}, indent=1) + "\n")
    paces = [r["seconds_per_update"] for r in records if r["arm"] != "start"]
    if paces:
        print(f"{len(paces)} runs of {seconds(budget)} each; seconds per update {min(paces):.2f}-"
              f"{statistics.median(paces):.2f}-{max(paces):.2f} (min-median-max)")
