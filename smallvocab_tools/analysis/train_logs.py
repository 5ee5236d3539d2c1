"""fairseq-train logs (``--log-format simple``) read into records: each
validation (dev BLEU of ``--eval-bleu``, reward, ...) and training epoch
(reward, greedy_frac, entropy, ...), the checkpoint a fine-tuning run started
from and where it trained; the table of ``rl_logs.py table`` and the pairs and
plot of ``rl_logs.py start-epochs`` (the paper's Figure 3)."""

import re
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


def start_epoch_plot(points, path):
    """The pairs of ``start_epoch_points`` against the CE epoch (log scale): dev BLEU after REINFORCE, and the
    CE checkpoint's own dashed beside it; returns ``path``."""
    from smallvocab_tools.analysis.plotting import finish, new_figure

    plt, fig, ax = new_figure()
    for label, rows in points.items():
        line, = ax.plot([r[0] for r in rows], [r[2] for r in rows], marker="o", label=f"{label}: after REINFORCE")
        ax.plot([r[0] for r in rows], [r[1] for r in rows], linestyle="--", marker="x", color=line.get_color(),
                label=f"{label}: CE checkpoint")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r[0] for rows in points.values() for r in rows}))
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    return finish(plt, fig, ax, path, "CE epochs before REINFORCE", "dev BLEU",
                  "REINFORCE (lambda = 0) from early CE checkpoints")
