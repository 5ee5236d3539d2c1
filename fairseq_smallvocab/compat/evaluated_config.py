"""No code from a config value that fairseq evaluates.

``weights_only=True`` (``checkpoint_loading.py``) stops a checkpoint's pickle
from running code, but fairseq 0.12 then *evaluates* some of the config
values it unpickled while it builds the model or task: ``utils.eval_bool``,
``eval_str_list`` and ``eval_str_dict`` call Python's ``eval``, and so do
some models directly (``fconv``'s layer specs, wav2vec's conv layers...).
``eval`` takes ``bytes`` as well as ``str``, and torch's weights-only
unpickler rebuilds both: a checkpoint whose ``cfg.model.decoder_attention``
is ``"__import__('os').system(...) or '1'"`` (or the same as ``bytes``) would
run that command when ``lstm`` builds its decoder.

fairseq itself only ever writes literals there (``'1'``, ``'True'``,
``'10000,50000'``, booleans; its layer-spec defaults also repeat literal
lists, as in ``'[(512, 3)] * 20'``), so two guards, each enough alone:

* **The checkpoint's config** (``unsafe_config_message``, called by
  ``checkpoint_loading.py`` on every file fairseq loads): every field that
  fairseq 0.12 evaluates (``EVALUATED_FIELDS``, found by searching its
  sources for ``eval(``, ``eval_bool``, ``eval_str_list`` and
  ``eval_str_dict``) must hold a value of a type fairseq writes (``str``,
  ``bool``, a number, ``None``, or lists, tuples and dicts of those), and a
  string there must be a literal (``why_not_literal``).  Anything else
  (``bytes``, other objects, code) is refused before fairseq sees the
  config, naming the file and the field.  So is a field that fairseq parses
  (``parsed_config.PARSED_FIELDS``: JSON text, numbers) holding another form, which would
  otherwise fail deep inside fairseq naming neither.
* **fairseq's evaluators** (``install``): where the plugin is loaded, the
  ``eval`` that ``fairseq.utils`` (``eval_bool``, ``eval_str_list``,
  ``eval_str_dict``) and the models, optimizers and criteria that evaluate
  config values directly (``EVALUATING_MODULES``) call is ``literal_eval``,
  which builds a literal and nothing else, so a value the first guard does
  not see (a config built in Python, a path that bypasses the loader) still
  runs no code.

A literal is what ``ast.literal_eval`` accepts (booleans, numbers, ``None``,
quoted strings, and tuples, lists and dicts of them), or a sum of literal
lists or tuples, each optionally times a literal integer.  What one may
build is bounded (``MAX_ELEMENTS`` elements, ``MAX_TEXT`` characters of
text; fairseq's own values have a few dozen elements), so that no value
asks for gigabytes: ``'[0] * 9999'`` repeated inside a list would.
"""

import argparse
import ast
import builtins
import importlib
import reprlib
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Optional

from fairseq_smallvocab.compat.parsed_config import PARSED_FIELDS

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
    # fairseq/examples (loadable with --user-dir): laser, speech_recognition's vggtransformer and w2l encoder
    "decoder_zero_init", "vggblock_enc_config", "transformer_enc_config", "transformer_dec_config",
    "conv_enc_config", "conv_dec_config", "transformer_context", "transformer_sampling",
    # generation (a checkpoint's cfg.generation / common_eval)
    "model_overrides",
    # optimizers
    "adam_betas", "adamax_betas", "adafactor_eps", "lamb_betas",
    # pipeline model parallel
    "pipeline_balance", "pipeline_devices", "pipeline_encoder_balance", "pipeline_encoder_devices",
    "pipeline_decoder_balance", "pipeline_decoder_devices",
})

