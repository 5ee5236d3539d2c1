"""A run's time budget: how long each step of the quick start may take, so that the whole run, evaluation, export
and verdict included, ends within BUDGET.

``plan`` is made once the paces are measured (after scripts/does_it_pay.py, which times this model's CE and
REINFORCE steps and its beam decoding here), and ``limit`` again at each training's start, from the clock:

- First set aside what follows the trainings, which no update count shortens (``reserve``): for each model
  evaluated, a length-penalty sweep on dev and a test decoding (beam, at does_it_pay's milliseconds a sentence,
  times ``DECODE_MARGIN``: a trained model's hypotheses vary in length, random weights' do not), each fairseq
  command's start (``START_SECONDS``), the export and its check, the verdict.
- The rest is shared among the trainings still to run in proportion to ``WEIGHTS`` (the predictor 1, CE 6,
  REINFORCE 3; under COMPARE=full each arm of CE and of REINFORCE gets the same share), so that a step that ends
  early (its patience, its cap of updates) leaves its time to the steps after it, and one that the machine slowed
  takes it from them.
- Each training is stopped by fairseq-train's own ``--stop-time-hours``, which then validates and saves as at any
  end.  fairseq counts the training time its starting checkpoint had: a resumed run's, and also a fine-tune's
  parent's (``Trainer.load_checkpoint`` loads ``previous_training_time`` whatever --finetune-from-model resets),
  so the limit adds that time, read from the checkpoint.  The command's start and the validation after the limit
  are left out of the step's share.

The plan says each step's minutes, the updates they make at the measured paces (validation included), and what
the step's cap of updates (CE_UPDATES, RL_UPDATES) would need: the time to convergence the budget does not give.

    python scripts/time_budget.py plan --budget 60m --spent 95 --steps vp ce rl --does-it-pay OUT/does-it-pay.json \
      --softmax small --dev-sentences 1014 --test-sentences 1000 --models 2 --export --caps vp=20 ce=4000 rl=500 \
      --out OUT/budget.json
    python scripts/time_budget.py limit --plan OUT/budget.json --step rl --spent 1900 --start OUT/ce/checkpoint_best.pt
"""

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

WEIGHTS = {"vp": 1.0, "ce": 6.0, "rl": 3.0}  # of the time left after the reserve; a COMPARE=full arm: its half
START_SECONDS = 15.0  # a fairseq command's start on 2 cores: imports, data, model, checkpoint
# fairseq-generate's sentence against does_it_pay's (a random model's hypotheses exactly the mean length, no
# output written): 28 ms against 10 ms in the quick start on 8,000 Multi30k pairs, 2 cores (its 4 commands' 173 s
# less their starts)
DECODE_MARGIN = 3.0
DECODE_MS_UNMEASURED = 40.0  # beam 5 on 2 cores for the quick start's model, where does_it_pay did not run
# fairseq-interactive's three sentences, CTranslate2's conversion, the check of its vocabulary map and the verdict:
# 151 s there
EXPORT_SECONDS = 120.0
VERDICT_SECONDS = 30.0
MIN_STEP_SECONDS = 60.0  # a training gets at least this, or the budget is refused at the plan
VALIDATE_EVERY = {"vp": None, "ce": None, "rl": 50}  # updates between validations (None: once an epoch)
UNIT = {"s": 1, "m": 60, "h": 3600}
MAX_BUDGET = 7 * 24 * 3600
NAMES = {"vp": "the predictor", "ce": "CE", "ce-full": "CE, full softmax", "rl": "REINFORCE",
         "rl-full": "REINFORCE, full softmax"}


class BudgetError(ValueError):
    """A budget that cannot be kept or read: what is wrong, and the fix."""


