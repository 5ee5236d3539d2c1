"""The package loads both ways fairseq users load plugins."""

import argparse
import importlib.util
import sys

import pytest
import torch
from helpers import REPO, USER_DIR, run


def test_import_routes_fairseqs_checkpoint_loading_and_leaves_torchs_allow_list():
    from fairseq import checkpoint_utils

    import fairseq_smallvocab
    from fairseq_smallvocab.compat.checkpoint_loading import TorchWithLoad, load_checkpoint_file

    assert fairseq_smallvocab.__version__
    assert isinstance(checkpoint_utils.torch, TorchWithLoad) and checkpoint_utils.torch.load is load_checkpoint_file
    assert argparse.Namespace not in torch.serialization.get_safe_globals()


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
        "from fairseq import checkpoint_utils\n"
        "print(type(checkpoint_utils.torch).__name__)\n"
    )
    out = run([sys.executable, "-c", code], cwd="/").stdout.split()
    assert out[-2].startswith(str(USER_DIR))
    assert out[-1] == "TorchWithLoad"


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


def _imports(root):
    """{module: modules of the same package it imports} of a package folder,
    imports inside functions included (they hide cycles, not remove them)."""
    import ast

    mods = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    graph = {}
    for mod, path in mods.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        # a package's own __init__ may import its children, and a child its parent: not a cycle of layout
        graph[mod] = {m for m in found & set(mods) if m != mod and not mod.startswith(m + ".")
                      and not m.startswith(mod + ".")}
    return graph


def _cycle(graph):
    """One import cycle of ``graph`` as a list of names, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


@pytest.mark.parametrize("package", ["fairseq_smallvocab", "smallvocab_tools"])
def test_no_import_cycle_between_modules_or_between_the_plugins_parts(package):
    graph = _imports(REPO / package)
    assert _cycle(graph) is None, _cycle(graph)
    parts = {}  # the same graph between the top-level parts (a subpackage, or a module of its own)
    for mod, deps in graph.items():
        for dep in deps:
            a, b = mod.split(".")[1:2], dep.split(".")[1:2]
            if a and b and a != b:
                parts.setdefault(a[0], set()).add(b[0])
    assert _cycle(parts) is None, _cycle(parts)
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check itself finds one


def test_the_methods_four_parts_are_found_by_folder_name():
    for part in ("predictor", "candidates", "output", "reinforce"):
        assert (USER_DIR / part / "__init__.py").is_file(), part
        assert (USER_DIR / part / "__init__.py").read_text().startswith('"""'), part  # says what the part is


def test_the_data_folder_is_named_in_one_place(tmp_path, monkeypatch):
    """fairseq's --data may list several folders (a:b); the first holds the dictionaries and names the data in
    candidate lists, whose cache check compares what the exporter recorded with what the task reads: one
    function computes it for both (five expressions did)."""
    from fairseq_smallvocab.data.datasets import data_folder

    monkeypatch.chdir(tmp_path)
    assert data_folder("bin1:bin2") == str(tmp_path / "bin1") and data_folder(tmp_path) == str(tmp_path)
    with pytest.raises(ValueError, match=r"no data folder: .*task.data=DIR with fairseq-hydra-train"):
        data_folder(None)
    for path in USER_DIR.rglob("*.py"):
        if path.name != "data.py":
            assert "os.pathsep" not in path.read_text(), path


def _console_scripts():
    """setup.py's console_scripts: {command: "module:function"}."""
    import ast

    tree = ast.parse((REPO / "setup.py").read_text())
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
    points = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "entry_points"))
    return dict(tuple(part.strip() for part in entry.split("=")) for entry in points["console_scripts"])


def test_every_script_that_calls_a_tool_is_an_installed_command_too():
    """scripts/NAME.py that only runs a tool's main is also the command smallvocab-NAME of an installed package
    (names with dashes), and each command's target is a function of the tools package."""
    import importlib
    import re

    shims = {}
    for script in sorted((REPO / "scripts").glob("*.py")):
        found = re.search(r"^from (smallvocab_tools[\w.]*) import main$", script.read_text(), re.M)
        if found:
            shims["smallvocab-" + script.stem.replace("_", "-")] = f"{found.group(1)}:main"
    points = _console_scripts()
    assert points == shims and len(points) >= 18
    for target in points.values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target


@pytest.mark.slow
def test_an_installed_command_runs_its_tool():
    from pathlib import Path

    command = Path(sys.executable).parent / "smallvocab-does-it-pay"
    assert command.is_file(), "pip install -e . (make setup) writes the commands beside python"
    out = run([command, "--help"]).stdout
    assert out.startswith("usage: smallvocab-does-it-pay") and "--model-args FLAGS" in out
