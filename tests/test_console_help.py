"""The console scripts (setup.py's entry points, smallvocab-*) answer --help and a bad flag from argparse alone:
neither torch nor fairseq is imported before the command line is parsed, so that they answer at once rather than
after the seconds those imports take.  Each is checked in a fresh interpreter (what it has imported is the
assertion, not how long it took)."""

import json
import re
import subprocess
import sys

import pytest
from helpers import REPO

HEAVY = ("torch", "fairseq", "fairseq_smallvocab")


def console_scripts():
    """{script name: module} of setup.py's console_scripts."""
    text = (REPO / "setup.py").read_text()
    return dict(re.findall(r'"(smallvocab-[\w-]+) = ([\w.]+):main"', text))


# --help, then (in the same interpreter, which is still without torch if --help was) an unknown flag
_PROBE = """
import contextlib, io, json, sys
HEAVY = {heavy!r}
seen = {{}}
for name, argv in (("help", ["--help"]), ("bad flag", ["--no-such-flag-at-all"])):
    sys.argv = ["{script}", *argv]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            from {module} import main
            main()
        code = "returned"
    except SystemExit as exit:
        code = exit.code
    seen[name] = {{"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                  "heavy": [m for m in HEAVY if m in sys.modules]}}
print(json.dumps(seen))
"""


def test_every_console_script_is_listed():
    scripts = console_scripts()
    assert len(scripts) >= 18 and all(module.startswith("smallvocab_tools.") for module in scripts.values())


@pytest.mark.slow
@pytest.mark.parametrize("script, module", sorted(console_scripts().items()))
def test_help_and_bad_flags_answer_before_torch_and_fairseq_are_imported(script, module):
    code = _PROBE.format(heavy=HEAVY, script=script, module=module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    helped, bad = seen["help"], seen["bad flag"]
    assert helped["code"] in (0, None) and "usage:" in helped["stdout"], helped
    assert helped["heavy"] == [], f"{script} --help imported {helped['heavy']}"
    assert bad["code"] == 2 and "error:" in bad["stderr"], bad  # argparse's (a required flag may come first)
    assert bad["heavy"] == [], f"{script} with a bad flag imported {bad['heavy']}"
