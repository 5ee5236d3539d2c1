"""Equal wall-clock budgets for fine-tuning arms that cost different seconds per update.

Arms that share a machine (or run at different times, on a machine whose speed drifts) cannot be given the same
budget by their own clocks.  So each arm's seconds per update are measured once, quietly and interleaved with the
other arms': ``probe`` runs every arm's own fairseq-train command for a few updates (``--max-update``, nothing
saved, no validation; fairseq-train's own main in a process that times each ``Trainer.train_step`` call,
``timed_train``: fairseq's logged ``train_wall`` is rounded to seconds), the arms in order, then in reverse order,
for ``rounds`` rounds, so that the machine's drift falls alike on all; an arm's seconds per update are the median
of its rounds' medians over the updates after the first ``skip`` (start-up).  ``updates_for`` then turns a budget
in seconds into each arm's number of updates, which it runs wherever and however slowly it is run after.
Arms added to a record later (``extend``) are probed beside the record's arms again: those keep their recorded
pace, so the runs made with it stay valid, and each new arm's pace is scaled by the machine's drift since the
record (the known arms' recorded over re-measured paces).

    python scripts/budget_probe.py --arm ce="--ce-weight 1" --arm rf4="--rl-samples 4 --rl-baseline loo" \
      --updates 8 --rounds 2 --json OUT/speed.json -- DATA --user-dir fairseq_smallvocab ... (the common flags)
    python scripts/budget_probe.py --json OUT/speed.json --budget 3600 --arm-updates rf4

A budget is more than 0 and at most ``MAX_BUDGET`` seconds, a recorded pace between ``MIN_PACE`` and ``MAX_PACE``
seconds per update, and the updates they give at most ``MAX_UPDATES``: anything else is a typo or a broken record,
refused with the file and field to fix.
"""

import argparse
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from smallvocab_tools.data.output_dir import output_file_problem

TIMED = re.compile(r"^probe_update_seconds ([\d.]+)$", re.M)

MAX_BUDGET = 8 * 7 * 24 * 3600.0  # eight weeks of seconds
MIN_PACE, MAX_PACE = 1e-6, 24 * 3600.0  # a microsecond to a day per update
MAX_UPDATES = 2**31 - 1  # what fairseq-train's --max-update holds


class RecordError(ValueError):
    """A probe's record that cannot be read or used: its file and field, and what to do."""


