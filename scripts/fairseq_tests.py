#!/usr/bin/env python3
"""Run fairseq's own tests twice, without the plugin and with it loaded as ``--user-dir`` loads it, and say which
tests the plugin turns from passing to failing (exit status 1 where any) and which the other way round.

    python scripts/fairseq_tests.py --fairseq FAIRSEQ_CHECKOUT -- tests/test_train.py tests/test_iterators.py

FAIRSEQ_CHECKOUT holds fairseq's ``tests/`` folder: a checkout of facebookresearch/fairseq at the commit the
installed fairseq was cut from (docs/fairseq-tests.md says which, and why its PyPI source lacks them). The
tests run against the installed fairseq, from a copy of that ``tests/`` folder (in the checkout itself its
``fairseq/`` would be imported instead), each run in its own pytest process; ``--compat``
sets ``SMALLVOCAB_COMPAT`` for the run with the plugin (e.g. ``off``; without it, every patch, whatever the
environment says).  Loaded with ``-p fairseq_tests``, this
file is also the pytest plugin that loads fairseq-smallvocab (``SMALLVOCAB_USER_DIR``) before any test runs.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
USER_DIR = HERE.parent / "fairseq_smallvocab"


def pytest_configure(config):
    """As a pytest plugin: load fairseq-smallvocab the way fairseq's --user-dir does."""
    from fairseq import utils

    utils.import_user_module(argparse.Namespace(user_dir=os.environ["SMALLVOCAB_USER_DIR"]))


def outcomes(junit: Path) -> dict:
    """{test id: passed / failed / skipped} from a pytest junit XML file."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return found


def run_pytest(fairseq: Path, args, junit: Path, plugin_env=None) -> dict:
    """One pytest run of fairseq's tests in ``fairseq`` (with the plugin where ``plugin_env`` is given)."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}", *args]
    env = {key: value for key, value in os.environ.items() if key != "SMALLVOCAB_COMPAT"}
    if plugin_env is not None:
        command[3:3] = ["-p", "fairseq_tests"]
        env.update(plugin_env, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
                   SMALLVOCAB_USER_DIR=str(USER_DIR))
    subprocess.run(command, cwd=fairseq, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not junit.is_file():
        raise SystemExit(f"pytest wrote no results (pytest {' '.join(args)}): to see why, copy the checkout's "
                         "tests/ folder into an empty folder and run that command there (is pytest installed, do "
                         "the tests import?)")
    return outcomes(junit)


def summary(name: str, found: dict) -> str:
    counts = {kind: sum(1 for v in found.values() if v == kind) for kind in ("passed", "failed", "skipped")}
    return f"{name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fairseq", type=Path, required=True, help="a fairseq checkout holding its tests/ folder")
    parser.add_argument("--compat", default=None, help="SMALLVOCAB_COMPAT for the run with the plugin")
    parser.add_argument("pytest_args", nargs="*", help="after --: the tests to run, as pytest takes them")
    args = parser.parse_args(argv)
    if not (args.fairseq / "tests").is_dir():
        parser.error(f"--fairseq {args.fairseq} holds no tests/ folder: give a checkout of "
                     "facebookresearch/fairseq (docs/fairseq-tests.md says which commit)")
    plugin_env = {} if args.compat is None else {"SMALLVOCAB_COMPAT": args.compat}
    with tempfile.TemporaryDirectory() as tmp:
        # the tests alone, run from a folder of their own: run in the checkout, its fairseq/ would be the one
        # imported (its own directory comes first on sys.path), not the installed fairseq
        shutil.copytree(args.fairseq / "tests", Path(tmp) / "run" / "tests")
        plain = run_pytest(Path(tmp) / "run", args.pytest_args, Path(tmp) / "plain.xml")
        loaded = run_pytest(Path(tmp) / "run", args.pytest_args, Path(tmp) / "plugin.xml", plugin_env)
    # a test the run with the plugin lacks (its module no longer imports, say) counts as failed
    broken = sorted(t for t, v in plain.items() if v == "passed" and loaded.get(t, "failed") == "failed")
    fixed = sorted(t for t, v in plain.items() if v == "failed" and loaded.get(t) == "passed")
    print(summary("without the plugin", plain))
    print(summary("with the plugin" + (f" (SMALLVOCAB_COMPAT={args.compat})" if args.compat is not None else ""),
                  loaded))
    print(f"pass without the plugin, fail with it: {len(broken)}")
    print("".join(f"  {t}\n" for t in broken), end="")
    print(f"fail without the plugin, pass with it: {len(fixed)}")
    print("".join(f"  {t}\n" for t in fixed), end="")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
