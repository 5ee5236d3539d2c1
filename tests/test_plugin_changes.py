"""What loading the plugin changes in fairseq and torch: exactly the list in compat/__init__.py (measured by a
snapshot of the process before and after the import), each patch switchable with SMALLVOCAB_COMPAT, the list
shown in the docs, torch's own behaviour (its allow-list, its TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD switch, its error
types) kept."""

import argparse
import fractions
import io
import json
import os
import pickle
import re
import sys

import pytest
import torch
from helpers import REPO, USER_DIR, run

import fairseq_smallvocab  # noqa: F401  (installs every patch: no SMALLVOCAB_COMPAT in the tests' environment)
from fairseq_smallvocab import compat
from fairseq_smallvocab.compat import checkpoint_loading
from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError

TORCH_WEIGHTS_ONLY_DEFAULT = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 6)


def test_every_patch_is_installed_where_the_switch_is_unset():
    assert compat.ENV not in os.environ, f"the tests run with every patch: unset {compat.ENV}"
    assert compat._installed == compat.NAMES


@pytest.mark.parametrize("value, left_out", [
    (None, set()), ("", set()), ("on", set()), ("off", set(compat.NAMES)), ("-pace", {"pace"}),
    (" -pace, -quiet_logs ", {"pace", "quiet_logs"}), ("-checkpoint_loading,-evaluated_config",
                                                      {"checkpoint_loading", "evaluated_config"}),
])
def test_the_switch_leaves_out_what_it_names(value, left_out):
    assert {p.name for p in compat.chosen(value)} == set(compat.NAMES) - left_out


@pytest.mark.parametrize("value, why", [("pace", "'pace' needs a leading '-'"), ("-pase", "'-pase' names no patch"),
                                        ("of", "'of' names no patch"),
                                        ("-pace,quiet_logs", "'quiet_logs' needs a leading '-'"),
                                        (",", "it names nothing"), ("-", "'-' names no patch")])
def test_a_switch_value_that_names_no_patch_is_refused_with_the_names(value, why):
    with pytest.raises(ValueError) as err:
        compat.chosen(value)
    message = str(err.value)
    assert f"{compat.ENV}={value!r}: {why}." in message and "'off'" in message and "-pace,-quiet_logs" in message
    assert all(name in message for name in compat.NAMES)


@pytest.mark.parametrize("value", ["OFF", "Off"])
def test_the_switch_reads_off_in_any_case(value):
    assert compat.chosen(value) == ()


def test_the_docs_show_the_list():
    """docs/checkpoints.md holds compat.table() as it is (print it with
    python -c "from fairseq_smallvocab.compat import table; print(table())")."""
    assert compat.table() in (REPO / "docs" / "checkpoints.md").read_text()


def test_each_patch_says_what_it_changes_why_for_which_versions_and_tasks():
    for patch in compat.PATCHES:
        assert patch.changes and patch.why and patch.assumes and patch.targets, patch.name
        assert patch.stock.startswith(("yes", "no")), patch.name


@pytest.mark.slow
@pytest.mark.parametrize("value", ["on", "off", "-pace,-quiet_logs", "-checkpoint_loading,-task_state"])
def test_importing_the_plugin_changes_exactly_what_the_list_says(value):
    """Measured: every attribute of fairseq's and torch's modules and classes, torch's allow-list, the warning
    filters and every logger, before and after --user-dir loads the plugin (tests/plugin_state.py)."""
    found = json.loads(run([sys.executable, REPO / "tests" / "plugin_state.py", USER_DIR],
                           env={compat.ENV: value})
                       .stdout.splitlines()[-1])
    expected = {target for patch in compat.chosen(value) for target in patch.targets
                if patch.name != "grad_clip" or torch.cuda.is_available()}  # installed only where a GPU is seen
    assert set(found) == expected
    assert "torch-safe-globals" not in found  # torch's global allow-list: never


# -- torch.load outside fairseq, torch's switch, torch's error types ------------------------------------------------

