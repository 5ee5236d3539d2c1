"""The house rules of the plugin's layout, checked on its source: how a step
runs is configuration passed down (no module-level setting assigned at run
time), the algorithm (``reinforce/``) apart from the device engine
(``engine/``) and both apart from the models, and no module over 350 lines.
And the engine's one settings object: built from the criterion's flags,
checked naming them, hashable (part of bucket keys)."""

import ast
import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import torch
from helpers import _crit, _setup, reinforce_step

import fairseq_smallvocab
from fairseq_smallvocab.engine.settings import ENGINE_KEYS, NAMES, EngineSettings, parse
from fairseq_smallvocab.reinforce.config import SmallVocabReinforceConfig, check_config

PACKAGE = Path(fairseq_smallvocab.__file__).parent
MAX_LINES = 350
# module globals written by the plugin's install-once hooks (at import, before anything runs)
INSTALL_FLAGS = {"_fairseq_clip_grad_norm", "_installed", "_installed_task_state", "_installed_checkpoint_files",
                 "_warned_unsafe"}


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path):
    """The modules ``path`` imports (absolute names)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_no_plugin_module_is_over_350_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("package, forbidden", [
    ("reinforce", ("fairseq_smallvocab.models", "fairseq_smallvocab.models.restricted", "fairseq_smallvocab.tasks",
                   "fairseq_smallvocab.criterions")),
    ("engine", ("fairseq_smallvocab.models", "fairseq_smallvocab.models.restricted", "fairseq_smallvocab.tasks",
                "fairseq_smallvocab.criterions", "fairseq_smallvocab.reinforce")),
])
def test_the_algorithm_and_the_engine_import_no_models(package, forbidden):
    found = {f"{p.name}: {name}" for p in (PACKAGE / package).rglob("*.py") for name in _imports(p)
             if name.startswith(forbidden)}
    assert not found


def _unit(module: str, inside_engine: bool = False) -> str:
    """The layer a plugin module belongs to: its top-level package (or root module), engine/device_modes/ a
    layer of its own; ``inside_engine``: engine/'s modules one by one."""
    parts = module.split(".")[1:]
    if parts[:2] == ["engine", "device_modes"]:
        return "engine.device_modes"
    return ".".join(parts[:2]) if inside_engine and parts[:1] == ["engine"] and len(parts) > 1 else parts[0]


def _import_graph(inside_engine: bool = False) -> dict:
    graph = {}
    for path in _modules():
        if path.name == "__init__.py" and (path.parent == PACKAGE or inside_engine and path.parent.name == "engine"):
            continue  # a package's registration of its modules (the plugin's of everything, engine/'s families)
        name = ".".join(("fairseq_smallvocab",) + path.relative_to(PACKAGE).with_suffix("").parts)
        name = name[: -len(".__init__")] if name.endswith(".__init__") else name
        if len(name.split(".")) < 2:
            continue
        here = _unit(name, inside_engine)
        targets = {_unit(n, inside_engine) for n in _imports(path)
                   if n.startswith("fairseq_smallvocab.") and not n.startswith("fairseq_smallvocab.__")}
        graph.setdefault(here, set()).update(targets - {here, "engine" if inside_engine else None})
    return graph


def _cycle(graph: dict):
    """A cycle of ``graph`` ({node: nodes it imports}) as a list of nodes, or None."""
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node))), None)


@pytest.mark.parametrize("inside_engine", [False, True])
def test_the_import_graph_has_no_cycle(inside_engine):
    """Layers import downwards only: between the plugin's packages, and between engine/'s modules (its device
    plan builds on the eager plan, ``engine.eager``, from above, and nothing below imports it back:
    ``engine.passes`` loads it by name); the check can fail."""
    graph = _import_graph(inside_engine)
    assert "engine.device_modes" in graph and _cycle(graph) is None, _cycle(graph)
    assert _cycle({**graph, "engine.eager" if inside_engine else "engine": {"engine.device_modes"}}) is not None


def test_no_default_path_module_imports_the_device_modes():
    """Only engine/device_modes/ imports itself; ``engine.passes`` loads it by name where a plan turns a mode
    on."""
    found = {f"{p.relative_to(PACKAGE)}: {name}" for p in _modules() if "device_modes" not in p.parts
             for name in _imports(p) if name.startswith("fairseq_smallvocab.engine.device_modes")}
    assert not found


_LOADED_AFTER_A_STEP = """
import sys
sys.path.insert(0, {tests!r})
from helpers import _setup, reinforce_step
model, task, sample = _setup()
reinforce_step(model, task, sample, "loo", 2{flags})
print(sorted(m for m in sys.modules if m.startswith("fairseq_smallvocab.engine.device_modes")))
"""


@pytest.mark.slow
@pytest.mark.parametrize("flags, loaded", [("", False), (", rl_engine='capture=buckets'", True),
                                           (", rl_engine='merged_pass=on'", True)])