def parse_budget(text: str) -> float:
    """Seconds of a budget written as a number and its unit: 90m, 1.5h, 3600s."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh])\s*", text or "")
    if match is None:
        raise BudgetError(f"BUDGET={text}: a number and its unit, s, m or h (e.g. 60m, 1.5h, 5400s)")
    seconds = float(match.group(1)) * UNIT[match.group(2)]
    if not 0 < seconds <= MAX_BUDGET:
        raise BudgetError(f"BUDGET={text}: give more than nothing and at most a week (e.g. 60m)")
    return seconds


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _kind(step: str) -> str:
    return step.split("-")[0]


def paces(does_it_pay: Optional[dict], softmax: str) -> dict:
    """The measured paces of ``softmax`` ("small" or "full") from does_it_pay's --json (None each where it was not
    measured): CE's and REINFORCE's seconds an update, beam decoding's seconds a sentence, CE's updates an
    epoch."""
    if not does_it_pay:
        return {"ce": None, "rl": None, "decode": None, "epoch_updates": None}
    steps = does_it_pay.get("sec_per_step") or {}
    decode = (does_it_pay.get("ms_per_sentence") or {}).get(softmax)
    return {"ce": (steps.get("ce") or {}).get(softmax), "rl": (steps.get("reinforce") or {}).get(softmax),
            "decode": None if decode is None else decode / 1000, "epoch_updates": does_it_pay.get("epoch_updates")}


def _decoded(decode_seconds: Optional[float]) -> float:
    """Seconds a sentence in a fairseq command's decoding, from does_it_pay's (``DECODE_MS_UNMEASURED`` where
    unmeasured)."""
    return (decode_seconds if decode_seconds else DECODE_MS_UNMEASURED / 1000) * DECODE_MARGIN


def reserve(decode_seconds: Optional[float], dev: int, test: int, models: int, export: bool) -> float:
    """Seconds for what follows the trainings: per model a dev sweep and a test decoding, each a fairseq command
    (``decode_seconds`` a sentence, ``_decoded``), the export, the verdict."""
    per_model = 2 * START_SECONDS + (dev + test) * _decoded(decode_seconds)
    return models * per_model + (EXPORT_SECONDS if export else 0.0) + VERDICT_SECONDS + START_SECONDS


def validation_seconds(plan: dict) -> float:
    """One validation: the dev set decoded greedily (at most beam's pace) and a checkpoint saved."""
    return plan["dev_sentences"] * _decoded(plan["paces"]["decode"]) + 2.0


def share(plan: dict, step: str, spent: float) -> float:
    """Seconds ``step`` may take when it starts ``spent`` seconds into the run: the time left after the reserve,
    in proportion to its weight among it and the steps after it."""
    steps = plan["steps"]
    if step not in steps:
        raise BudgetError(f"{step}: not a step of the plan ({', '.join(steps)})")
    left = plan["budget"] - spent - plan["reserve"]
    ahead = steps[steps.index(step):]
    return left * plan["weights"][step] / sum(plan["weights"][s] for s in ahead)


def _paces_of(plan: dict, step: str) -> dict:
    """The paces ``step`` trains at: the full softmax's for COMPARE=full's arms, else the plan's softmax's."""
    return plan["full_paces"] if step.endswith("-full") else plan["paces"]


def updates_in(plan: dict, step: str, seconds: float) -> Optional[int]:
    """Updates ``seconds`` buy ``step`` at its measured pace, its validations included; None without a pace."""
    measured = _paces_of(plan, step)
    pace = measured.get(_kind(step))
    if not pace:
        return None
    every = VALIDATE_EVERY.get(_kind(step)) or measured.get("epoch_updates")
    per_update = pace + (validation_seconds(plan) / every if every else 0.0)
    return max(0, int((seconds - START_SECONDS) / per_update))


def make(budget: float, spent: float, steps: List[str], does_it_pay: Optional[dict], softmax: str, dev: int,
         test: int, models: int, export: bool, caps: Dict[str, int], given: Optional[str] = None) -> dict:
    """The plan: the budget, its reserve, each step's weight and first share, the paces (``paces``) and each
    step's cap; refused (``BudgetError``) where the budget cannot hold the reserve and a minute a training
    (``given``: the budget as the user wrote it)."""
    unknown = [s for s in steps if _kind(s) not in WEIGHTS]
    if unknown:
        raise BudgetError(f"{', '.join(unknown)}: not a training ({', '.join(WEIGHTS)}, and -full arms)")
    plan: Dict[str, Any] = {
        "budget": budget, "given": given or _minutes(budget), "spent": spent, "steps": list(steps),
        "softmax": softmax,
        "weights": {s: WEIGHTS[_kind(s)] / (2 if f"{_kind(s)}-full" in steps and _kind(s) != "vp" else 1)
                    for s in steps},
        "paces": paces(does_it_pay, softmax), "full_paces": paces(does_it_pay, "full"), "dev_sentences": dev,
        "caps": dict(caps)}
    decode = [plan["paces"]["decode"]] + [plan["full_paces"]["decode"] for s in steps if s.endswith("-full")]
    plan["reserve"] = round(reserve(None if None in decode else max(decode), dev, test, models, export), 1)
    needed = spent + plan["reserve"] + MIN_STEP_SECONDS * len(steps)
    if needed > budget:
        raise BudgetError(f"BUDGET={plan['given']}: {_minutes(spent)} are spent and the evaluation, export and "
                          f"verdict need about {_minutes(plan['reserve'])}, which leaves too little for "
                          f"{len(steps)} training(s) (a minute each at least): give at least "
                          f"{math.ceil(needed / 60)}m, or leave BUDGET unset and size the steps yourself "
                          "(VP_EPOCHS, CE_UPDATES, RL_UPDATES)")
    plan["shares"], plan["updates"] = {}, {}
    at = spent
    for step in steps:  # the first shares, as if each step took all of its own
        plan["shares"][step] = round(share(plan, step, at), 1)
        plan["updates"][step] = None if _kind(step) == "vp" else updates_in(plan, step, plan["shares"][step])
        at += plan["shares"][step]
    return plan


def describe(plan: dict) -> str:
    """The plan in lines: the budget, the reserve, each training's minutes, updates and what its cap needs."""
    paces_ = plan["paces"]
    measured = "does_it_pay.py's paces" if paces_["decode"] else "no pace measured (step 2 did not run)"
    lines = [f"the plan for BUDGET={plan['given']} ({_minutes(plan['spent'])} spent; {measured}, "
             f"{plan['softmax']} softmax):",
             f"- set aside for the evaluation, export and verdict: about {_minutes(plan['reserve'])}"]
    for step in plan["steps"]:
        seconds = plan["shares"][step]
        line = f"- {NAMES[step]}: {_minutes(seconds)}"
        cap = plan["caps"].get(_kind(step))
        updates = plan["updates"][step]
        if _kind(step) == "vp":
            line = f"- {NAMES[step]}: at most {_minutes(seconds)}" + (f" (or its {cap} epochs, if sooner)"
                                                                      if cap else "")
        elif updates is not None:
            pace = _paces_of(plan, step)[_kind(step)]
            line += f": about {updates:,} updates at {pace:.2f} s an update (validation included)"
            if cap:
                need = seconds * cap / max(updates, 1)
                line += (f", within its cap of {cap:,}" if updates >= cap else
                         f"; its cap, {cap:,} updates, would need about {_minutes(need)}")
        elif cap:
            line += f" (at most {cap:,} updates; its pace line says how many the time buys)"
        lines.append(line)
    lines.append("Each training stops at its time (fairseq-train --stop-time-hours: it validates and saves as at any "
                 "end); time a step leaves goes to the next.")
    return "\n".join(lines)


def checkpoint_seconds(path: Optional[Path]) -> float:
    """The training time fairseq counts from ``path`` (its extra_state's previous_training_time); 0 without
    one."""
    if path is None or not Path(path).is_file():
        return 0.0
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=False)
    return float((state.get("extra_state") or {}).get("previous_training_time") or 0.0)


