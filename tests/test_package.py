"""The package loads both ways fairseq users load plugins."""

import argparse
import importlib.util
import sys

import pytest
import torch
from helpers import REPO, USER_DIR, run


def test_import_registers_checkpoint_allow_list():
    import fairseq_smallvocab

    assert fairseq_smallvocab.__version__
    safe = torch.serialization.get_safe_globals()
    assert argparse.Namespace in safe


def test_installed_package_is_this_checkout():
    spec = importlib.util.find_spec("fairseq_smallvocab")
    assert spec is not None and spec.origin is not None
    assert spec.origin.startswith(str(USER_DIR))


@pytest.mark.slow
def test_user_dir_import_by_path_in_fresh_interpreter():
    # fairseq's own mechanism: import_user_module(--user-dir PATH)
    code = (
        "import argparse, sys, torch\n"
        "from fairseq import utils\n"
        f"utils.import_user_module(argparse.Namespace(user_dir={str(USER_DIR)!r}))\n"
        "m = sys.modules['fairseq_smallvocab']\n"
        "print(m.__file__)\n"
        "print(argparse.Namespace in torch.serialization.get_safe_globals())\n"
    )
    out = run([sys.executable, "-c", code], cwd="/").stdout.split()
    assert out[-2].startswith(str(USER_DIR))
    assert out[-1] == "True"


@pytest.mark.slow
def test_user_dir_after_import_of_installed_package():
    # `import fairseq_smallvocab` first, then --user-dir to the same folder:
    # fairseq must accept it as already imported, not raise "not globally unique".
    code = (
        "import argparse, fairseq_smallvocab\n"
        "from fairseq import utils\n"
        f"utils.import_user_module(argparse.Namespace(user_dir={str(USER_DIR)!r}))\n"
        "print('ok')\n"
    )
    assert run([sys.executable, "-c", code], cwd=REPO).stdout.strip().endswith("ok")


@pytest.mark.slow
def test_fairseq_cli_sees_user_dir():
    result = run(["fairseq-train", "--user-dir", USER_DIR, "--help"])
    assert "--user-dir" in result.stdout


@pytest.mark.slow
def test_the_plugin_package_holds_only_the_plugin():
    """--user-dir fairseq_smallvocab loads no tool: no module of the plugin imports smallvocab_tools or
    parses a command line, and loading it (fairseq's way, in a fresh interpreter) imports no tool module;
    the tools import as a package of their own (no sys.path edits)."""
    for path in sorted(USER_DIR.rglob("*.py")):
        text = path.read_text()
        assert "smallvocab_tools" not in text and "ArgumentParser" not in text, path
    code = (
        "import argparse, sys\n"
        "from fairseq import utils\n"
        f"utils.import_user_module(argparse.Namespace(user_dir={str(USER_DIR)!r}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('smallvocab_tools')))\n"
        "import smallvocab_tools.data.prep, smallvocab_tools.bench.benchmark\n"
        "import smallvocab_tools.analysis.plot_benchmark\n"
        "print('tools ok')\n"
    )
    assert run([sys.executable, "-c", code], cwd="/").stdout.split("\n")[-3:-1] == ["[]", "tools ok"]
    for script in sorted((REPO / "scripts").glob("*.py")):
        assert "sys.path.insert" not in script.read_text(), script
