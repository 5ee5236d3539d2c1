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
