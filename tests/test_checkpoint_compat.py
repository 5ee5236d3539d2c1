"""fairseq checkpoints load under torch's weights_only=True through the
plugin's allow-list, end to end through fairseq's own CLIs."""

import argparse
import io
import os
import pickle
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import USER_DIR, run
from omegaconf import OmegaConf

import fairseq_smallvocab  # noqa: F401  (routes fairseq's loading through the allow-list)
from fairseq_smallvocab.compat import checkpoint_loading

TORCH_WEIGHTS_ONLY_DEFAULT = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 6)
TINY_LSTM = ["--arch", "lstm", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
             "--encoder-hidden-size", "16", "--decoder-hidden-size", "16",
             "--decoder-out-embed-dim", "16"]
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "4000", "--cpu", "--seed", "3",
         "--no-progress-bar", "--log-format", "simple", "--num-workers", "0"]

# The architectures whose fairseq-train checkpoints must load: fairseq's own and
# the plugin's (with fairseq's stock translation task: full softmax).
ARCHS = {"lstm": TINY_LSTM, "lstm_smallvocab": ["--arch", "lstm_smallvocab", "--embed-dim", "16"]}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def checkpoint(request, tiny_bin, tmp_path_factory):
    """A checkpoint written by fairseq-train: 2 epochs, with --eval-bleu so
    that the metrics state holds numpy arrays, as real runs' do."""
    save_dir = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, *ARCHS[request.param], *TRAIN,
         "--max-epoch", "2", "--save-dir", save_dir, "--eval-bleu",
         "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}', "--best-checkpoint-metric", "bleu",
         "--maximize-best-checkpoint-metric"])
    return SimpleNamespace(arch=request.param, path=save_dir / "checkpoint_last.pt")


def _allowed_names():
    names = set()
    for entry in checkpoint_loading.fairseq_checkpoint_globals():
        if isinstance(entry, tuple):
            names.add(entry[1])
        else:
            names.add(f"{entry.__module__}.{entry.__qualname__}")
    return names


@pytest.mark.slow
def test_every_global_in_a_real_checkpoint_is_allow_listed(checkpoint):
    # asked in a fresh interpreter, without the plugin: torch does not report globals that are already allowed
    code = ("import sys, torch; print('\\n'.join("
            "torch.serialization.get_unsafe_globals_in_checkpoint(sys.argv[1])))")
    found = set(run([sys.executable, "-c", code, checkpoint.path]).stdout.split())
    if checkpoint.arch == "lstm":  # archs configured through argparse pickle their Namespace
        assert "argparse.Namespace" in found  # the reason the fix exists
    assert found <= _allowed_names(), found - _allowed_names()


@pytest.mark.slow
def test_torch_load_reads_a_checkpoint_within_the_allow_list_and_as_before_outside_it(checkpoint):
    """The allow-list holds for fairseq's loads and within ``allowed_globals``; any other torch.load in the
    process accepts what it accepted before the plugin was imported (a Namespace: not on torch >= 2.6)."""
    if checkpoint.arch == "lstm" and TORCH_WEIGHTS_ONLY_DEFAULT:
        with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
            torch.load(checkpoint.path, map_location="cpu")  # weights_only default
    with checkpoint_loading.allowed_globals():
        state = torch.load(checkpoint.path, map_location="cpu")
    assert argparse.Namespace not in torch.serialization.get_safe_globals()
    if checkpoint.arch == "lstm":
        assert isinstance(state["cfg"]["model"], argparse.Namespace)
    else:  # a dataclass-configured model: a plain dict
        assert state["cfg"]["model"]["_name"] == checkpoint.arch
    assert state["model"]


@pytest.mark.slow
@pytest.mark.skipif(not TORCH_WEIGHTS_ONLY_DEFAULT, reason="torch < 2.6 loads with weights_only=False")
def test_stock_fairseq_generate_fails_without_plugin(checkpoint, tiny_bin):
    result = run(["fairseq-generate", tiny_bin, "--path", checkpoint.path, "--cpu", "--beam", "1",
                  "--batch-size", "16"], check=False)
    assert result.returncode != 0
    assert "weights_only" in result.stderr or "Weights only" in result.stderr


