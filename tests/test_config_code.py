"""A checkpoint cannot run code through its config either: fairseq evaluates
some config values while it builds a model or task (``eval_bool``,
``eval_str_list``, ``eval(...)``), as ``str`` or as ``bytes``, so every path
that loads a file's config refuses one that holds anything but a small literal
there, naming the file and the field, before fairseq sees it; fairseq's
evaluators themselves build literals only where the plugin is loaded, so a
config the loader never sees runs no code either; and a predictor's task is
always ``vocab_prediction``.  Each test would write its marker file (or build a
value of gigabytes) without the checks."""

import argparse

import pytest
import torch
from helpers import REPO, USER_DIR, run

import fairseq_smallvocab  # noqa: F401  (the checkpoint loader and its checks)
from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError
from fairseq_smallvocab.compat.evaluated_config import (
    EVALUATED_FIELDS,
    EVALUATING_MODULES,
    LiteralOnlyError,
    evaluates_literals_only,
    is_literal,
)

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


# How the code is stored: torch's weights-only loader rebuilds both, and Python's eval takes both.
AS = {"str": str, "bytes": str.encode}


def _edit(src, dest, section, **fields):
    """A copy of checkpoint ``src`` with ``cfg[section]``'s fields set (the
    way an attacker would: the pickle stays allow-listed)."""
    from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals

    with allowed_globals():
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
@pytest.mark.parametrize("kind", sorted(AS))
@pytest.mark.parametrize("command", ["fairseq-generate", "fairseq-interactive"])
def test_decoding_refuses_code_in_the_lstm_config(command, kind, stock, tiny_bin, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _edit(stock["lstm"], tmp_path / "evil.pt", "model", decoder_attention=AS[kind](f"{_code(marker)} or 1"))
    args = [command, tiny_bin, "--user-dir", USER_DIR, "--path", evil, *GENERATE, "--batch-size", "1"]
    if command == "fairseq-interactive":
        args += ["--source-lang", "src", "--target-lang", "tgt"]
    _refused(run(args, check=False, stdin="a b c\n"), evil, "cfg.model.decoder_attention", marker)


@pytest.mark.slow
def test_generate_with_the_plugins_task_refuses_bytes_in_an_lstm_it_trained(predictor, tiny_bin, tmp_path):
    save = tmp_path / "save"
    run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab", "--vocab-predictor",
         predictor, "--small-vocab-size", "60", "--candidates-dir", tmp_path / "cands", *LSTM, *TRAIN,
         "--save-dir", save])
    marker = tmp_path / "PWNED"
    evil = _edit(save / "checkpoint_last.pt", tmp_path / "evil.pt", "model",
                 decoder_attention=f"{_code(marker)} or 1".encode())
    result = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
                  "--path", evil, *GENERATE, "--candidates-dir", tmp_path / "cands"], check=False)
    _refused(result, evil, "cfg.model.decoder_attention", marker)


@pytest.mark.slow
def test_the_hub_interface_refuses_bytes_in_the_lstm_config(stock, tiny_bin, tmp_path):
    from fairseq.models.lstm import LSTMModel

    marker = tmp_path / "PWNED"
    _edit(stock["lstm"], tmp_path / "evil.pt", "model", decoder_attention=f"{_code(marker)} or 1".encode())
    with pytest.raises(CheckpointLoadError, match=r"refused to load .*evil\.pt.*cfg\.model\.decoder_attention = b"):
        LSTMModel.from_pretrained(str(tmp_path), checkpoint_file="evil.pt", data_name_or_path=str(tiny_bin))
    assert not marker.exists()


@pytest.mark.slow
def test_generate_refuses_a_literal_that_would_build_gigabytes(stock, tiny_bin, tmp_path):
    """``[...] * 9999`` is a literal, but 20,000 zeros repeated 9999 times are 1.6 GB (the text alone is
    41 KB); 4,000 repeated are still 40 million elements."""
    for bomb, said in (("[" + "0," * 20000 + "] * 9999", "characters of text"),
                       ("[" + "0," * 4000 + "] * 9999", "builds 39,996,001 elements")):
        evil = _edit(stock["lstm"], tmp_path / "evil.pt", "model", decoder_attention=bomb)
        result = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--path", evil, *GENERATE], check=False)
        assert result.returncode != 0 and f"refused to load {evil}" in result.stderr, result.stderr[-2000:]
        assert "cfg.model.decoder_attention" in result.stderr and said in result.stderr, result.stderr[-2000:]


