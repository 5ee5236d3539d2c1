"""Config fields that fairseq 0.12 parses rather than evaluates when it builds a model, task or optimizer from
a checkpoint (``json.loads``, ``int()``, ``float()``): a value of another form, injected into a checkpoint,
fails deep inside fairseq with an error (JSONDecodeError, int(), ast.BoolOp) that names neither the file nor
the field.  ``PARSED_FIELDS`` maps each to the check of its form, which ``evaluated_config.unsafe_fields`` runs
beside the evaluated fields' checks, so that the loader refuses such a file naming both."""

import ast
import json
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


def _numbers(value, kind) -> bool:
    """Whether ``value`` is a number of ``kind`` (int, or float which takes ints too), or a list or tuple of them."""
    types_ = (int,) if kind is int else (int, float)
    items = value if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)) else [value]
    return len(items) <= MAX_ELEMENTS and all(isinstance(x, types_) and not isinstance(x, bool) for x in items)


def _why_not_numbers(kind):
    """``lr``, ``update_freq``, ``*layers_to_keep``: None, numbers, lists of numbers, or text of them (fairseq
    evaluates or splits the text: a literal or comma-separated numbers)."""
    name = "integers" if kind is int else "numbers"

    def why(value) -> Optional[str]:
        if value is None or _numbers(value, kind):
            return None
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                return f"{len(value):,} characters of text (at most {MAX_TEXT:,})"
            if not value.strip():
                return None  # empty: none (fairseq tests the text for truth first)
            try:
                parsed = ast.literal_eval(value.strip())
            except Exception:  # SyntaxError, ValueError (a name, a call: code), RecursionError
                parsed = None
            if parsed is not None and _numbers(parsed, kind):
                return None
            return f"text that is not {name} (fairseq writes {name}, or a comma-separated list of them, there)"
        return f"a value of type {type(value).__name__} (fairseq writes {name} or a list of them there)"

    return why


PARSED_FIELDS = {
    "eval_bleu_args": _why_not_json_object, "eval_bleu_detok_args": _why_not_json_object,
    "eval_tokenized_bleu_args": _why_not_json_object,
    "lr": _why_not_numbers(float), "update_freq": _why_not_numbers(int),
    "encoder_layers_to_keep": _why_not_numbers(int), "decoder_layers_to_keep": _why_not_numbers(int),
    "layers_to_keep": _why_not_numbers(int),
}