def budget_problem(value) -> Optional[str]:
    """Why ``value`` (seconds, or their text) is no budget; None when it is one."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return f"{value!r} is not a number of seconds"
    if not 0 < seconds <= MAX_BUDGET:
        return f"{value} is not a budget: give seconds above 0 and at most {MAX_BUDGET:,.0f} (eight weeks)"
    return None


def pace_problem(value) -> Optional[str]:
    """Why ``value`` (a record's seconds_per_update) is no pace; None when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{json.dumps(value)} is not a number of seconds"
    if not MIN_PACE <= value <= MAX_PACE:
        return (f"{value} is not a pace a probe measures (between {MIN_PACE:g} and {MAX_PACE:,.0f} seconds per "
                "update)")
    return None


def _budget_arg(text: str) -> float:
    problem = budget_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return float(text)


def read_record(path) -> dict:
    """A probe's record (``--json``), every arm's pace checked; a RecordError naming the file and the field."""
    path = Path(path)
    again = f"move {path} away and probe the arms again (budget_probe.py --arm NAME='FLAGS' ... --json {path} -- ...)"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordError(f"{path}: no such record; probe the arms first (budget_probe.py --arm NAME='FLAGS' ... "
                          f"--json {path} -- ...)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RecordError(f"{path}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not a whole JSON record ({err}; a probe cut short?): {again}") from None
    arms = record.get("arms") if isinstance(record, dict) else None
    if not isinstance(arms, dict) or not all(isinstance(arm, dict) for arm in arms.values()):
        raise RecordError(f"{path}: no 'arms' object of NAME: {{\"seconds_per_update\": ...}}: {again}")
    for name, arm in arms.items():
        problem = pace_problem(arm.get("seconds_per_update"))
        if problem:
            raise RecordError(f"{path}: arms.{name}.seconds_per_update: {problem}: {again}")
    return record


def timed_train(argv: List[str]):
    """fairseq-train ARGV in this process, printing each update's seconds (``Trainer.train_step``, the device
    synchronised) as a line ``probe_update_seconds S``; then the process ends, without the interpreter's teardown.

    Why: ``--max-update`` stops the run while fairseq's data-buffer thread (a daemon, ``--data-buffer-size``) may
    still be collating the next batches with torch, as it is a few updates in. Python's exit ends such a thread
    inside torch's GIL release, which aborts the process ("terminate called without an active exception", exit
    -6; pytorch/pytorch#38228) after a run that went well. This worker saves nothing, so the teardown has nothing
    to finish: its output is flushed and it exits 0. A run that fails still raises, and exits as it did."""
    import logging
    import os

    import torch
    from fairseq.trainer import Trainer
    from fairseq_cli import train

    step = Trainer.train_step

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        out = step(self, *args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        print(f"probe_update_seconds {time.perf_counter() - start:.6f}", flush=True)
        return out

    Trainer.train_step = timed
    sys.argv = ["fairseq-train", *argv]
    train.cli_main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def update_seconds(log: str, updates: int, skip: int) -> List[float]:
    """Each update's seconds after the first ``skip``, from ``timed_train``'s lines."""
    seconds = [float(s) for s in TIMED.findall(log)]
    if len(seconds) != updates:
        raise ValueError(f"the probe timed {len(seconds)} updates, not the {updates} asked for: does the arm's "
                         f"training split give that many (one epoch at least), or did it stop early?")
    return seconds[skip:]


def probe_command(common: Sequence[str], arm: Sequence[str], updates: int, save_dir: str) -> List[str]:
    """An arm's fairseq-train command (through ``timed_train``), cut to ``updates`` updates, saving nothing and
    validating nothing."""
    return [sys.executable, "-m", "smallvocab_tools.train.budget", "--timed-train", *common, *arm,
            "--max-update", str(updates), "--no-save", "--disable-validation", "--save-dir", save_dir]


def counts_problem(updates: int, skip: int) -> Optional[str]:
    """Why a probe of ``updates`` updates a run, the first ``skip`` untimed, times nothing sensible (None: it does)."""
    if skip < 0:
        return f"--skip must be 0 or more (the first updates of each probe run left untimed), got {skip}"
    if updates <= skip:
        return f"--updates must exceed --skip (updates timed after start-up), got {updates} and {skip}"
    return None


def probe(arms: Dict[str, List[str]], common: Sequence[str], updates: int, rounds: int, skip: int,
          runner=None, log=print) -> dict:
    """Each arm's median seconds per update, measured interleaved (see the module)."""
    problem = counts_problem(updates, skip)
    if problem:
        raise ValueError(problem)
    runner = runner or _run
    per_round: Dict[str, List[float]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as save_dir:
        for r in range(rounds):
            for name in (list(arms) if r % 2 == 0 else list(reversed(arms))):
                seconds = update_seconds(runner(probe_command(common, arms[name], updates, save_dir)), updates,
                                         skip)
                per_round[name].append(statistics.median(seconds))
                log(f"round {r + 1}: {name}: {per_round[name][-1]:.3f} s/update (median of {len(seconds)})")
    return {"arms": {name: {"seconds_per_update": statistics.median(values), "rounds": values,
                            "flags": shlex.join(arms[name])} for name, values in per_round.items()},
            "common": shlex.join(str(c) for c in common), "updates": updates, "skip": skip, "rounds": rounds,
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine()}


def extend(record: dict, arms: Dict[str, List[str]], common: Sequence[str], updates: int, rounds: int, skip: int,
           runner=None, log=print) -> dict:
    """``record`` with the arms of ``arms`` it lacks added: every arm of ``arms`` probed again, interleaved, the
    known ones keeping their recorded pace (the runs made with it stay valid) and each new one's measured pace
    scaled by the machine's drift since the record, the median over the known arms of recorded / measured now."""
    known = [name for name in arms if name in record["arms"]]
    if not known:
        raise ValueError("an arm to add needs one the record has, probed beside it: give the record's arms too")
    if [name for name in known if record["arms"][name]["flags"] != shlex.join(arms[name])]:
        raise ValueError(f"arms of the record were probed with other flags: "
                         f"{', '.join(n for n in known if record['arms'][n]['flags'] != shlex.join(arms[n]))}")
    now = probe(arms, common, updates, rounds, skip, runner=runner, log=log)
    drift = statistics.median(record["arms"][name]["seconds_per_update"] / now["arms"][name]["seconds_per_update"]
                              for name in known)
    out = json.loads(json.dumps(record))
    for name in arms:
        if name not in record["arms"]:
            added = now["arms"][name]
            out["arms"][name] = {**added, "seconds_per_update": added["seconds_per_update"] * drift, "drift": drift,
                                 "probed": now["date"], "measured_beside": known}
    return out


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.system()}"


def _run(command: List[str]) -> str:
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed (exit {out.returncode}):\n{out.stdout[-3000:]}")
    return out.stdout


def updates_for(record: dict, budget: float) -> Dict[str, int]:
    """Each arm's updates in ``budget`` seconds at its measured pace (at least 1); a ValueError for a budget or a
    pace out of range (see the module), or updates more than fairseq-train's --max-update holds."""
    problem = budget_problem(budget)
    if problem:
        raise ValueError(f"budget: {problem}")
    out = {}
    for name, arm in record["arms"].items():
        problem = pace_problem(arm["seconds_per_update"])
        if problem:
            raise ValueError(f"arms.{name}.seconds_per_update: {problem}")
        out[name] = max(1, math.floor(budget / arm["seconds_per_update"]))
        if out[name] > MAX_UPDATES:
            raise ValueError(f"{budget:g} s at arm {name}'s {arm['seconds_per_update']:g} s/update is {out[name]:,} "
                             f"updates, more than fairseq-train's --max-update holds ({MAX_UPDATES:,}): give a "
                             "smaller budget")
    return out


def _arm(text: str):
    name, sep, flags = text.partition("=")
    if not sep or not re.fullmatch(r"[\w.+-]+", name):
        raise argparse.ArgumentTypeError(f"--arm takes NAME='FLAGS' (NAME: letters, digits, _ . + -), got {text!r}")
    return name, shlex.split(flags)


def main(argv: Optional[List[str]] = None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--timed-train"]:  # the probe's worker (see probe_command)
        return timed_train(argv[1:])
    common = []
    if "--" in argv:
        at = argv.index("--")
        argv, common = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", type=_arm, action="append", default=[],
                        help="NAME='FLAGS': an arm, its flags added to the common ones (after --)")
    parser.add_argument("--updates", type=int, default=8, help="updates per probe run")
    parser.add_argument("--skip", type=int, default=2, help="first updates of each run left untimed")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (arms in order, then in reverse)")
    parser.add_argument("--json", required=True, help="the record: written by a probe, read by --arm-updates")
    parser.add_argument("--budget", type=_budget_arg, default=None,
                        help=f"seconds (above 0, at most {MAX_BUDGET:,.0f}): with --arm-updates")
    parser.add_argument("--arm-updates", default=None,
                        help="print this arm's updates in --budget seconds, from the record (no probe)")
    args = parser.parse_args(argv)
    if args.arm_updates is not None:
        if args.budget is None:
            parser.error("--arm-updates needs --budget SECONDS")
        try:
            record = read_record(args.json)
            if args.arm_updates not in record["arms"]:
                parser.error(f"{args.json} has no arm {args.arm_updates!r} (it has {', '.join(record['arms'])})")
            print(updates_for({"arms": {args.arm_updates: record["arms"][args.arm_updates]}},
                              args.budget)[args.arm_updates])
        except ValueError as err:
            sys.exit(f"error: {args.json}: --budget {args.budget:g}: {err}" if not isinstance(err, RecordError)
                     else f"error: {err}")
        return
    if not args.arm or not common:
        parser.error("a probe needs --arm NAME='FLAGS' (one or more) and the common fairseq-train flags after --")
    if len({name for name, _ in args.arm}) != len(args.arm):
        parser.error("two --arm share a name")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    problem = counts_problem(args.updates, args.skip)
    if problem:
        parser.error(problem)
    out = Path(args.json)
    problem = output_file_problem(out, "speed.json")
    if problem:
        parser.error(f"--json {out}: {problem}")
    try:
        if out.is_file():  # arms added to a record: probed beside its arms, whose paces stay as recorded
            record = extend(read_record(out), dict(args.arm), common, args.updates, args.rounds, args.skip)
        else:
            record = probe(dict(args.arm), common, args.updates, args.rounds, args.skip)
    except (ValueError, RuntimeError) as err:
        sys.exit(f"error: {err}")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out)
    for name, arm in record["arms"].items():
        print(f"{name}: {arm['seconds_per_update']:.3f} s/update")


if __name__ == "__main__":
    main()
