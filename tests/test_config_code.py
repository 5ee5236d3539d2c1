"""A checkpoint cannot run code through its config either: fairseq evaluates
some config strings while it builds a model or task (``eval_bool``,
``eval_str_list``, ``eval(...)``), so every path that loads a file's config
refuses one that holds code there, naming the file and the field, before
fairseq sees it; and a predictor's task is always ``vocab_prediction``.
Each test would write its marker file without the check."""

import argparse

import pytest
import torch
from helpers import REPO, USER_DIR, run

import fairseq_smallvocab  # noqa: F401  (the checkpoint loader and its checks)
from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError
from fairseq_smallvocab.compat.evaluated_config import EVALUATED_FIELDS, is_literal

LSTM = ["--arch", "lstm", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-hidden-size", "16",
        "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16"]
TRANSFORMER = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim",
               "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
               "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64", "--cpu", "--no-progress-bar",
         "--num-workers", "0", "--no-epoch-checkpoints", "--max-epoch", "1"]
GENERATE = ["--cpu", "--beam", "1", "--max-len-b", "5"]


def _code(marker):
    return f"__import__('os').system('touch {marker}')"


def _edit(src, dest, section, **fields):
    """A copy of checkpoint ``src`` with ``cfg[section]``'s fields set (the
    way an attacker would: the pickle stays allow-listed)."""
    from fairseq_smallvocab.compat.checkpoint_loading import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    state = torch.load(src, weights_only=True)
    part = state["cfg"][section]
    for key, value in fields.items():
        if isinstance(part, argparse.Namespace):
            setattr(part, key, value)
        else:
            part[key] = value
    torch.save(state, dest)
    return dest


def _refused(result, path, field, marker):
    assert result.returncode != 0
    assert f"refused to load {path}" in result.stderr, result.stderr[-2000:]
    assert field in result.stderr and "nothing in the file ran" in result.stderr, result.stderr[-2000:]
    assert not marker.exists()


@pytest.fixture(scope="module")
def stock(tiny_bin, tmp_path_factory):
    """Checkpoints of stock fairseq-train (no plugin): an lstm and a transformer."""
    out = {}
    for name, arch in (("lstm", LSTM), ("transformer", TRANSFORMER)):
        save = tmp_path_factory.mktemp(name)
        run(["fairseq-train", tiny_bin, *arch, *TRAIN, "--save-dir", save])
        out[name] = save / "checkpoint_last.pt"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("command", ["fairseq-generate", "fairseq-interactive"])
def test_decoding_refuses_code_in_the_lstm_config(command, stock, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _edit(stock["lstm"], tmp_path / "evil.pt", "model", decoder_attention=f"{_code(marker)} or '1'")
    args = [command, tiny_bin, "--user-dir", USER_DIR, "--path", evil, *GENERATE, "--batch-size", "1"]
    if command == "fairseq-interactive":
        args += ["--source-lang", "src", "--target-lang", "tgt"]
    _refused(run(args, check=False, stdin="a b c\n"), evil, "cfg.model.decoder_attention", marker)


@pytest.mark.slow
def test_generate_refuses_code_in_a_transformers_adaptive_softmax_cutoff(stock, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _edit(stock["transformer"], tmp_path / "evil.pt", "model",
                 adaptive_softmax_cutoff=f"{_code(marker)} or [10]")
    result = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
                  "--path", evil, *GENERATE, "--small-vocab-size", "100"], check=False)
    _refused(result, evil, "cfg.model.adaptive_softmax_cutoff", marker)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--restore-file", "--finetune-from-model"])
def test_training_from_a_checkpoint_refuses_code_in_its_config(how, stock, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _edit(stock["lstm"], tmp_path / "evil.pt", "model", adaptive_softmax_cutoff=_code(marker))
    result = run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, *LSTM, *TRAIN, "--max-epoch", "2",
                  "--save-dir", tmp_path / "save", how, evil], check=False)
    _refused(result, evil, "cfg.model.adaptive_softmax_cutoff", marker)


def _evil_predictor(predictor, tmp_path, marker):
    return _edit(predictor, tmp_path / "evil-vp.pt", "task", task="multilingual_translation",
                 left_pad_source=f"{_code(marker)} or True")


@pytest.mark.slow
def test_export_candidates_refuses_code_in_the_predictors_task_config(predictor, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _evil_predictor(predictor, tmp_path, marker)
    result = run([REPO / "scripts" / "export_candidates.py", "--predictor", evil, "--data", tiny_bin, "--k", "60",
                  "--splits", "valid", "--out", tmp_path / "cands"], check=False)
    _refused(result, evil, "cfg.task.left_pad_source", marker)


@pytest.mark.slow
def test_train_with_a_predictor_refuses_code_in_its_task_config(predictor, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _evil_predictor(predictor, tmp_path, marker)
    result = run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
                  "--vocab-predictor", evil, "--small-vocab-size", "60", "--candidates-dir", tmp_path / "cands",
                  "--arch", "lstm_smallvocab", "--embed-dim", "16", *TRAIN, "--save-dir", tmp_path / "save"],
                 check=False)
    _refused(result, evil, "cfg.task.left_pad_source", marker)