# The fairseq modules (besides fairseq.utils) that call ``eval`` on a config
# value themselves; ``install`` gives each of them ``literal_eval`` as its
# ``eval``. tests/test_config_code.py searches the installed fairseq for more.
EVALUATING_MODULES = (
    "fairseq.models.fconv", "fairseq.models.fconv_lm", "fairseq.models.fconv_self_att",
    "fairseq.models.lightconv_lm", "fairseq.models.transformer_lm", "fairseq.models.wav2vec.wav2vec",
    "fairseq.models.wav2vec.wav2vec2", "fairseq.models.hubert.hubert",
    "fairseq.models.speech_to_text.s2t_wav_transformer", "fairseq.data.audio.raw_audio_dataset",
    "fairseq.criterions.ctc", "fairseq.optim.adam", "fairseq.optim.cpu_adam", "fairseq.optim.adamax",
    "fairseq.optim.adafactor", "fairseq.optim.fused_lamb",
)

MAX_ELEMENTS = 10_000  # values, lists, tuples and dicts one evaluated value may build
MAX_TEXT = 10_000  # characters of an evaluated string
_MAX_DEPTH = 8  # how deep config sections nest (a model's cfg inside a task's inside cfg)
_EXAMPLES = "True, 1, '10000,50000', [(512, 3)] * 20"


def why_not_literal(text: str) -> Optional[str]:
    """Why fairseq's ``eval`` of ``text`` might do more than build a small
    value (a call, a name lookup, an attribute, a comprehension, or more than
    ``MAX_ELEMENTS`` elements), or None where it only builds one."""
    if len(text) > MAX_TEXT:
        return f"{len(text):,} characters of text (at most {MAX_TEXT:,})"
    if not text.strip():
        return None  # eval('') is a SyntaxError, not code
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except Exception:  # SyntaxError, RecursionError, MemoryError, ValueError (a NUL byte)
        return "not a Python literal (it does not parse as one)"
    size = _sum_size(tree.body)
    if size is None:
        return "Python code, not a literal"
    if size > MAX_ELEMENTS:
        return f"a literal that builds {size:,} elements (at most {MAX_ELEMENTS:,})"
    return None


def is_literal(text: str) -> bool:
    """Whether fairseq's ``eval`` of ``text`` could only build a small value."""
    return why_not_literal(text) is None


def _sum_size(node) -> Optional[int]:
    """How many elements a sum of sequence terms (or one literal) builds; None where it is not one."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        right = _term_size(node.right)
        left = _sum_size(node.left) if right is not None else None
        if left is not None:
            return left + right
    size = _term_size(node)
    return size if size is not None else _literal_size(node)


def _term_size(node) -> Optional[int]:
    """A literal list or tuple, or one times a literal integer >= 0: the elements it builds; else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        times = node.right
        if not (isinstance(node.left, (ast.List, ast.Tuple)) and isinstance(times, ast.Constant)
                and type(times.value) is int and times.value >= 0):
            return None
        size = _literal_size(node.left)
        return None if size is None else (size - 1) * times.value + 1
    return _literal_size(node) if isinstance(node, (ast.List, ast.Tuple)) else None


def _literal_size(node) -> Optional[int]:
    """The elements (every value and container) of a plain literal; None where it is not one."""
    try:
        ast.literal_eval(node)
    except Exception:  # ValueError: a call, a name, an operator; RecursionError: too deep
        return None
    return sum(1 for part in ast.walk(node) if isinstance(part, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)))