@pytest.mark.slow
def test_export_refuses_bytes_in_a_multilingual_checkpoints_task_config(tmp_path):
    """CTranslate2's converter sets up the checkpoint's own task (fairseq's multilingual one evaluates
    ``left_pad_source`` with ``eval_bool``): the exporter refuses the file first."""
    pytest.importorskip("ctranslate2")
    from multilingual_helpers import MODEL_ARGS, PAIRS, STOCK, write_three_way

    from smallvocab_tools.data.multilingual_prep import prepare_multilingual

    raw = write_three_way(tmp_path / "raw", size=100)
    splits = {"train": "train", "valid": "valid", "test": "test"}
    prepare_multilingual(raw, tmp_path / "bin", PAIRS, splits, min_count=1, log=lambda m: None)
    run(["fairseq-train", tmp_path / "bin", *STOCK, *MODEL_ARGS, "--max-epoch", "1", "--save-dir", tmp_path / "ml"])
    marker = tmp_path / "PWNED"
    code = f"{_code(marker)} or 1".encode()
    evil = _edit(tmp_path / "ml" / "checkpoint_last.pt", tmp_path / "evil.pt", "task", left_pad_source=code)
    _edit(evil, evil, "model", left_pad_source=code)
    result = run([REPO / "scripts" / "export_ctranslate2.py", "--path", evil, "--data", tmp_path / "bin",
                  "--out", tmp_path / "ct2"], check=False)
    _refused(result, evil, "cfg.task.left_pad_source", marker)
    assert "cfg.model.left_pad_source" in result.stderr and not (tmp_path / "ct2").exists()


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


@pytest.mark.parametrize("kind", sorted(AS))
@pytest.mark.parametrize("shape", ["namespace", "dict", "legacy-args"])
def test_the_loader_refuses_code_in_every_config_shape(shape, kind, tmp_path):
    """fairseq's checkpoint loader (what -generate, -interactive, -train and
    the hub interface call) refuses such a file whatever shape its config
    has: argparse-configured models pickle a Namespace, dataclass ones a
    dict, legacy checkpoints an ``args`` Namespace."""
    from fairseq import checkpoint_utils

    marker = tmp_path / "PWNED"
    code = AS[kind](f"{_code(marker)} or [10]")
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
        "[1] * 2 * 99999", "print(1) + [1]", "[" + "0," * 4000 + "] * 9999", "[" + "0," * 20000 + "]",
        "[(512, 3)] * 3334", "[" * 100000 + "]" * 100000]


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


@pytest.mark.parametrize("kind", sorted(AS))
def test_fairseqs_evaluators_build_literals_only(kind, tmp_path):
    """The second guard: ``fairseq.utils``'s evaluators, whatever calls them, refuse code as ``str`` or
    ``bytes`` and still give what fairseq gives for its own values."""
    from fairseq import utils

    marker = tmp_path / "PWNED"
    code = AS[kind](f"{_code(marker)} or 1")
    with pytest.raises(LiteralOnlyError, match="nothing ran"):
        utils.eval_bool(code)
    if kind == "str":  # (eval_str_list and eval_str_dict evaluate only a str)
        for evaluate in (utils.eval_str_list, utils.eval_str_dict):
            with pytest.raises(LiteralOnlyError, match="nothing ran"):
                evaluate(code)
    assert not marker.exists()
    assert utils.eval_bool("True") is True and utils.eval_bool("0") is False and utils.eval_bool(None, True) is True
    assert utils.eval_bool(True) is False  # as fairseq: eval(True) is a TypeError, which gives the default
    assert utils.eval_str_list("10000,50000", type=int) == [10000, 50000]
    assert utils.eval_str_list([1, 2]) == [1.0, 2.0] and utils.eval_str_list(3) == [3.0]
    assert utils.eval_str_dict("{'main': ('src', 'tgt')}") == {"main": ("src", "tgt")}
    with pytest.raises(LiteralOnlyError, match="builds 50,001 elements"):
        utils.eval_str_list("[(1, 2, 3, 4)] * 10000")