def limit(plan: dict, step: str, spent: float, start: Optional[Path] = None) -> dict:
    """The step's --stop-time-hours: its share now (at least ``MIN_STEP_SECONDS``), less the command's start and
    a validation, plus the training time of the checkpoint it starts from."""
    seconds = share(plan, step, spent)
    over = seconds < MIN_STEP_SECONDS
    seconds = max(seconds, MIN_STEP_SECONDS)
    counted = checkpoint_seconds(start)
    own = max(seconds - START_SECONDS - validation_seconds(plan), MIN_STEP_SECONDS / 2)
    return {"step": step, "seconds": round(seconds, 1), "over": over, "counted": round(counted, 1),
            "hours": round((own + counted) / 3600, 5)}


def _caps(items: List[str]) -> Dict[str, int]:
    caps = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in WEIGHTS or not value.isdigit():
            raise BudgetError(f"--caps {item}: NAME=N, NAME one of {', '.join(WEIGHTS)}")
        caps[name] = int(value)
    return caps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="say the budget's seconds, or why it is not one")
    check.add_argument("budget")
    made = sub.add_parser("plan", help="make the plan, print it, write it (--out)")
    made.add_argument("--budget", required=True)
    made.add_argument("--spent", type=float, required=True, help="seconds the run has taken so far")
    made.add_argument("--steps", nargs="+", required=True, help="the trainings to run, in order (vp, ce, rl, ...)")
    made.add_argument("--does-it-pay", type=Path, help="scripts/does_it_pay.py's --json: the paces")
    made.add_argument("--softmax", choices=["small", "full"], default="small")
    made.add_argument("--dev-sentences", type=int, required=True)
    made.add_argument("--test-sentences", type=int, required=True)
    made.add_argument("--models", type=int, required=True, help="models evaluated after the trainings")
    made.add_argument("--export", action="store_true", help="a CTranslate2 export and its check follow")
    made.add_argument("--caps", nargs="*", default=[], metavar="NAME=N",
                      help="each training's own cap: vp=EPOCHS, ce=UPDATES, rl=UPDATES")
    made.add_argument("--out", type=Path, required=True)
    step = sub.add_parser("limit", help="print a training's --stop-time-hours now")
    step.add_argument("--plan", type=Path, required=True)
    step.add_argument("--step", required=True)
    step.add_argument("--spent", type=float, required=True)
    step.add_argument("--start", type=Path, help="the checkpoint fairseq-train loads (a resumed run's last, or "
                                                 "--finetune-from-model's), whose training time it counts")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            print(parse_budget(args.budget))
        elif args.command == "plan":
            said = json.loads(args.does_it_pay.read_text()) if args.does_it_pay and args.does_it_pay.is_file() \
                else None
            plan = make(parse_budget(args.budget), args.spent, args.steps, said, args.softmax, args.dev_sentences,
                        args.test_sentences, args.models, args.export, _caps(args.caps), args.budget)
            args.out.write_text(json.dumps(plan, indent=1) + "\n")
            print(describe(plan))
        else:
            plan = json.loads(args.plan.read_text())
            said = limit(plan, args.step, args.spent, args.start)
            name = NAMES.get(args.step, args.step)
            if said["over"]:
                print(f"warning: the budget is spent: {name} gets {_minutes(said['seconds'])} all the same, and the "
                      "run ends after BUDGET", file=sys.stderr)
            counted = f", which counts the {_minutes(said['counted'])} its starting checkpoint trained" \
                if said["counted"] else ""
            print(f"budget: {name} may take {_minutes(said['seconds'])} (fairseq-train --stop-time-hours "
                  f"{said['hours']}{counted})", file=sys.stderr)
            print(said["hours"])
    except BudgetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