def test_a_default_step_never_loads_the_device_modes(flags, loaded):
    """A REINFORCE step with the default settings runs without the device modes' code ever imported (in a
    fresh interpreter); a step that asks for one loads them."""
    import subprocess
    import sys
    code = _LOADED_AFTER_A_STEP.format(tests=str(Path(__file__).parent), flags=flags)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = ast.literal_eval(out.strip().splitlines()[-1])
    assert bool(modules) == loaded, modules


CUDA_GRAPH_CALLS = ("torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables",
                    "torch.cuda.graph_pool_handle", "torch.compile")


def _calls(path: Path):
    """The dotted names ``path`` calls (``torch.cuda.graph(...)``: "torch.cuda.graph")."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                yield ".".join([func.id] + parts[::-1])


def test_cuda_graphs_and_compilation_live_in_the_device_modes_only():
    """The device modes (the CUDA-graph step, a default on one GPU; the merged pass and compilation, asked for)
    are apart from the eager plan: no module outside engine/device_modes/ captures, replays or compiles; the
    modes do (the check can fail)."""
    modes = PACKAGE / "engine" / "device_modes"
    outside = {f"{p.relative_to(PACKAGE)}: {name}" for p in _modules() if modes not in p.parents
               for name in _calls(p) if name.startswith(CUDA_GRAPH_CALLS)}
    assert not outside
    inside = {name for p in modes.glob("*.py") for name in _calls(p) if name.startswith(CUDA_GRAPH_CALLS)}
    assert {"torch.cuda.graph", "torch.compile"} <= inside, inside


def test_no_module_level_setting_is_written_in_the_source():
    """No ``global`` statement but the install hooks', no ``module.NAME = ...`` of an upper-case name and no
    ``setattr(..., "NAME", ...)`` anywhere in the plugin."""
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Global):
                found += [f"{where} global {name}" for name in node.names if name not in INSTALL_FLAGS]
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            found += [f"{where} {ast.unparse(t)} =" for t in targets
                      if isinstance(t, ast.Attribute) and t.attr.isupper()]
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).isupper():
                found.append(f"{where} {ast.unparse(node)}")
    assert not found


def _upper_case_globals():
    values = {}
    for info in pkgutil.walk_packages([str(PACKAGE)], "fairseq_smallvocab."):
        module = importlib.import_module(info.name)
        values.update({(info.name, name): repr(value) for name, value in vars(module).items()
                       if name.isupper() and not name.startswith("_")})  # (private caches may fill)
    return values


def test_a_step_under_other_settings_leaves_every_module_setting_as_it_was():
    before = _upper_case_globals()
    model, task, sample = _setup()
    flags = dict(rl_engine="capture=buckets,graphed_pass=buckets,static_state=off,stop_check_every=3,"
                           "union_max_ratio=0.5,transposed_min_rows=1,stored_probs_max_elements=0")
    loss, _, _ = reinforce_step(model, task, sample, "learned", 2, **flags)
    assert torch.isfinite(loss)
    assert _upper_case_globals() == before


def test_the_settings_come_from_the_criterions_flags():
    cfg = SmallVocabReinforceConfig(rl_engine="capture=off,static_state=off,stop_check_every=4,union_max_ratio=1.5")
    settings = check_config(cfg)
    assert settings == EngineSettings(capture="off", static_state=False, stop_check_every=4, union_max_ratio=1.5)
    assert check_config(SmallVocabReinforceConfig()) == EngineSettings()  # unset flags: the defaults
    assert {settings: 1}[EngineSettings(capture="off", static_state=False, stop_check_every=4,
                                        union_max_ratio=1.5)] == 1  # hashable: a bucket's key
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.capture = "buckets"
    assert "static_state=off (set)" in settings.describe() and "compile=off," in settings.describe()
    assert "capture=buckets (set)" in settings.changed(capture="buckets").describe()
    assert set(NAMES) == set(ENGINE_KEYS) | {"full_softmax"}  # every setting has its key or flag


def test_the_criterion_carries_its_plan_into_the_sample_request():
    """The request carries the plan the criterion made for the model on its device (the model keeps it), whose
    settings are the criterion's resolved ("auto" off on the CPU)."""
    model, task, sample = _setup()
    crit = _crit(task, rl_engine="capture=buckets,stop_check_every=2")
    request = crit.sample_request(model, sample, crit.plan(model, sample["target"].device))
    assert request.plan is model.engine_plan and request.plan.given == crit.settings
    assert request.settings == EngineSettings(capture="buckets", stop_check_every=2, graphed_pass="off")