def _namespace_checkpoint(tmp_path, **extra):
    path = tmp_path / "ckpt.pt"
    torch.save({"cfg": {"model": argparse.Namespace(arch="lstm")}, "model": {"w": torch.ones(2)},
                "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "num_updates": 0,
                                       "lr_scheduler_state": {"best": None}}], "extra_state": {}, **extra}, path)
    return path


@pytest.mark.skipif(not TORCH_WEIGHTS_ONLY_DEFAULT, reason="torch < 2.6 loads with weights_only=False")
def test_torch_load_outside_fairseq_accepts_what_it_accepted_before(tmp_path):
    from fairseq import checkpoint_utils

    path = _namespace_checkpoint(tmp_path)
    assert argparse.Namespace not in torch.serialization.get_safe_globals()
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        torch.load(path)
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["model"].arch == "lstm"  # fairseq's load
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        torch.load(path)  # and after it, as before


def test_a_global_the_user_allowed_stays_allowed_after_fairseqs_load(tmp_path):
    from fairseq import checkpoint_utils

    path = _namespace_checkpoint(tmp_path)
    before = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([argparse.Namespace])
    try:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
        assert argparse.Namespace in torch.serialization.get_safe_globals()
        assert torch.load(path)["cfg"]["model"].arch == "lstm"
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)


def test_a_trusted_checkpoint_outside_the_allow_list_loads_with_torchs_switch(tmp_path, monkeypatch):
    """TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 loads what the allow-list refuses (a Fraction here), as torch does
    where no weights_only is passed, with one warning saying what it allows; unset, it is refused."""
    from fairseq import checkpoint_utils

    path = _namespace_checkpoint(tmp_path, extra_state={"ratio": fractions.Fraction(2, 3)})
    with pytest.raises(CheckpointLoadError, match=r"refused to load .*fractions\.Fraction"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setattr(checkpoint_loading, "_warned_unsafe", False)
    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set.*can run code") as said:
        for _ in range(2):
            state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert state["extra_state"]["ratio"] == fractions.Fraction(2, 3)
    assert len([w for w in said if "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" in str(w.message)]) == 1


def _torchs_error(data: bytes):
    try:
        with checkpoint_loading.allowed_globals():
            torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:
        return err
    raise AssertionError("torch loaded it")


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def _exploit_bytes():
    buf = io.BytesIO()
    torch.save({"payload": _Exploit()}, buf)
    return buf.getvalue()


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04 truncated", b"not a checkpoint at all", _exploit_bytes()],
                         ids=["empty", "truncated", "foreign", "refused-global"])
def test_a_load_error_is_also_torchs_own_error_and_keeps_it_as_its_cause(tmp_path, data):
    """Code that catches what torch raises (pickle.UnpicklingError, EOFError, RuntimeError...) still catches the
    plugin's error, which names the file; torch's error is its __cause__."""
    from fairseq import checkpoint_utils

    original = _torchs_error(data)
    path = tmp_path / "bad.pt"
    path.write_bytes(data)
    with pytest.raises(type(original)) as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert isinstance(err.value, CheckpointLoadError) and str(path) in str(err.value)
    assert type(err.value.__cause__) is type(original)


# -- with the switch off, a stock run is fairseq's own -------------------------------------------------------------

STOCK_LSTM = ["--arch", "lstm", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-hidden-size",
              "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16", "--optimizer", "adam", "--lr",
              "1e-3", "--max-tokens", "4000", "--cpu", "--seed", "3", "--no-progress-bar", "--log-format", "simple",
              "--num-workers", "0"]
