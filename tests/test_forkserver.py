"""The slow tier's fork server (forkserver.py) runs a command as a fresh interpreter would:
the same arguments, directory, environment, input, output streams, exit status and logging."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BUSY_TORCH_THREAD, LEAVING_FAIRSEQ_TRAIN, run

SCRIPT = r'''
import logging, os, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("PROBE"), "stdin", sys.stdin.read().strip())
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)), "main", __name__)
if sys.argv[1] == "log":
    if sys.argv[2] == "first":  # a command that configures logging before it imports fairseq
        logging.basicConfig(format="mine %(message)s", level=logging.INFO, stream=sys.stdout)
    import fairseq  # noqa: F401  (its import configures the root logger unless the command did)
    logging.getLogger("probe").info("logged")
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
'''


@pytest.mark.slow
@pytest.mark.parametrize("args", [["plain", "0"], ["plain", "3"], ["log", "late", "0"], ["log", "first", "0"]])
def test_a_forked_command_behaves_as_a_fresh_interpreter(args, tmp_path, monkeypatch):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    results = {}
    for fork in ("1", "0"):
        monkeypatch.setenv("SMALLVOCAB_TEST_FORK", fork)
        results[fork] = run([script, *args], cwd=tmp_path, stdin="hello\n", env={"PROBE": f"p{fork}"}, check=False)
    forked, fresh = results["1"], results["0"]
    assert forked.returncode == fresh.returncode == int(args[-1])
    assert forked.stdout == fresh.stdout.replace("p0", "p1")
    assert f"cwd {tmp_path} env p1 stdin hello" in forked.stdout and "path0 True main __main__" in forked.stdout
    assert forked.stderr.count("to stderr") == 1
    for stream in ("stdout", "stderr"):  # log lines land in the same stream, formatted alike
        assert [line for line in getattr(forked, stream).splitlines() if "logged" in line] == \
            [line for line in getattr(fresh, stream).splitlines() if "logged" in line]
    if args[0] == "log":
        assert "logged" in (forked.stdout if args[1] == "first" else forked.stderr)


@pytest.mark.slow
def test_console_scripts_and_modules_are_forked_with_their_exit_status(monkeypatch):
    bad = {}
    for fork in ("1", "0"):
        monkeypatch.setenv("SMALLVOCAB_TEST_FORK", fork)
        bad[fork] = run(["fairseq-train", "--no-such-option"], check=False)
    assert bad["1"].returncode == bad["0"].returncode != 0  # fairseq raises RuntimeError after argparse's message
    assert bad["1"].stderr.splitlines()[-1] == bad["0"].stderr.splitlines()[-1] == "RuntimeError"
    monkeypatch.setenv("SMALLVOCAB_TEST_FORK", "1")
    assert "--user-dir" in run(["fairseq-train", "--help"]).stdout
    out = run([sys.executable, "-m", "smallvocab_tools.bench.benchmark", "--help"]).stdout
    assert "--sample-limit" in out


BUSY_PLUGIN = BUSY_TORCH_THREAD + 'print("a busy thread started")\n'


@pytest.mark.slow
def test_one_console_script_runs_in_its_own_process_and_leaves_without_teardown(tmp_path):
    """``forkserver.py --entry`` (the ranks of a distributed test) runs a console script as a fresh interpreter
    would, with its exit status and whole output, and a torch thread still busy at the end does not abort it
    (in the interpreter's teardown it would: pytorch/pytorch#38228)."""
    plugin = tmp_path / "busy"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(BUSY_PLUGIN)
    helped = subprocess.run([*LEAVING_FAIRSEQ_TRAIN, "--user-dir", plugin, "--help"], capture_output=True,
                            text=True, timeout=300)
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "a busy thread started" in helped.stdout and "--max-update" in helped.stdout
    assert helped.stdout.rstrip().splitlines()[-1] == subprocess.run(
        [str(Path(sys.executable).parent / "fairseq-train"), "--help"], capture_output=True, text=True,
        timeout=300).stdout.rstrip().splitlines()[-1]
    bad = subprocess.run([*LEAVING_FAIRSEQ_TRAIN, "--no-such-option"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and bad.stderr.splitlines()[-1] == "RuntimeError", bad.stderr[-2000:]


# a command that hangs, with a child of its own that hangs too: the child's pid is written first
HANGING = r'''
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("started", flush=True)
time.sleep(600)
'''


def _gone(pid):
    """Whether the process has ended (a zombie not yet reaped by whoever adopted it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_command_past_its_deadline_is_killed_with_its_children_and_fails_the_test(fork, tmp_path, monkeypatch):
    """A command that never ends (and a process it started) is killed at the deadline, forked or not, and the
    test fails naming it and showing its output; the fork server then runs the next command as before."""
    import time

    import helpers

    script, pid_file = tmp_path / "hang.py", tmp_path / "child.pid"
    script.write_text(HANGING)
    monkeypatch.setenv("SMALLVOCAB_TEST_FORK", fork)
    monkeypatch.setattr(helpers, "DEADLINE", 20.0)  # time for a fresh interpreter to start, on a busy machine
    with pytest.raises(AssertionError, match=r"still ran after 20 s: killed with the processes it started") as err:
        run([script, pid_file])
    assert "started" in str(err.value)
    child = int(pid_file.read_text())
    end = time.monotonic() + 30  # SIGKILL's delivery; its parent, killed too, no longer reaps it at once
    while not _gone(child) and time.monotonic() < end:
        time.sleep(0.05)
    assert _gone(child), f"the command's child (pid {child}) outlived the deadline"
    (tmp_path / "next.py").write_text("print('next')\n")
    assert run([tmp_path / "next.py"]).stdout == "next\n"
