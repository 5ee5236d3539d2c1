"""The example scripts and scripts/gpu_checks.sh, as the documentation starts them: every example script is
started by a documented command, each dry-runs with stand-ins for fairseq's commands, and the GPU script's parts
parse here (documented.py reads the commands; tests/documented_commands.json lists them)."""

import re
import shlex
import sys
from pathlib import Path

import pytest
from documented import (
    COMMANDS,
    GPU_CHECKS,
    TABLE,
    _defines,
    _gpu_parts,
    check_argv,
    expand_steps,
    split_command,
)
from helpers import REPO, load_script, run


@pytest.mark.slow
def test_the_gpu_script_s_commands_parse_and_it_carries_make_setup_s_versions(monkeypatch):
    """scripts/gpu_checks.sh runs where a mistake costs scarce device time: each part's command (DRY=1 prints them)
    parses here (benchmark.py's --ab and --set included), the tests it names exist, and the wheels it carries are
    the versions make setup installs."""
    import logging
    import os
    import subprocess
    from importlib import metadata

    from packaging.requirements import Requirement

    def dry(*args):
        out = subprocess.run(["bash", str(GPU_CHECKS), *args], env={**os.environ, "DRY": "1"},
                             capture_output=True, text=True, check=True)
        return [shlex.split(line) for line in out.stdout.splitlines()]

    commands = dry("run")
    assert len(commands) == len(_gpu_parts()) >= 6
    assert dry("run", "lstm", "tests") == [commands[_gpu_parts().index("lstm")], commands[0]]
    monkeypatch.chdir(REPO)
    logging.disable(logging.INFO)
    try:
        for argv in commands:
            if argv[:3] == ["python3", "-m", "pytest"]:
                targets = [arg for arg in argv[3:] if arg.startswith("tests/")]
                assert targets and all(_defines(target) for target in targets), argv
            else:
                assert argv[:2] == ["python3", "scripts/benchmark.py"] and "--device" in argv, argv
                assert argv[argv.index("--device") + 1] == "cuda", argv
                check_argv(argv)
    finally:
        logging.disable(logging.NOTSET)
    # the versions make setup installs on Python 3.12, or, where it pins none, what the carried packages require
    download, build = dry("wheels")
    pins = dict(arg.partition("==")[::2] for arg in download + build if "==" in arg)
    setup = load_script("setup_venv")
    wanted = dict(req.partition("==")[::2] for req in [setup.fairseq_requirement((3, 12)),
                                                          *setup.FAIRSEQ_RUNTIME_DEPS] if "==" in req)
    assert set(wanted) <= set(pins), (wanted, pins)
    required = [Requirement(req) for name in pins for req in metadata.requires(name) or [] if "extra ==" not in req]
    for name, version in pins.items():
        assert version == wanted.get(name, version), f"{name}=={version}: make setup installs {wanted[name]}"
        assert all(req.name != name or version in req.specifier for req in required), f"{name}=={version}"
    with pytest.raises(subprocess.CalledProcessError):
        dry("run", "no-such-part")


# -- the example scripts ---------------------------------------------------------------------------------------------


def _script_of(command):
    """(environment, the example script a command starts, or None): scripts/gpu_checks.sh is a tool, not an example."""
    env, argv, _ = split_command(command)
    return env, (argv[1] if argv[0] == "bash" and argv[1].startswith("examples/") else None)


def test_every_example_script_is_started_by_a_documented_command():
    """Each examples/**/*.sh is started by a documented command (dry-run below) or by a script that is; each
    setting a documented command gives is one its script reads."""
    started = {}
    for command, doc in COMMANDS.items():
        env, path = _script_of(command)
        if path:
            assert doc["kind"] == "script", command
            assert "after" not in doc or COMMANDS.get(doc["after"], {}).get("kind") == "script", command
            started.setdefault(path, []).append(command)
            for name in env:
                assert re.search(rf"\${{?{name}\b", (REPO / path).read_text()), f"{command}: {path} ignores {name}"
    called_by = TABLE["called_by"]
    assert {str(p.relative_to(REPO)) for p in REPO.glob("examples/**/*.sh")} == set(started) | set(called_by)
    for path, callers in called_by.items():
        assert all(caller in started and Path(path).name in (REPO / caller).read_text() for caller in callers), path