@pytest.mark.parametrize("flags, message", [
    (dict(rl_engine="stop_check_every=0"), "--rl-engine stop_check_every must be >= 1, got 0"),
    (dict(rl_engine="capture_max_mib=0"), "--rl-engine capture_max_mib must be >= 1, got 0"),
    (dict(rl_engine="union_max_ratio=nan"), "--rl-engine union_max_ratio must be a finite number > 0"),
    (dict(rl_engine="stored_probs_max_elements=-1"),
     "--rl-engine stored_probs_max_elements and --rl-engine transposed_min_rows must"),
    (dict(rl_engine="capture=graphs"),
     "--rl-engine: capture=graphs: capture takes one of auto, cuda-graphs, buckets, off"),
    (dict(rl_engine="capture"), "--rl-engine 'capture': give KEY=VALUE items, comma-separated (e.g. "
                                "capture=buckets,stop_check_every=4); the keys are capture, compile,"),
    (dict(rl_engine="capture=off,capture=buckets"), "--rl-engine gives capture twice"),
    (dict(rl_engine="full_softmax=chunked"), "--rl-engine full_softmax: set it with --rl-full-softmax"),
    (dict(rl_engine="catpure=off"), "--rl-engine: no key 'catpure'; the keys are capture, compile, graphed_pass, "
                                    "merged_pass,"),  # (full_softmax, a flag of its own, is no key)
    (dict(rl_engine="static_state=maybe"), "--rl-engine: static_state=maybe: static_state takes on or off"),
])
def test_a_bad_setting_is_refused_naming_its_flag(flags, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        check_config(SmallVocabReinforceConfig(**flags))


def test_the_engine_settings_come_as_one_flag():
    """``--rl-engine KEY=VALUE,...`` (spaces and an empty item ignored) and ``--rl-full-softmax`` make the
    settings; the criterion has at most 16 options, the device's but these two gone."""
    cfg = SmallVocabReinforceConfig(rl_engine=" capture = buckets, merged_pass=on,,untested_cuda_modes=on ",
                              rl_full_softmax="chunked")
    assert check_config(cfg) == EngineSettings(capture="buckets", merged_pass=True, untested_cuda_modes=True,
                                               full_softmax="chunked")
    options = [f.name for f in dataclasses.fields(SmallVocabReinforceConfig) if f.name != "_name"]
    assert len(options) <= 16, options
    assert {name for name in options if name.startswith("rl_")} == {
        "rl_objective", "rl_baseline", "rl_samples", "rl_engine", "rl_full_softmax"}
    # --rl-engine's help: each key with what it takes and its default, from the settings' fields
    help_text = next(f for f in dataclasses.fields(SmallVocabReinforceConfig) if f.name == "rl_engine").metadata["help"]
    for name in ENGINE_KEYS:
        assert f"{name} (" in help_text, name
    assert "capture (auto|cuda-graphs|buckets|off, default auto)" in help_text
    assert "stop_check_every (int, default 1)" in help_text and "merged_pass (on|off, default off)" in help_text


@pytest.mark.parametrize("name, text, value", [
    ("static_state", "off", False), ("static_state", "True", True), ("stop_check_every", "8", 8),
    ("union_max_ratio", "1.5", 1.5), ("capture", "buckets", "buckets")])
def test_a_setting_parses_from_text(name, text, value):
    assert parse(name, text) == value


@pytest.mark.parametrize("name, text, message", [
    ("nope", "1", "no setting 'nope'; the settings are capture, compile"),
    ("static_state", "maybe", "static_state takes on or off"),
    ("stop_check_every", "1.5", "stop_check_every takes an int"),
    ("capture", "graphs", "capture takes one of auto, cuda-graphs, buckets, off")])
def test_a_bad_setting_text_is_named(name, text, message):
    with pytest.raises(ValueError, match=message):
        parse(name, text)


@pytest.mark.parametrize("ce_weight", [1.0, 0.5])
def test_every_pass_of_the_criterion_runs_with_its_settings(ce_weight, monkeypatch):
    """The CE control (lambda = 1: no sample request) as the mixed loss: the teacher-forced passes run the
    plan of the criterion's settings, not the model's defaults; the model keeps that plan, so that its
    passes without a REINFORCE request (validation, another criterion's CE) run it too."""
    from fairseq_smallvocab.engine.device_modes import graphed_pass

    model, task, sample = _setup()
    seen, real = [], graphed_pass.extract_features
    monkeypatch.setattr(graphed_pass, "extract_features",
                        lambda decoder, prev, encoder_out, settings: seen.append(settings) or real(
                            decoder, prev, encoder_out, settings))
    _crit(task, ce_weight=ce_weight, rl_engine="graphed_pass=buckets,capture=buckets")(model, sample)
    asked = EngineSettings(graphed_pass="buckets", capture="buckets")
    assert seen and set(seen) == {asked}
    assert model.engine_plan.given == asked
    seen.clear()
    model(**sample["net_input"])  # a pass without a request: the model's plan
    assert seen == [asked]


def _compares_with_auto(node) -> bool:
    """Whether ``node`` compares something with the string "auto" (``== "auto"``, ``in ("auto", ...)``)."""
    if not isinstance(node, ast.Compare):
        return False
    for side in [node.left, *node.comparators]:
        values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        if any(isinstance(v, ast.Constant) and v.value == "auto" for v in values):
            return True
    return False


def test_auto_is_resolved_in_the_plan_only():
    """Only ``engine.passes``' resolution asks whether a setting is "auto" (the settings are data; every caller
    gets a plan, whose settings hold no "auto"); the check can fail."""
    found = set()
    for path in _modules():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    _compares_with_auto(node) for node in ast.walk(function)):
                found.add(f"{path.relative_to(PACKAGE)}:{function.name}")
    assert found == {"engine/passes.py:_resolved"}
    assert _compares_with_auto(ast.parse('capture in ("auto", "off")').body[0].value)