def test_a_model_built_in_python_runs_no_code_from_its_config(tmp_path):
    """A config the checkpoint loader never sees (built in Python): fairseq's lstm (``eval_bool``) and fconv
    (a bare ``eval`` of its layer spec) refuse code in it, and fconv still builds from its own default."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq.models.fconv import FConvModel, base_architecture
    from fairseq.models.lstm import LSTMModel

    marker = tmp_path / "PWNED"
    words = Dictionary()
    for word in "a b c".split():
        words.add_symbol(word)
    task = SimpleNamespace(source_dictionary=words, target_dictionary=words)
    lstm = argparse.Namespace(arch="lstm", decoder_attention=f"{_code(marker)} or 1".encode())
    with pytest.raises(LiteralOnlyError, match="type bytes"):
        LSTMModel.build_model(lstm, task)
    fconv = argparse.Namespace(arch="fconv", encoder_layers=f"{_code(marker)} or [(32, 3)]")
    with pytest.raises(LiteralOnlyError, match="Python code"):
        FConvModel.build_model(fconv, task)
    assert not marker.exists()
    stock = argparse.Namespace(arch="fconv", max_source_positions=64, max_target_positions=64)
    base_architecture(stock)  # its layer specs: "[(512, 3)] * 20"
    assert len(FConvModel.build_model(stock, task).encoder.convolutions) == 20


def test_every_module_that_evaluates_a_config_value_evaluates_literals_only():
    """Searched in the installed fairseq's sources (its examples aside, which are not imported): every
    module that calls ``eval`` itself is given ``literal_eval`` when the plugin is imported."""
    import importlib
    import os
    import re

    import fairseq

    root = os.path.dirname(fairseq.__file__)
    calling = set()
    for folder, _, files in os.walk(root):
        if os.path.relpath(folder, root).split(os.sep)[0] == "examples":
            continue
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    if re.search(r"(?<![\w.])eval\(", f.read()):
                        module = os.path.relpath(os.path.join(folder, name[:-3]), os.path.dirname(root))
                        calling.add(module.replace(os.sep, "."))
    assert {"fairseq.utils", "fairseq.models.fconv", "fairseq.optim.adam"} <= calling  # it searches
    # codedataset evaluates the lines of its data files, not a config value
    assert calling - {"fairseq.data.codedataset"} <= {"fairseq.utils", *EVALUATING_MODULES}, sorted(calling)
    for name in ("fairseq.utils", *EVALUATING_MODULES):
        assert evaluates_literals_only(importlib.import_module(name)), name


@pytest.mark.parametrize("section, field, value, reason", [
    ("task", "eval_bleu_args", "__import__('os')", "not JSON"),
    ("task", "eval_bleu_detok_args", '["moses"]', "JSON, but not an object"),
    ("task", "eval_bleu_args", 7, "a value of type int"),
    ("model", "encoder_layers_to_keep", "0,x", "text that is not integers"),
    ("model", "decoder_layers_to_keep", "0.5", "text that is not integers"),
    ("optimization", "lr", "__import__('os').getcwd() or 1", "text that is not numbers"),
    ("optimization", "update_freq", ["1"], "a value of type list"),
])
def test_a_parsed_field_of_another_form_is_refused_naming_the_file_and_the_field(tmp_path, section, field, value,
                                                                                   reason):
    """Fields fairseq parses (json.loads, int(), float()) rather than evaluates: a value of another form would fail
    deep inside fairseq (JSONDecodeError, int(), ast.BoolOp) naming neither; the loader names both."""
    from fairseq_smallvocab.compat.checkpoint_loading import load_checkpoint_file  # fairseq's torch.load

    path = tmp_path / "ckpt.pt"
    cfg = {"task": {"eval_bleu_args": '{"beam": 4}'}, "model": {"encoder_layers_to_keep": None},
           "optimization": {"lr": [0.001], "update_freq": [1]}}
    torch.save({"cfg": cfg, "model": {}}, path)
    assert "cfg" in load_checkpoint_file(str(path))  # fairseq's own forms load
    cfg[section][field] = value
    torch.save({"cfg": cfg, "model": {}}, path)
    with pytest.raises(CheckpointLoadError) as err:
        load_checkpoint_file(str(path))
    assert f"refused to load {path}" in str(err.value) and f"cfg.{section}.{field} = " in str(err.value)
    assert reason in str(err.value)


@pytest.mark.parametrize("field, value", [
    ("lr", "0.0005"), ("lr", "0.25,0.5"), ("lr", [1e-3, 5e-4]), ("lr", 0.1), ("update_freq", "1"),
    ("update_freq", [2, 4]), ("eval_bleu_args", None), ("eval_bleu_args", "{}"), ("encoder_layers_to_keep", "0,2"),
    ("decoder_layers_to_keep", ""), ("eval_bleu_detok_args", '{"moses": 1}'),
])
def test_the_forms_fairseq_writes_in_parsed_fields_pass(field, value):
    import argparse as ap

    from fairseq_smallvocab.compat.evaluated_config import unsafe_config_message

    assert unsafe_config_message({"args": ap.Namespace(**{field: value})}, "x.pt") is None
    assert unsafe_config_message({"cfg": {"section": {field: value}}}, "x.pt") is None