def _build(node):
    """The value of a node ``why_not_literal`` accepted (a literal, or a sum of repeated literal sequences)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _build(node.left) + _build(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return ast.literal_eval(node.left) * node.right.value
    return ast.literal_eval(node)


class LiteralOnlyError(ValueError):
    """fairseq was about to evaluate a config value that is not a literal."""


def literal_eval(source, globals=None, locals=None):
    """What fairseq's ``eval`` of a config value becomes where the plugin is
    loaded (``install``): the literal ``source`` holds, built without running
    anything; ``LiteralOnlyError`` for code, a value too large, ``bytes`` or a
    code object; and, as ``eval`` itself, a TypeError for any other type
    (which ``eval_bool`` and ``eval_str_list`` catch to take the value as it
    is)."""
    if isinstance(source, (bytes, bytearray, types.CodeType)):
        raise LiteralOnlyError(
            f"refused to evaluate a config value of type {type(source).__name__} ({_short(source)}): fairseq "
            f"writes only literal strings there ({_EXAMPLES}); nothing ran. If it came from a checkpoint, do not "
            "use the file unless you trust its source.")
    if not isinstance(source, str):
        raise TypeError(f"eval() arg 1 must be a string, bytes or code object, not {type(source).__name__}")
    reason = why_not_literal(source)
    if reason is not None:
        raise LiteralOnlyError(
            f"refused to evaluate the config value {_short(source)}: it is {reason}. fairseq writes only literals "
            f"there ({_EXAMPLES}), and with fairseq-smallvocab loaded only literals are evaluated; nothing ran. "
            "Write a literal into that option.")
    return _build(ast.parse(source.strip(), mode="eval").body)


def install():
    """Give ``fairseq.utils`` and ``EVALUATING_MODULES`` ``literal_eval`` as
    their ``eval`` (a module global, found before the builtin), once at
    import; a module not importable in this fairseq is left out."""
    for name in ("fairseq.utils", *EVALUATING_MODULES):
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except Exception:  # an optional dependency missing (e.g. a speech model's): it cannot evaluate either
            continue
        module.eval = literal_eval


def evaluates_literals_only(module) -> bool:
    """Whether ``module``'s ``eval`` is ``literal_eval`` (``install`` ran on it), not the builtin."""
    return getattr(module, "eval", builtins.eval) is literal_eval


def why_not_allowed(value) -> Optional[str]:
    """Why ``value``, found in an evaluated field, is not what fairseq writes
    there (see the module doc); None where it is.  A string is evaluated, so
    it must be a literal; the values inside a list, tuple or dict are not
    (fairseq's evaluators pass a container through as it is), so they need
    only be of the types fairseq writes."""
    if isinstance(value, str):
        return why_not_literal(value)
    size = 0
    pending = [value]
    while pending:
        item = pending.pop()
        size += 1
        if size > MAX_ELEMENTS:
            return f"a value of more than {MAX_ELEMENTS:,} elements"
        if isinstance(item, Mapping):
            try:
                pending.extend(item.keys())
                pending.extend(item.values())
            except Exception:  # an omegaconf node that cannot resolve an interpolation: nothing evaluated
                continue
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes, bytearray)):
            pending.extend(item)
        elif item is not None and not isinstance(item, (str, bool, int, float)):
            return f"a value of type {type(item).__name__} (fairseq writes str, bool, numbers or None there)"
    return None


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
    """(dotted name, value, why) of each evaluated field in ``config`` (a
    dict, ``argparse.Namespace`` or omegaconf container, nested) that does
    not hold what fairseq writes there."""
    if depth > _MAX_DEPTH:
        return []
    found = []
    for key, value in _fields(config):
        name = f"{prefix}{key}"
        if key in EVALUATED_FIELDS or key in PARSED_FIELDS:
            reason = why_not_allowed(value) if key in EVALUATED_FIELDS else PARSED_FIELDS[key](value)
            if reason is not None:
                found.append((name, value, reason))
        elif isinstance(value, (argparse.Namespace, Mapping)):
            found.extend(unsafe_fields(value, name + ".", depth + 1))
    return found


def unsafe_config_message(state, name):
    """The refusal, naming ``name`` (the file) and each field, when the
    config of a loaded checkpoint ``state`` (``cfg``, and ``args`` of legacy
    checkpoints) holds anything but a literal where fairseq evaluates a
    value; else None."""
    if not isinstance(state, Mapping):
        return None
    found = []
    for key in ("cfg", "args"):
        if key in state:
            found.extend(unsafe_fields(state[key], key + "."))
    if not found:
        return None
    shown = "; ".join(f"{field} = {_short(value)}: {reason}" for field, value, reason in found)
    return (f"refused to load {name}: its config holds what fairseq would evaluate or parse and does not write there "
            f"({shown}). fairseq writes only small literals there ({_EXAMPLES}); nothing in the file ran. "
            "Do not use this file unless you trust its source; if you do, write a literal into that field "
            "(within fairseq_smallvocab.compat.checkpoint_loading.allowed_globals(): torch.load(path), set the "
            "field, torch.save).")


def _short(value, limit: int = 80) -> str:
    """``value``'s repr, cut to ``limit`` characters (without building the whole repr of a large value)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 100
