"""Config fields that fairseq 0.12 parses rather than evaluates when it builds a model, task or optimizer from
a checkpoint (``json.loads``, ``int()``, ``float()``), and those the plugin's task records in a model's config
and reads with ``int()`` (``models/recorded.py``): a value of another form, injected into a checkpoint, fails
deep inside fairseq or the task with an error (JSONDecodeError, int(), ast.BoolOp, a K of 1 from True) that
names neither the file nor the field.  ``PARSED_FIELDS`` maps each to the check of its form, which
``evaluated_config.unsafe_fields`` runs beside the evaluated fields' checks, so that the loader refuses such a
file naming both, and why."""

import ast
import json
import reprlib
from collections.abc import Sequence
from typing import Optional

MAX_TEXT = 10_000  # characters of a parsed string (as of an evaluated one)
MAX_ELEMENTS = 10_000  # numbers in a parsed list
_JSON_OBJECT = "a JSON object as text, e.g. '{\"beam\": 4}'"


def _why_not_json_object(value) -> Optional[str]:
    """``eval_bleu_args`` and its kin: None, or text that is a JSON object (``json.loads``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"a value of type {type(value).__name__} (fairseq writes {_JSON_OBJECT} there)"
    if len(value) > MAX_TEXT:
        return f"{len(value):,} characters of text (at most {MAX_TEXT:,})"
    try:
        parsed = json.loads(value)
    except ValueError:
        return f"not JSON (fairseq writes {_JSON_OBJECT} there)"
    return None if isinstance(parsed, dict) else f"JSON, but not an object (fairseq writes {_JSON_OBJECT} there)"


def _why_not_a_number(value, kind, name: str) -> Optional[str]:
    """Why ``value`` is not one number of ``kind`` (int, or float which takes ints too), None where it is."""
    if isinstance(value, bool):
        return f"a boolean ({value}): booleans are not accepted where fairseq writes {name}"
    if isinstance(value, int) or kind is float and isinstance(value, float):
        return None
    if isinstance(value, float):
        return f"a float ({value!r}), not an integer"
    return f"a value of type {type(value).__name__}"


def _why_not_number_values(value, kind, name: str) -> Optional[str]:
    """Why ``value`` is neither a number of ``kind`` nor a list or tuple of at most ``MAX_ELEMENTS`` of them, None
    where it is one."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes, bytearray)):
        reason = _why_not_a_number(value, kind, name)
        if reason is not None and reason.startswith("a value of type"):
            reason += f" (fairseq writes {name} or a list of them there)"
        return reason
    kind_of = type(value).__name__
    if len(value) > MAX_ELEMENTS:
        return f"a {kind_of} of {len(value):,} elements, more than the {MAX_ELEMENTS:,} accepted"
    for i, item in enumerate(value):
        reason = _why_not_a_number(item, kind, name)
        if reason is not None and reason.startswith("a value of type"):
            reason += f" ({reprlib.repr(item)}; fairseq writes {name} there)"
        if reason is not None:
            return f"a value of type {kind_of} whose item {i} is {reason}"
    return None


def _why_not_numbers(kind):
    """``lr``, ``update_freq``, ``*layers_to_keep``: None, numbers, lists of numbers, or text of them (fairseq
    evaluates or splits the text: a literal or comma-separated numbers)."""
    name = "integers" if kind is int else "numbers"

    def why(value) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, str):
            return _why_not_number_values(value, kind, name)
        if len(value) > MAX_TEXT:
            return f"{len(value):,} characters of text (at most {MAX_TEXT:,})"
        if not value.strip():
            return None  # empty: none (fairseq tests the text for truth first)
        try:
            parsed = ast.literal_eval(value.strip())
        except Exception:  # SyntaxError, ValueError (a name, a call: code), RecursionError
            parsed = None
        if parsed is None:
            return f"text that is not {name} (fairseq writes {name}, or a comma-separated list of them, there)"
        reason = _why_not_number_values(parsed, kind, name)
        return None if reason is None else f"text that is not {name}: it reads as {reason}"

    return why


def _why_not_recorded_integer(value) -> Optional[str]:
    """``trained_small_vocab_size`` and the dictionary fingerprints, which the plugin's task records in a model's
    config (``models/recorded.py``) and reads with int() when it decodes: None, or an integer >= 0 (a boolean was
    read as K = 1, or as another dictionary; a list failed in int())."""
    if value is None:
        return None
    if isinstance(value, bool):
        return f"a boolean ({value}): booleans are not accepted where the plugin's task records an integer"
    if not isinstance(value, int):
        return f"a value of type {type(value).__name__} (the plugin's task records an integer >= 0 there)"
    return None if value >= 0 else f"{value}, below 0 (the plugin's task records an integer >= 0 there)"


PARSED_FIELDS = {
    "eval_bleu_args": _why_not_json_object, "eval_bleu_detok_args": _why_not_json_object,
    "eval_tokenized_bleu_args": _why_not_json_object,
    "lr": _why_not_numbers(float), "update_freq": _why_not_numbers(int),
    "encoder_layers_to_keep": _why_not_numbers(int), "decoder_layers_to_keep": _why_not_numbers(int),
    "layers_to_keep": _why_not_numbers(int),
    "trained_small_vocab_size": _why_not_recorded_integer, "source_dict_fingerprint": _why_not_recorded_integer,
    "target_dict_fingerprint": _why_not_recorded_integer,
}