# A stand-in for fairseq's commands, sacrebleu and python (bash: it starts in milliseconds, and the scripts start
# many): records its command line and OMP_NUM_THREADS, prints what the example scripts read of its output.
STUB = """#!/usr/bin/env bash
name=$(basename "$0")
if [ "$name" = python ] && [ "${1-}" = -c ]; then exec "$REAL_PYTHON" "$@"; fi  # the scripts' own arithmetic
# one record, one write: scripts that run steps side by side (PARALLEL=1) append to the log at the same time
record=$(printf '%s\x1f' "$name" "$@"; printf '%s\x1e' "${OMP_NUM_THREADS-}")
printf '%s' "$record" >> "$STUB_LOG"
case "$name" in
  fairseq-train) echo "done training" ;;
  fairseq-generate) printf 'H-0\t-0.5\tword\nGenerate test with beam=1: BLEU4 = 1.00\n' ;;
  fairseq-interactive) printf 'H-0\t-0.5\tword\nD-0\t-0.5\tword\n' ;;
  sacrebleu) echo 1.0 ;;
esac
if [ "${1-}" = scripts/sweep_lenpen.py ]; then  # the record it writes (--out), as far as read
  prev=
  for arg in "$@"; do [ "$prev" = --out ] && echo '{"best_lenpen": 1.2}' > "$arg"; prev=$arg; done
fi
if [ "${1-}" = scripts/updates_per_epoch.py ]; then echo 113; fi  # what it prints: the updates of an epoch
if [ "${1-}" = scripts/bleu.py ]; then echo "BLEU 1.00 (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp)"; fi
if [ "${1-}" = scripts/does_it_pay.py ]; then  # the verdict it writes (--json), as far as read
  prev=
  for arg in "$@"; do [ "$prev" = --json ] && echo '{"verdict": "pays", "step_ratio": 2.0}' > "$arg"; prev=$arg; done
fi
if [ "${1-}" = scripts/time_budget.py ]; then  # the plan it writes (--out) and a limit's hours, as far as read
  prev=
  for arg in "$@"; do [ "$prev" = --out ] && echo '{"updates": {"ce": 1000}}' > "$arg"; prev=$arg; done
  if [ "${2-}" = limit ]; then echo 0.5; fi
fi
if [ "${1-}" = scripts/budget_probe.py ]; then  # the record a probe writes (--json), the updates it reads back
  prev=; json=; arms=()
  for arg in "$@"; do case $prev in --json) json=$arg ;; --arm) arms+=("${arg%%=*}") ;; esac; prev=$arg; done
  case " $* " in
    *" --arm-updates "*) echo 10 ;;
    *) "$REAL_PYTHON" -c 'import json, sys; json.dump({"arms": {a: {"seconds_per_update": 1.0} for a in sys.argv[2:]}},
open(sys.argv[1], "w"))' "$json" "${arms[@]}" ;;
  esac
fi
if [ "${1-}" = scripts/prepare_data.py ]; then  # the checked text it writes beside the data (DEST/raw), as far as read
  prev=
  for arg in "$@"; do case $prev in --dest) dest=$arg ;; --src) src=$arg ;; --tgt) tgt=$arg ;; esac; prev=$arg; done
  mkdir -p "$dest/raw" && echo "a sentence" > "$dest/raw/test.$src"
  echo "a sentence" > "$dest/raw/test.$tgt" && echo "a sentence" > "$dest/raw/valid.$tgt"
  seq 1000 | sed 's/^/w/; s/$/ 1/' > "$dest/dict.$tgt.txt"  # the target dictionary (|V| read by the quick start)
fi
if [ "${1-}" = scripts/prepare_multi30k.py ]; then  # the stats.json it writes (prep.py), as far as read
  out=data-bin; prev=
  for arg in "$@"; do [ "$prev" = --out-dir ] && out=$arg; prev=$arg; done
  mkdir -p "$out/multi30k.en-de"
  echo '{"splits": {"train": {"en": {"sentences": 29000}}}}' > "$out/multi30k.en-de/stats.json"
fi
"""


