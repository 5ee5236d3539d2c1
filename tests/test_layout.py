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
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import _crit, _setup, reinforce_step

import fairseq_smallvocab
from fairseq_smallvocab.engine.settings import NAMES, EngineSettings, parse
from fairseq_smallvocab.reinforce.config import ReinforceGleuConfig, check_config

PACKAGE = Path(fairseq_smallvocab.__file__).parent
MAX_LINES = 350
# module globals written by the plugin's install-once hooks (at import, before anything runs)
INSTALL_FLAGS = {"_fairseq_clip_grad_norm", "_installed", "_registered"}


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
    ("reinforce", ("fairseq_smallvocab.models", "fairseq_smallvocab.restricted_model", "fairseq_smallvocab.tasks",
                   "fairseq_smallvocab.criterions")),
    ("engine", ("fairseq_smallvocab.models", "fairseq_smallvocab.restricted_model", "fairseq_smallvocab.tasks",
                "fairseq_smallvocab.criterions", "fairseq_smallvocab.reinforce")),
])
def test_the_algorithm_and_the_engine_import_no_models(package, forbidden):
    found = {f"{p.name}: {name}" for p in (PACKAGE / package).rglob("*.py") for name in _imports(p)
             if name.startswith(forbidden)}
    assert not found


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
    """The optional device modes (off by default) are apart from the default path: no module outside
    engine/device_modes/ captures, replays or compiles; the modes do (the check can fail)."""
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
    flags = dict(rl_capture="buckets", rl_graphed_pass="buckets", rl_static_state="off", rl_stop_check_every=3,
                 rl_union_max_ratio=0.5, rl_transposed_min_rows=1, rl_stored_probs_max_elements=0)
    loss, _, _ = reinforce_step(model, task, sample, "learned", 2, **flags)
    assert torch.isfinite(loss)
    assert _upper_case_globals() == before


def test_the_settings_come_from_the_criterions_flags():
    cfg = ReinforceGleuConfig(rl_capture="off", rl_static_state="off", rl_stop_check_every=4, rl_union_max_ratio=1.5)
    settings = check_config(cfg)
    assert settings == EngineSettings(capture="off", static_state=False, stop_check_every=4, union_max_ratio=1.5)
    assert check_config(ReinforceGleuConfig()) == EngineSettings()  # unset flags: the defaults
    assert {settings: 1}[EngineSettings(capture="off", static_state=False, stop_check_every=4,
                                        union_max_ratio=1.5)] == 1  # hashable: a bucket's key
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.capture = "buckets"
    assert "static_state=off (set)" in settings.describe() and "compile=off," in settings.describe()
    assert "capture=buckets (set)" in settings.changed(capture="buckets").describe()
    assert set(NAMES) == {name[3:] for name in vars(ReinforceGleuConfig()) if name.startswith("rl_")} - {
        "lambda", "baseline", "samples", "objective"}  # every setting has its flag (the rest: the algorithm's)


def test_the_criterion_carries_its_settings_into_the_sample_request():
    model, task, sample = _setup()
    crit = _crit(task, rl_capture="buckets", rl_stop_check_every=2)
    request = crit.sample_request(model, sample)
    assert request.settings == EngineSettings(capture="buckets", stop_check_every=2) == crit.settings


@pytest.mark.parametrize("flags, message", [
    (dict(rl_stop_check_every=0), "--rl-stop-check-every must be >= 1, got 0"),
    (dict(rl_capture_max_mib=0), "--rl-capture-max-mib must be >= 1, got 0"),
    (dict(rl_union_max_ratio=float("nan")), "--rl-union-max-ratio must be a finite number > 0"),
    (dict(rl_stored_probs_max_elements=-1), "--rl-stored-probs-max-elements and --rl-transposed-min-rows must"),
])
def test_a_bad_setting_is_refused_naming_its_flag(flags, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        check_config(ReinforceGleuConfig(**flags))
    with pytest.raises(ValueError, match="--rl-capture must be one of cuda-graphs, buckets, off, got 'graphs'"):
        EngineSettings.from_config(SimpleNamespace(rl_capture="graphs"))


@pytest.mark.parametrize("name, text, value", [
    ("static_state", "off", False), ("static_state", "True", True), ("stop_check_every", "8", 8),
    ("union_max_ratio", "1.5", 1.5), ("capture", "buckets", "buckets")])
def test_a_setting_parses_from_text(name, text, value):
    assert parse(name, text) == value


@pytest.mark.parametrize("name, text, message", [
    ("nope", "1", "no setting 'nope'; the settings are capture, compile"),
    ("static_state", "maybe", "static_state takes on or off"),
    ("stop_check_every", "1.5", "stop_check_every takes an int"),
    ("capture", "graphs", "capture takes one of cuda-graphs, buckets, off")])
def test_a_bad_setting_text_is_named(name, text, message):
    with pytest.raises(ValueError, match=message):
        parse(name, text)


@pytest.mark.parametrize("rl_lambda", [1.0, 0.5])
def test_every_pass_of_the_criterion_runs_with_its_settings(rl_lambda, monkeypatch):
    """The CE control (lambda = 1: no sample request) as the mixed loss: the teacher-forced passes get the
    criterion's settings, not the model's defaults."""
    from fairseq_smallvocab.engine.device_modes import graphed_pass

    model, task, sample = _setup()
    seen, real = [], graphed_pass.extract_features
    monkeypatch.setattr(graphed_pass, "extract_features",
                        lambda decoder, prev, encoder_out, settings: seen.append(settings) or real(
                            decoder, prev, encoder_out, settings))
    _crit(task, rl_lambda=rl_lambda, rl_graphed_pass="buckets", rl_capture="buckets")(model, sample)
    assert seen and set(seen) == {EngineSettings(graphed_pass="buckets", capture="buckets")}
    assert model.engine_settings == EngineSettings()