@pytest.mark.slow
def test_a_predictor_is_set_up_as_vocab_prediction_whatever_task_its_file_names(predictor, tiny_bin, tmp_path):
    from fairseq_smallvocab.predictor.inference import load_predictor

    other = _edit(predictor, tmp_path / "vp.pt", "task", task="multilingual_translation", left_pad_source="True",
                  lang_pairs="src-tgt")
    model, task = load_predictor(other, data=tiny_bin)
    assert type(task).__name__ == "VocabPredictionTask"
    assert not hasattr(task.cfg, "left_pad_source") and not hasattr(task.cfg, "lang_pairs")
    model_again, _ = load_predictor(predictor, data=tiny_bin)
    assert torch.equal(model.prior, model_again.prior)


@pytest.mark.parametrize("shape", ["namespace", "dict", "legacy-args"])
def test_the_loader_refuses_code_in_every_config_shape(shape, tmp_path):
    """fairseq's checkpoint loader (what -generate, -interactive, -train and
    the hub interface call) refuses such a file whatever shape its config
    has: argparse-configured models pickle a Namespace, dataclass ones a
    dict, legacy checkpoints an ``args`` Namespace."""
    from fairseq import checkpoint_utils

    marker = tmp_path / "PWNED"
    code = f"{_code(marker)} or [10]"
    if shape == "namespace":
        state = {"cfg": {"model": argparse.Namespace(arch="lstm", adaptive_softmax_cutoff=code)}, "model": {}}
        field = "cfg.model.adaptive_softmax_cutoff"
    elif shape == "dict":
        state = {"cfg": {"model": {"_name": "transformer", "adaptive_softmax_cutoff": code},
                         "optimizer": {"_name": "adam", "adam_betas": "(0.9, 0.98)"}}, "model": {}}
        field = "cfg.model.adaptive_softmax_cutoff"
    else:
        state = {"args": argparse.Namespace(arch="lstm", task="translation", left_pad_source=code), "model": {}}
        field = "args.left_pad_source"
    path = tmp_path / "evil.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointLoadError, match=rf"refused to load {path}.*{field} = ") as err:
        checkpoint_utils.load_model_ensemble([str(path)])
    assert "adam_betas" not in str(err.value)  # the literal beside it is not named
    assert not marker.exists()


# What fairseq 0.12 itself writes into the evaluated fields (its defaults and
# documented values) must still load.
FAIRSEQ_VALUES = ["1", "0", "True", "False", "", "10000,50000", "[10000, 50000]", "(0.9, 0.98)", "(1e-30, 1e-3)",
                  "[(512, 3)] * 20", "[(850, 6)] * 3 + [(850, 1)] + [(850, 5)] * 4",
                  "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]",
                  "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2", "((256, 3, True),) * 4", "{'x': 1}", "None"]
CODE = ["__import__('os').system('x') or '1'", "open('/etc/passwd')", "[10] if exec('1') else [1]",
        "[(512, 3)] * 99999999999", "[x for x in ().__class__.__base__.__subclasses__()]", "a.b", "x",
        "[__import__('os')] * 2", "lambda: 1", "(0.9, 0.98) + print(1)", "[[1] * 9999] * 9999",
        "[1] * 2 * 99999", "print(1) + [1]"]


@pytest.mark.parametrize("text", FAIRSEQ_VALUES)
def test_what_fairseq_writes_is_a_literal(text):
    assert is_literal(text)


@pytest.mark.parametrize("text", CODE)
def test_code_is_not_a_literal(text):
    assert not is_literal(text)


def test_every_field_fairseq_evaluates_is_checked():
    """Searched in the installed fairseq's sources, as the list was made: a
    fairseq that evaluates another field fails here."""
    import os
    import re

    import fairseq

    pattern = re.compile(r"\beval(?:_bool|_str_list|_str_dict)?\(\s*(?:self\.)?(?:args|cfg)\.(\w+)")
    found = set()
    root = os.path.dirname(fairseq.__file__)
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    found.update(pattern.findall(f.read()))
    assert {"decoder_attention", "adaptive_softmax_cutoff", "left_pad_source", "adam_betas"} <= found  # it searches
    assert found <= EVALUATED_FIELDS, sorted(found - EVALUATED_FIELDS)