def _reaches(name, value, calls, work, env):
    """Whether the setting ``name=value`` of a documented command reached the commands its script started."""
    trains = [call["argv"] for call in calls if call["argv"][0] == "fairseq-train"]
    if name == "THREADS":
        return all(call["threads"] == value for call in calls)
    if name == "DEVICE":
        return all(("--cpu" in argv) == (value == "cpu") for argv in trains)
    if name == "KEEP_EPOCHS":
        return all(("--no-epoch-checkpoints" in argv) != (value == "1") for argv in trains)
    if name == "CE_FROM":  # OUT's CE runs are links to CE_FROM's
        links = list((work / env["OUT"]).glob("ce-k*-s*"))
        return bool(links) and all(p.is_symlink() and p.resolve().parent == (work / value).resolve() for p in links)
    if name == "CE_SEED":  # every other seed's CE run is a link to this seed's
        links = [p for p in (work / env["OUT"]).glob("ce-k*-s*") if p.is_dir() and not p.name.endswith(f"-s{value}")]
        return bool(links) and all(p.is_symlink() and p.resolve().name.endswith(f"-s{value}") for p in links)
    if name == "SEEDS":  # each seed reaches a fairseq-train
        return all(any(argv[i:i + 2] == ["--seed", seed] for argv in trains for i in range(len(argv)))
                   for seed in value.split())
    if name == "ARMS":  # each arm trains in its own folder (ARM-sSEED)
        saves = [argv[argv.index("--save-dir") + 1].rsplit("/", 1)[-1] for argv in trains if "--save-dir" in argv]
        return all(any(save.startswith(f"{arm}-s") for save in saves) for arm in value.split())
    if name == "CONTROLS" and not value:  # none: no control run
        return not any("/ctl-" in arg for call in calls for arg in call["argv"])
    words = value.split()  # a value built by the shell is not compared; several words reach a command in a row
    return "$" in value or any(value in argv or any(value in arg.split() for arg in argv) or bool(words) and any(
        argv[i:i + len(words)] == words for i in range(len(argv))) for argv in (call["argv"] for call in calls))


@pytest.mark.slow
def test_example_scripts_dry_run(tmp_path):
    """Every documented ``bash examples/...sh`` command, exactly as documented, in a fresh folder whose fairseq
    commands, sacrebleu and python scripts are stand-ins that record their command lines: the script runs to its
    end, starts the steps it should, passes on the settings given, and every command it would run parses."""
    import logging
    import os

    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "stub").write_text(STUB)
    (stubs / "stub").chmod(0o755)
    for name in ("fairseq-train", "fairseq-generate", "fairseq-interactive", "sacrebleu", "python"):
        os.symlink(stubs / "stub", stubs / name)
    failures = []
    logging.disable(logging.INFO)
    try:
        for i, (command, doc) in enumerate((c, d) for c, d in COMMANDS.items() if d["kind"] == "script"):
            env, path = _script_of(command)
            work = tmp_path / f"w{i}"
            work.mkdir()
            for name in ("examples", "scripts", "fairseq_smallvocab"):  # the scripts run from the project root
                (work / name).symlink_to(REPO / name)
            log = work / "calls.jsonl"
            for step in [doc["after"], command] if "after" in doc else [command]:  # only the command's calls are kept
                log.unlink(missing_ok=True)
                result = run(["bash", "-c", f'export PATH="{stubs}:$PATH"; {step}'], cwd=work, check=False,
                             env={"STUB_LOG": str(log), "REAL_PYTHON": sys.executable, "E": str(work / "e")})
                if result.returncode != 0:
                    break
            if result.returncode != 0:
                failures.append(f"{step}: exit {result.returncode}\n{result.stderr[-2000:]}")
                continue
            records = log.read_text().split("\x1e")[:-1] if log.exists() else []
            calls = [{"argv": fields[:-1], "threads": fields[-1]} for fields in (r.split("\x1f") for r in records)]
            steps = [call["argv"][1] if call["argv"][0] == "python" else call["argv"][0] for call in calls]
            want, unordered = expand_steps(doc.get("steps") or TABLE["script_steps"][path]), TABLE["unordered"]
            if (sorted(steps) if path in unordered else steps) != (sorted(want) if path in unordered else want):
                failures.append(f"{command}: started {steps}, not {want}")
            failures += [f"{command}: the setting {name}={value} reaches no command: {calls}"
                         for name, value in env.items() if not _reaches(name, value, calls, work, env)]
            if path == "examples/vocab_predictor/run_multi30k.sh":  # half an epoch of 29,000 sentences, saved there
                train = next(call["argv"] for call in calls if call["argv"][0] == "fairseq-train")
                assert [train[train.index(flag) + 1] for flag in ("--validate-interval-updates",
                                                                  "--save-interval-updates")] == ["113", "113"]
            for call in calls:
                try:
                    check_argv(call["argv"], cwd=work)
                except AssertionError as error:
                    failures.append(f"{command}: {' '.join(call['argv'])}\n    {error}")
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, "\n".join(failures)


# -- the commands run here -------------------------------------------------------------------------------------------