@pytest.mark.slow
def test_fairseq_generate_with_user_dir(checkpoint, tiny_bin):
    result = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--path", checkpoint.path,
                  "--cpu", "--beam", "2", "--batch-size", "16", "--max-len-b", "10",
                  "--required-batch-size-multiple", "1"])
    hypotheses = [line for line in result.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 30  # every test sentence
    assert "BLEU" in result.stdout


@pytest.mark.slow
def test_fairseq_interactive_with_user_dir(checkpoint, tiny_bin, tiny_raw):
    lines = (tiny_raw / "test.src").read_text().splitlines()[:3]
    result = run(["fairseq-interactive", tiny_bin, "--user-dir", USER_DIR, "--path", checkpoint.path,
                  "--cpu", "--beam", "1", "--max-len-b", "10", "--source-lang", "src",
                  "--target-lang", "tgt"], stdin="\n".join(lines) + "\n")
    assert len([line for line in result.stdout.splitlines() if line.startswith("H-")]) == 3


@pytest.mark.slow
def test_fairseq_train_resumes_from_checkpoint(checkpoint, tiny_bin, tmp_path):
    resumed = run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, *ARCHS[checkpoint.arch], *TRAIN,
                   "--max-epoch", "3", "--save-dir", tmp_path, "--restore-file", checkpoint.path,
                   "--no-save"])
    assert "Loaded checkpoint" in resumed.stdout + resumed.stderr
    assert "epoch 003" in resumed.stdout + resumed.stderr


def test_legacy_dictconfig_checkpoint_loads(tmp_path):
    # fairseq versions before 0.12 pickled the OmegaConf config object itself
    cfg = OmegaConf.create({"model": argparse.Namespace(arch="lstm", dropout=0.1),
                            "optimization": {"lr": [0.25], "max_epoch": 3}},
                           flags={"allow_objects": True})
    path = tmp_path / "legacy.pt"
    torch.save({"cfg": cfg, "model": {"w": torch.ones(2)},
                "extra_state": {"metrics": {"bleu": np.float64(3.5), "counts": np.arange(4)}}}, path)
    state = checkpoint_loading.load_checkpoint_file(str(path))  # as fairseq's loader calls it
    assert state["cfg"].optimization.lr == [0.25]
    assert state["cfg"].model.arch == "lstm"
    assert state["extra_state"]["metrics"]["bleu"] == 3.5
    assert state["extra_state"]["metrics"]["counts"].tolist() == [0, 1, 2, 3]


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_code_execution_is_still_refused():
    buf = io.BytesIO()
    torch.save({"cfg": {}, "payload": _Exploit()}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError), checkpoint_loading.allowed_globals():
        torch.load(buf)


def test_allow_list_holds_only_classes_and_numpy_reconstructors():
    for entry in checkpoint_loading.fairseq_checkpoint_globals():
        obj, name = entry if isinstance(entry, tuple) else (entry, None)
        if name is not None:  # numpy's pickle reconstructors, under their pickle names
            assert name.rsplit(".", 1)[-1] in ("_reconstruct", "scalar")
            assert name.startswith(("numpy.core.multiarray.", "numpy._core.multiarray."))
        else:
            assert isinstance(obj, type) or obj is __import__("typing").Any, obj


@pytest.mark.slow
def test_fairseq_checkpoint_loading_passes_weights_only_explicitly(checkpoint, monkeypatch):
    """torch 2.4 and 2.5 (set-up accepts them) still default to weights_only=False:
    the plugin's loader must ask for it, whatever torch's default."""
    from fairseq import checkpoint_utils

    seen = []
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint.path))
    assert seen == [True] and "model" in state


def test_malicious_checkpoint_is_refused_through_fairseq(tmp_path):
    from fairseq import checkpoint_utils

    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"cfg": {}, "model": {}, "payload": Exploit(), "more": pickle.loads}, path)
    with pytest.raises(checkpoint_loading.CheckpointLoadError,
                       match=r"refused to load .*evil\.pt.*nothing in it ran") as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()
    # the refused types are named (torch stops at the first; every one is listed), and only advice that applies
    message = str(err.value)
    assert f"{os.system.__module__}.system" in message and "pickle.loads" in message, message
    assert "named above" not in message and "will likely succeed" not in message  # torch's advice to unlock it


def test_a_refused_predictor_checkpoint_names_the_type_and_is_not_called_corrupt(tmp_path):
    from fairseq_smallvocab.predictor.inference import PredictorError, load_predictor

    path = tmp_path / "vp.pt"
    torch.save({"cfg": {}, "model": {}, "payload": _Exploit()}, path)
    with pytest.raises(PredictorError, match=rf"refused to load .*vp\.pt.*{os.system.__module__}\.system") as err:
        load_predictor(path)
    assert not any(word in str(err.value) for word in ("retrain", "corrupt", "incomplete")), str(err.value)