def _step_reads(name: str, rl_engine: str):
    """(files, lines) of the plugin that a REINFORCE step reads (the second batch's loss and backward, the
    first having made the plan): each plugin function the step calls, counted once with its whole body."""
    import sys
    import threading

    from model_families import family_setup

    model, task, sample = family_setup(name, small=True)
    crit = _crit(task, ce_weight=0.3, rl_baseline="learned", max_sample_len=7, rl_samples=2, rl_engine=rl_engine)
    torch.manual_seed(0)
    crit(model, sample)
    called = set()

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            called.add(frame.f_code)

    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        torch.manual_seed(1)
        crit(model, sample)[0].backward()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    lines = sum(max(line for _, _, line in code.co_lines() if line is not None) - code.co_firstlineno + 1
                for code in called)
    return {Path(code.co_filename).relative_to(PACKAGE).as_posix() for code in called}, lines


@pytest.mark.parametrize("name, rl_engine, most_files, most_lines", [
    ("transformer", "", 16, 1300),  # the CPU's default step
    ("transformer", "capture=buckets", 19, 1330),  # the GPU's default step's stand-in (cuda-graphs replays it)
    ("lstm_smallvocab", "capture=buckets,graphed_pass=buckets", 21, 1550),  # the same for a recurrent decoder
])
def test_what_a_step_reads_is_measured_and_capped(name, rl_engine, most_files, most_lines):
    """A step's reading set (``_step_reads``) stays within its caps, a little above what it measured once the
    plan decided the passes, the static state's family and the probability store's cap (the CPU's Transformer
    step 16 files and 1,274 lines, 17 and 1,306 before; its GPU stand-in 19 and 1,311, 23 and 1,439 before; the
    LSTM's stand-in 21 and 1,530, 24 and 1,579 before); the eager step never reads the device modes, and no step
    reads the settings or the planner (the plan is made before it)."""
    files, lines = _step_reads(name, rl_engine)
    assert len(files) <= most_files and lines <= most_lines, (len(files), lines, sorted(files))
    assert any(f.startswith("engine/device_modes/") for f in files) == bool(rl_engine)
    assert not {"engine/settings.py", "engine/passes.py"} & files  # read when the plan is made, not per step


# the standard library's names that came after a Python version (what a source may not call below it)
_NEWER_APIS = {(3, 9): ("removeprefix", "removesuffix", "functools.cache", "math.lcm", "is_relative_to"),
               (3, 10): ("bit_count", "aiter", "anext", "pairwise"),
               (3, 11): ("tomllib", "ExceptionGroup", "add_note", "StrEnum")}


def test_the_python_floor_that_setup_declares_holds():
    """setup.py's python_requires (and the Makefile's check, and the README) name one floor, and every source
    of the plugin, its tools, scripts, examples and tests parses at that version's grammar and calls no
    standard-library name that came later (the list above); the check can fail."""
    root = PACKAGE.parent
    floor = tuple(int(x) for x in re.search(r'python_requires=">=(\d+)\.(\d+)"', (root / "setup.py").read_text())
                  .groups())
    assert f"sys.version_info >= {floor}" in (root / "Makefile").read_text()
    assert f"Python >= {floor[0]}.{floor[1]}" in (root / "README.md").read_text()
    newer = [name for version, names in _NEWER_APIS.items() if version > floor for name in names]
    found = []
    for folder in ("fairseq_smallvocab", "smallvocab_tools", "scripts", "examples", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), feature_version=floor)
            for node in ast.walk(tree):
                name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) \
                    else None
                dotted = f"{node.value.id}.{node.attr}" if isinstance(node, ast.Attribute) and isinstance(
                    node.value, ast.Name) else None
                if name in newer or dotted in newer:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {dotted or name}")
    assert not found
    assert "removesuffix" in [n for v, names in _NEWER_APIS.items() if v > (3, 8) for n in names]
