"""The installer's decisions (no installs here: those run in CI's set-up)."""

import os
import stat
import subprocess

import pytest
from helpers import REPO, load_script

setup_venv = load_script("setup_venv")


def test_torch_plan_keeps_recent_torch():
    assert setup_venv.torch_plan("2.13.0+cpu") == ("keep", "2.13.0+cpu")
    assert setup_venv.torch_plan("2.4.0") == ("keep", "2.4.0")
    assert setup_venv.torch_plan("2.5.1+cu121") == ("keep", "2.5.1+cu121")


def test_torch_plan_installs_pinned_cpu_torch_when_missing(monkeypatch):
    monkeypatch.delenv("TORCH_REQUIREMENT", raising=False)
    assert setup_venv.torch_plan(None) == ("install", "torch==2.13.0")


def test_torch_plan_refuses_to_replace_old_torch():
    with pytest.raises(setup_venv.SetupError, match="older than the 2.4"):
        setup_venv.torch_plan("2.0.1")
    # 2.1-2.3 load with weights_only=False by default and cannot allow-list fairseq's types
    with pytest.raises(setup_venv.SetupError, match="weights_only=True and an allow-list"):
        setup_venv.torch_plan("2.3.1")


def test_fairseq_requirement_by_python_version():
    assert setup_venv.fairseq_requirement((3, 11)) == "fairseq-fixed==0.12.3.1"
    assert setup_venv.fairseq_requirement((3, 12, 1)) == "fairseq-fixed==0.12.3.1"
    assert setup_venv.fairseq_requirement((3, 10)) == "fairseq==0.12.2"


def test_parse_version():
    assert setup_venv.parse_version("2.13.0+cpu") == (2, 13, 0)
    assert setup_venv.parse_version("2.6.0a0+git123") == (2, 6, 0)


def _fake_python(path, script):
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.slow
def test_make_stops_on_old_python(tmp_path):
    fake = _fake_python(tmp_path / "python3.7",
                        'if [ "$1" = "--version" ]; then echo "Python 3.7.9"; exit 0; fi\n'
                        'exit 1\n')
    result = subprocess.run(["make", "-s", "-C", str(REPO), "check-python", f"PYTHON={fake}"],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "Python >= 3.8 is required" in result.stderr
    assert "Python 3.7.9" in result.stderr


def test_setup_refuses_old_torch_in_existing_venv(tmp_path, capsys):
    # a venv whose python reports torch 2.0.1: set-up must stop, not replace it
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    _fake_python(bindir / "python", 'echo 2.0.1\n')
    with pytest.raises(setup_venv.SetupError, match="torch 2.0.1"):
        setup_venv.main(["--venv", str(tmp_path / "venv")])
    assert not (tmp_path / "venv" / "torch-constraints.txt").exists()
    assert os.listdir(bindir) == ["python"]
