"""Data preparation's output folder: written whole or not at all (a failure midway, an existing
output, a killed run and its child fairseq-preprocess), its mode as mkdir's under the umask, and the
temporary folders of killed runs removed."""

import os
import sys

import pytest
from helpers import sigint_default
from prepare_helpers import PREPARE, SPLITS, leftovers

from smallvocab_tools.data import prep
from smallvocab_tools.data.output_dir import atomic_output_dir


def test_failure_midway_leaves_no_complete_looking_folder(tiny_raw, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise prep.DataError("fairseq-preprocess failed (simulated)")

    monkeypatch.setattr(prep, "fairseq_preprocess", broken)
    with pytest.raises(prep.DataError, match="simulated"):
        prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force_and_is_replaced_only_when_complete(tiny_raw, tmp_path, monkeypatch):
    dest = tmp_path / "bin"
    prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    with pytest.raises(prep.DataError, match="already exists.*--force"):
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS)
    before = (dest / "dict.tgt.txt").read_text()
    monkeypatch.setattr(prep, "fairseq_preprocess", lambda *a, **k: (_ for _ in ()).throw(prep.DataError("boom")))
    with pytest.raises(prep.DataError, match="boom"):
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, force=True)
    assert (dest / "dict.tgt.txt").read_text() == before  # the old output is intact
    assert not leftovers(tmp_path)


@pytest.fixture
def umask():
    """Set the process umask for one test (``umask(0o027)``), restored after."""
    before = os.umask(0o022)
    os.umask(before)
    yield os.umask
    os.umask(before)


def test_a_failed_replacement_puts_the_previous_folder_back(tmp_path, monkeypatch):
    """--force renames the previous folder aside, then the new one into place: where the second rename
    fails, the previous folder is back where it was (the next run would delete it as a leftover)."""
    from pathlib import Path

    final = tmp_path / "out"
    with atomic_output_dir(final) as tmp:
        (tmp / "a.txt").write_text("previous\n")
    rename = Path.rename

    def failing(self, target):
        if Path(target) == final and ".tmp-" in self.name:  # the new folder (not the previous one, back)
            raise OSError("the new folder cannot take the name")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError, match="cannot take the name"):
        with atomic_output_dir(final, overwrite=True) as tmp:
            (tmp / "a.txt").write_text("new\n")
    assert (final / "a.txt").read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077], ids=["022", "027", "077"])
def test_output_folder_mode_follows_the_umask_like_mkdir(tmp_path, umask, mask):
    umask(mask)
    (tmp_path / "by-mkdir").mkdir()
    with atomic_output_dir(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("x\n")
    mode = (tmp_path / "out").stat().st_mode
    assert mode & 0o7777 == (tmp_path / "by-mkdir").stat().st_mode & 0o7777 == 0o777 & ~mask
    # a set-group-ID parent is inherited as with mkdir (shared group folders)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)
    (shared / "by-mkdir").mkdir()
    with atomic_output_dir(shared / "out") as tmp:
        pass
    assert (shared / "out").stat().st_mode & 0o7777 == (shared / "by-mkdir").stat().st_mode & 0o7777


def test_prepared_data_is_readable_by_the_group_under_umask_027(tiny_raw, tmp_path, umask):
    umask(0o027)
    prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    assert (tmp_path / "bin").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "bin" / "raw").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "bin" / "dict.tgt.txt").stat().st_mode & 0o777 == 0o640


@pytest.mark.slow
def test_stale_temporary_folders_of_killed_runs_are_removed(tiny_raw, tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a PID that has exited
    stale = [f".bin.tmp-{dead}-k2j4h5", f".bin.old-{dead}", ".bin.tmp-a1b2c3d4"]  # the last: older naming
    kept = [f".bin.tmp-{os.getppid()}-x9y8z7", ".bin.tmp-notours", ".other.tmp-a1b2c3d4", "bin-notes"]
    for name in stale + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "half-written.bin").write_text("x")
    prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    left = {p.name for p in tmp_path.iterdir()}
    assert not left & set(stale)
    assert left == set(kept) | {"bin"}  # a live run's folder and foreign names untouched


FAKE_PREPROCESS = """import os, sys, time
pid = os.environ["FAKE_PREPROCESS_PID"]
with open(pid + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pid + ".tmp", pid)  # whole, or not there
time.sleep(120)
"""


def _running(pid):
    """Whether the process runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; SIGKILL's case is Linux's prctl")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_killing_the_cli_stops_fairseq_preprocess_and_leaves_nothing(tiny_raw, tmp_path, sig):
    """SIGTERM or Ctrl-C while fairseq-preprocess runs (a stand-in that waits, found first on PYTHONPATH): the
    child is stopped and waited for, and neither the output nor its temporary folder is left.  SIGKILL runs no
    cleanup: the kernel stops the child (PR_SET_PDEATHSIG), and only the temporary folder is left (the next run
    removes it)."""
    import signal
    import subprocess
    import time

    fake = tmp_path / "fake"
    (fake / "fairseq_cli").mkdir(parents=True)
    (fake / "fairseq_cli" / "__init__.py").write_text("")
    (fake / "fairseq_cli" / "preprocess.py").write_text(FAKE_PREPROCESS)
    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, FAKE_PREPROCESS_PID=str(pid_file),
               PYTHONPATH=os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(PREPARE), "--raw-dir", str(tiny_raw), "--src", "src", "--tgt", "tgt",
                             "--dest", str(out / "bin")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_default)  # SIGINT works however the tests were started
    child = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "fairseq-preprocess did not start"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -9}[sig], stderr
        assert "Traceback" not in stderr
        deadline = time.monotonic() + 5
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child), f"fairseq-preprocess (pid {child}) outlived prepare_data.py"
        left = [p.name for p in out.iterdir()]
        if sig == "SIGKILL":
            assert len(left) == 1 and left[0].startswith(".bin.tmp-"), left
        else:
            assert left == []  # no output, and no temporary folder
    finally:
        if proc.poll() is None:
            proc.kill()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)
