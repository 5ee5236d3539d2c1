"""Refuse a checkpoint whose config would make fairseq run code.

``weights_only=True`` (``checkpoint_loading.py``) stops a checkpoint's pickle
from running code, but fairseq 0.12 then *evaluates* some of the config
strings it unpickled while it builds the model or task: ``utils.eval_bool``,
``eval_str_list`` and ``eval_str_dict`` call Python's ``eval``, and so do
some models directly (``fconv``'s layer specs, wav2vec's conv layers...).  A
checkpoint whose ``cfg.model.decoder_attention`` is
``"__import__('os').system(...) or '1'"`` runs that command when ``lstm``
builds its decoder, although its pickle is refused.

fairseq itself only ever writes literals there (``'1'``, ``'True'``,
``'10000,50000'``; its layer-spec defaults also repeat literal lists, as in
``'[(512, 3)] * 20'``, see ``_MAX_REPEAT``), so every field that fairseq 0.12 evaluates
(``EVALUATED_FIELDS``, found by searching its sources for ``eval(``,
``eval_bool``, ``eval_str_list`` and ``eval_str_dict``) must hold a literal:
``ast.literal_eval`` accepts it (booleans, numbers, ``None``, quoted strings,
and tuples, lists and dicts of them), or it is a sum of such lists or tuples,
each optionally repeated.  Anything else is refused before fairseq
sees the config, naming the file and the field (``checkpoint_loading.py``
raises it as a ``CheckpointLoadError``).
"""

import argparse
import ast
from collections.abc import Mapping

# Every config field that fairseq 0.12 passes to eval / eval_bool /
# eval_str_list / eval_str_dict when it builds a model, task, criterion or
# optimizer (fairseq/models, tasks, criterions, optim, modules,
# data/multilingual, distributed, model_parallel, examples); the test
# tests/test_config_code.py searches the installed fairseq for more.
EVALUATED_FIELDS = frozenset({
    # models: lstm, lstm_lm, transformer, transformer_lm, lightconv, fconv, fconv_lm, fconv_self_att
    "adaptive_softmax_cutoff", "adaptive_input_cutoff", "decoder_attention", "encoder_attention",
    "encoder_layers", "decoder_layers", "self_attention", "project_input", "gated_attention", "downsample",
    "pretrained", "character_filters", "encoder_kernel_size_list", "decoder_kernel_size_list",
    "encoder_glu", "decoder_glu", "weight_softmax",
    # wav2vec, hubert, speech-to-text, raw audio
    "conv_feature_layers", "conv_aggregator_layers", "feature_encoder_spec",
    # modules/multihead_attention
    "xformers_att_config",
    # tasks: multilingual_translation, online_backtranslation, translation_multi_simple_epoch
    "left_pad_source", "left_pad_target", "extra_data", "extra_lang_pairs", "langtoks", "sampling_weights",
    # criterions/ctc
    "wer_args",
    # fairseq/examples (loadable with --user-dir): laser, speech_recognition's vggtransformer
    "decoder_zero_init", "vggblock_enc_config", "transformer_enc_config", "transformer_dec_config",
    "conv_dec_config", "transformer_context", "transformer_sampling",
    # generation (a checkpoint's cfg.generation / common_eval)
    "model_overrides",
    # optimizers
    "adam_betas", "adamax_betas", "adafactor_eps", "lamb_betas",
    # pipeline model parallel
    "pipeline_balance", "pipeline_devices", "pipeline_encoder_balance", "pipeline_encoder_devices",
    "pipeline_decoder_balance", "pipeline_decoder_devices",
})

# fairseq's own defaults for some layer specs repeat a literal sequence:
# "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] * 2", "((256, 3, True),) * 4".
# A sum of literal lists or tuples, each optionally times a literal integer
# (at most _MAX_REPEAT: no sequence too large to build), runs no code.
_MAX_REPEAT = 9999
_MAX_DEPTH = 8  # how deep config sections nest (a model's cfg inside a task's inside cfg)


def is_literal(text: str) -> bool:
    """Whether fairseq's ``eval`` of ``text`` could only build a value (no
    call, no name lookup, no attribute, no comprehension)."""
    if not text.strip():
        return True  # eval('') is a SyntaxError, not code
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except Exception:  # SyntaxError, RecursionError, MemoryError, ValueError (a NUL byte)
        return False
    return _literal_sum(tree.body)


def _literal_sum(node) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_sequence_term(node.right):
        return _literal_sum(node.left)
    return _is_sequence_term(node) or _literal(node)


def _is_sequence_term(node) -> bool:
    """A literal list or tuple, or one times a small literal integer."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        times = node.right
        return (isinstance(node.left, (ast.List, ast.Tuple)) and isinstance(times, ast.Constant)
                and type(times.value) is int and 0 <= times.value <= _MAX_REPEAT and _literal(node.left))
    return isinstance(node, (ast.List, ast.Tuple)) and _literal(node)


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except Exception:  # ValueError: a call, a name, an operator
        return False
    return True


def _fields(node):
    if isinstance(node, argparse.Namespace):
        return vars(node).items()
    if isinstance(node, Mapping):
        try:
            return node.items()
        except Exception:  # an omegaconf node that cannot resolve an interpolation: nothing evaluated
            return ()
    return ()


def unsafe_fields(config, prefix: str = "", depth: int = 0):
    """(dotted name, value) of each evaluated field in ``config`` (a dict,
    ``argparse.Namespace`` or omegaconf container, nested) that is not a
    literal."""
    if depth > _MAX_DEPTH:
        return []
    found = []
    for key, value in _fields(config):
        name = f"{prefix}{key}"
        if isinstance(value, str):
            if key in EVALUATED_FIELDS and not is_literal(value):
                found.append((name, value))
        elif isinstance(value, (argparse.Namespace, Mapping)):
            found.extend(unsafe_fields(value, name + ".", depth + 1))
    return found


def unsafe_config_message(state, name):
    """The refusal, naming ``name`` (the file) and each field, when the
    config of a loaded checkpoint ``state`` (``cfg``, and ``args`` of legacy
    checkpoints) holds code where fairseq evaluates a string; else None."""
    if not isinstance(state, Mapping):
        return None
    found = []
    for key in ("cfg", "args"):
        if key in state:
            found.extend(unsafe_fields(state[key], key + "."))
    if not found:
        return None
    shown = "; ".join(f"{field} = {_short(value)}" for field, value in found)
    return (f"refused to load {name}: its config holds Python code where fairseq evaluates a string ({shown}). "
            "fairseq writes only literals there (True, 1, '10000,50000', [(512, 3)]); nothing in the file ran. "
            "Do not use this file unless you trust its source; if you do, write a literal into that field "
            "(torch.load(..., weights_only=True), set the field, torch.save).")


def _short(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