# what differs between two runs of one command whatever is loaded: times, speeds, free memory, the folders
_TIMES = [(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| "), ""),
          (re.compile(r"\b(wps|ups|wall|train_wall|gb_free|cuda_gb_free) [\d.]+"), r"\1 T"),
          (re.compile(r"[\d.]+ ?(seconds|s\b|sentences/s|tokens/s)"), r"T \1"),
          (re.compile(r"\buser_dir(': |=)'[^']*'"), r"user_dir\1None")]


def _normalized(result, *folders):
    text = result.stdout + result.stderr
    for folder in folders:
        text = text.replace(str(folder), "FOLDER")
    lines = []
    for line in text.splitlines():
        for pattern, replacement in _TIMES:
            line = pattern.sub(replacement, line)
        lines.append(line)
    return lines


def _registry_free(lines):
    """Lines without the choices of fairseq's --task / --arch / --criterion in its usage lines (where the
    plugin's registered names are)."""
    return [re.sub(r"\{[^{}]*\}", "{CHOICES}", line) if line.lstrip().startswith(("[--", "usage:")) else line
            for line in lines]


def _same_lines(a, b):
    import difflib

    def around(x, y):  # a long line (fairseq's config) shown where it differs
        at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        return x[max(0, at - 60):at + 60]

    shown = [around(x, y) if len(x) > 300 else x for x, y in zip(a, b)] + a[len(b):]
    expected = [around(y, x) if len(y) > 300 else y for x, y in zip(a, b)] + b[len(a):]
    assert a == b, "\n".join(difflib.unified_diff(expected, shown, "without the plugin", "with it, switched off",
                                                  lineterm=""))


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else None


@pytest.mark.slow
def test_with_the_switch_off_a_stock_run_is_fairseqs_own(tiny_bin, tmp_path):
    """SMALLVOCAB_COMPAT=off: fairseq-train (trained, then refused), fairseq-generate (with and without torch's
    switch) write the same files, log the same lines and fail with the same errors as without --user-dir."""
    def both(command, save, **env):
        plain = run([*command, *(["--save-dir", tmp_path / "plain" / save] if save else [])], check=False, env=env)
        off = run([*command, *(["--save-dir", tmp_path / "off" / save] if save else []), "--user-dir", USER_DIR],
                  check=False, env={compat.ENV: "off", **env})
        assert off.returncode == plain.returncode
        folders = tmp_path / "plain", tmp_path / "off"
        _same_lines(_registry_free(_normalized(off, *folders)), _registry_free(_normalized(plain, *folders)))
        if save:
            assert _files(tmp_path / "off" / save) == _files(tmp_path / "plain" / save)
        return plain

    trained = both(["fairseq-train", tiny_bin, *STOCK_LSTM, "--max-epoch", "2"], "ckpt")
    assert trained.returncode == 0 and "done training" in trained.stdout + trained.stderr
    refused = both(["fairseq-train", tiny_bin, *STOCK_LSTM, "--max-epoch", "1", "--finetune-from-model",
                    tmp_path / "plain" / "ckpt" / "checkpoint_last.pt", "--reset-optimizer"], "refused")
    assert refused.returncode != 0 and "--finetune-from-model can not be set together" in refused.stderr
    generate = ["fairseq-generate", tiny_bin, "--path", tmp_path / "plain" / "ckpt" / "checkpoint_last.pt", "--cpu",
                "--beam", "2", "--batch-size", "16", "--max-len-b", "10"]
    if TORCH_WEIGHTS_ONLY_DEFAULT:
        failed = both(generate, None)
        assert failed.returncode != 0 and "argparse.Namespace" in failed.stderr
    decoded = both(generate, None, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    assert decoded.returncode == 0 and decoded.stdout.count("\nH-") >= 20


# -- fairseq's own tests with the plugin loaded (scripts/fairseq_tests.py) -----------------------------------------

FAKE_FAIRSEQ_TESTS = '''
import sys

import torch
from fairseq import checkpoint_utils


def test_passes_either_way():
    assert torch.ones(2).sum() == 2


def test_sees_fairseqs_own_torch():  # the checkpoint_loading patch replaces it
    assert checkpoint_utils.torch is torch


def test_needs_the_plugin():
    assert "fairseq_smallvocab" in sys.modules
'''


@pytest.mark.slow
def test_the_fairseq_tests_script_says_what_the_plugin_turns_from_passing_to_failing(tmp_path):
    """Run on a stand-in for fairseq's tests/ folder: one test the plugin breaks, one it fixes, one it leaves;
    with SMALLVOCAB_COMPAT=off the broken one passes again. The checkout's own fairseq/ (a fairseq that does not
    import on this Python, here) is not the one tested: the installed one is."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(FAKE_FAIRSEQ_TESTS)
    (tmp_path / "fairseq").mkdir()
    (tmp_path / "fairseq" / "__init__.py").write_text("raise ImportError('the checkout\'s fairseq was imported')\n")
    script = REPO / "scripts" / "fairseq_tests.py"
    found = run([sys.executable, script, "--fairseq", tmp_path, "--", "tests/test_fake.py"], check=False)
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert lines[:2] == ["without the plugin: 2 passed, 1 failed, 0 skipped",
                         "with the plugin: 2 passed, 1 failed, 0 skipped"]
    assert lines[2:] == ["pass without the plugin, fail with it: 1", "  tests.test_fake::test_sees_fairseqs_own_torch",
                         "fail without the plugin, pass with it: 1", "  tests.test_fake::test_needs_the_plugin"]
    off = run([sys.executable, script, "--fairseq", tmp_path, "--compat", "off", "--", "tests/test_fake.py"])
    assert "pass without the plugin, fail with it: 0" in off.stdout.splitlines()
    refused = run([sys.executable, script, "--fairseq", tmp_path / "nowhere"], check=False)
    assert refused.returncode == 2 and "holds no tests/ folder" in refused.stderr


def test_both_of_torchs_switches_get_torchs_own_refusal(tmp_path, monkeypatch):
    from fairseq import checkpoint_utils

    path = _namespace_checkpoint(tmp_path)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(RuntimeError, match="Only one of") as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not isinstance(err.value, CheckpointLoadError) and "corrupt" not in str(err.value)


def test_an_error_whose_class_wants_other_arguments_is_still_of_that_class():
    original = UnicodeDecodeError("ascii", b"\xff", 0, 1, "ordinal not in range(128)")
    err = checkpoint_loading._load_error("cannot read x.pt", original)
    assert isinstance(err, UnicodeDecodeError) and isinstance(err, ValueError) and isinstance(err, CheckpointLoadError)
    assert str(err) == "cannot read x.pt"


def test_the_plugins_own_readers_load_safely_with_the_patch_left_out(tmp_path, monkeypatch):
    """SMALLVOCAB_COMPAT=-checkpoint_loading leaves fairseq's loading as fairseq's; the plugin's tools and tasks
    (read_checkpoint: checkpoint_flags, the export, averaging, the predictor) still read with the allow-list,
    and leave fairseq as they found it."""
    from fairseq import checkpoint_utils

    monkeypatch.setattr(checkpoint_utils, "torch", torch)  # as without the patch
    path = _namespace_checkpoint(tmp_path)
    assert checkpoint_loading.read_checkpoint(path)["cfg"]["model"].arch == "lstm"
    assert checkpoint_utils.torch is torch
    if TORCH_WEIGHTS_ONLY_DEFAULT:
        with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
            checkpoint_utils.load_checkpoint_to_cpu(str(path))  # fairseq's own, as without the plugin


def test_a_plugin_task_says_what_is_lost_without_task_state(tiny_bin, monkeypatch, caplog):
    from translation_helpers import mt_task

    monkeypatch.setattr(compat, "_installed", tuple(n for n in compat.NAMES if n != "task_state"))
    with caplog.at_level("WARNING"):
        mt_task(tiny_bin, small_vocab_size=0)
    assert "leaves out task_state" in caplog.text
    assert "learned baseline) is not saved with the checkpoints" in caplog.text
    assert "non-finite batches no longer stops the run" in caplog.text
