"""The records of the Transformer-RL recipe's runs (the folder of
examples/translation/run_transformer_rl_multi30k.sh: runs named
STAGE-kK-sSEED): sacrebleu's BLEU of each run's decodes against the raw
references, the best dev BLEU of its training validations and the update it
came at, minutes per epoch and to that best, where it trained and its curve
of dev BLEU; the records ``rl_logs.py recipe --json`` writes and ``--runs``
reads back, and a run's ``recipe.settings``."""

import json
import re
import statistics
from pathlib import Path

from smallvocab_tools.analysis import bleu as one_bleu
from smallvocab_tools.analysis.train_logs import parse

RECIPE_STAGES = {"ce": "CE (best checkpoint)", "rl": "REINFORCE", "ctl-ce": "control: CE continued",
                 "ctl-constant": "control: constant reward"}
_RUN = re.compile(r"^(ce|rl|ctl-ce|ctl-constant)-k(\d+)-s(\d+)$")
DECODES = [("valid", ""), ("valid", ".beam5"), ("test", ""), ("test", ".beam5")]


def decode_name(split: str, tag: str) -> str:
    """A decode's column name: "dev greedy", "test beam 5", ..."""
    return f"{'dev' if split == 'valid' else split} {'beam 5' if tag else 'greedy'}"


def corpus_scores(hyp: Path, ref: Path, tokenize: str = one_bleu.TOKENIZE):
    """The one BLEU (``bleu.corpus``) of a hypothesis file against the raw references, and its length ratio
    (hypothesis words / reference words, as BLEU counts them: below 1, the brevity penalty takes its share)."""
    hyps, refs = hyp.read_text().splitlines(), ref.read_text().splitlines()
    if len(hyps) != len(refs):
        raise SystemExit(f"{hyp}: {len(hyps)} lines, but {ref} has {len(refs)}")
    try:
        score = one_bleu.corpus(hyps, refs, tokenize, what=str(hyp))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return score.bleu, score.length_ratio


def corpus_bleu(hyp: Path, ref: Path, tokenize: str = one_bleu.TOKENIZE) -> float:
    return corpus_scores(hyp, ref, tokenize)[0]


def run_folders(folder: Path):
    """{(stage, K, seed): its folder} for every run folder STAGE-kK-sSEED of a recipe's OUT with a train.log."""
    runs = {}
    for path in sorted(folder.iterdir()):
        match = _RUN.match(path.name)
        if match and (path / "train.log").is_file():
            runs[match.group(1), int(match.group(2)), int(match.group(3))] = path
    return runs


def recipe_runs(folder: Path, data: Path, tgt: str, tokenize: str = one_bleu.TOKENIZE):
    """One record per run folder STAGE-kK-sSEED: its decodes' BLEU (``tokenize``'s), best dev BLEU, minutes per
    epoch and to the best, and its validations (updates, dev BLEU)."""
    runs = []
    for (stage, k, seed), path in run_folders(folder).items():
        log = parse(path / "train.log")
        valid = [v for v in log["valid"] if "bleu" in v]
        best = max(valid, key=lambda v: v["bleu"]) if valid else None
        times = [t["elapsed"] for t in log["train"] if "elapsed" in t]
        epochs = [b - a for a, b in zip([0.0] + times, times)]
        bleu, ratio = {}, {}
        for split, tag in DECODES:
            hyp = path / f"hyp-{split}{tag}.txt"
            if hyp.is_file():
                bleu[split + tag], ratio[split + tag] = corpus_scores(hyp, data / "raw" / f"{split}.{tgt}",
                                                                           tokenize)
        runs.append({"stage": stage, "k": k, "seed": seed,
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


def run_settings(path: Path) -> dict:
    """A recipe run's recipe.settings ("epochs=E KEY=VALUE ... ARCH_ARGS=the model's flags") as a dict."""
    text = (path / "recipe.settings").read_text().strip() if (path / "recipe.settings").is_file() else ""
    head, _, arch = text.partition(" ARCH_ARGS=")
    settings = dict(field.split("=", 1) for field in head.split() if "=" in field)
    if arch:
        settings["ARCH_ARGS"] = arch
    return settings