@pytest.mark.slow
def test_truncated_checkpoint_via_path_gets_a_clear_error(checkpoint, tiny_bin, tmp_path):
    broken = tmp_path / "truncated.pt"
    data = checkpoint.path.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    result = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--path", broken, "--cpu",
                  "--gen-subset", "valid", "--max-len-b", "5"], check=False)
    assert result.returncode != 0
    assert f"cannot read {broken} as a fairseq checkpoint" in result.stderr
    assert "may be incomplete or corrupt" in result.stderr


@pytest.mark.parametrize("field, value, reason", [
    ("lr", [0.001] * 10_001, "a list of 10,001 elements, more than the 10,000 accepted"),
    ("update_freq", (1,) * 10_001, "a tuple of 10,001 elements, more than the 10,000 accepted"),
    ("lr", True, "a boolean (True): booleans are not accepted where fairseq writes numbers"),
    ("lr", [0.001, False], "a value of type list whose item 1 is a boolean (False): booleans are not accepted "
                           "where fairseq writes numbers"),
    ("update_freq", "True", "text that is not integers: it reads as a boolean (True): booleans are not accepted"),
    ("update_freq", [1.5], "a value of type list whose item 0 is a float (1.5), not an integer"),
    ("update_freq", ["1"], "a value of type list whose item 0 is a value of type str ('1'; fairseq writes "
                           "integers there)"),
    ("lr", {"a": 1}, "a value of type dict (fairseq writes numbers or a list of them there)"),
])
def test_a_parsed_number_field_is_refused_with_the_real_reason(tmp_path, field, value, reason):
    """A checkpoint config's lr or update_freq that fairseq would fail on is refused naming the file and the
    field, and the reason is the real one: a list over the 10,000-element limit was called "a value of type
    list", a boolean "a value of type bool" (or, as text, "text that is not integers")."""
    from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError, load_checkpoint_file

    path = tmp_path / "ckpt.pt"
    torch.save({"cfg": {"optimization": {"lr": [0.001], "update_freq": [1], field: value}}, "model": {}}, path)
    with pytest.raises(CheckpointLoadError) as err:
        load_checkpoint_file(str(path))
    assert f"refused to load {path}" in str(err.value) and f"cfg.optimization.{field} = " in str(err.value)
    assert reason in str(err.value), str(err.value)
    torch.save({"cfg": {"optimization": {"lr": [0.001] * 10_000, "update_freq": [1] * 10_000}}, "model": {}}, path)
    assert "cfg" in load_checkpoint_file(str(path))  # at the limit: loads


@pytest.mark.parametrize("field, value, reason", [
    ("trained_small_vocab_size", True, "a boolean (True): booleans are not accepted where the plugin's task "
                                       "records an integer"),
    ("trained_small_vocab_size", [40], "a value of type list (the plugin's task records an integer >= 0 there)"),
    ("trained_small_vocab_size", -1, "-1, below 0"),
    ("target_dict_fingerprint", True, "a boolean (True): booleans are not accepted"),
    ("source_dict_fingerprint", "abc", "a value of type str"),
])
def test_a_recorded_field_of_another_form_is_refused_naming_it(tmp_path, field, value, reason):
    """What the plugin's task records in a model's config and reads with int() when it decodes: True was read as
    K = 1 ("--small-vocab-size 1 leaves no room", a flag never given) or as another target dictionary, a list
    failed in int(); the loader refuses such a file naming the field and the reason."""
    from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError, load_checkpoint_file

    path = tmp_path / "ckpt.pt"
    recorded = {"trained_small_vocab_size": 40, "source_dict_fingerprint": 2 ** 59, "target_dict_fingerprint": 7}
    torch.save({"cfg": {"model": dict(recorded)}, "model": {}}, path)
    assert "cfg" in load_checkpoint_file(str(path))  # what the task writes loads
    torch.save({"cfg": {"model": {**recorded, field: value}}, "model": {}}, path)
    with pytest.raises(CheckpointLoadError) as err:
        load_checkpoint_file(str(path))
    assert f"refused to load {path}" in str(err.value) and f"cfg.model.{field} = " in str(err.value)
    assert reason in str(err.value), str(err.value)
