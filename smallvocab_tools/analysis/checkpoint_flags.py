"""The flags that rebuild a checkpoint's model (``scripts/checkpoint_flags.py``).

``--finetune-from-model`` and ``--restore-file`` load a checkpoint strictly into the model that the command line
builds, so that line must give the checkpoint's architecture: the arch and every model flag whose value differs
from what that arch sets.  Where they differ fairseq says only that the architectures do not match, with a
state-dict dump.  This reads the model config a fairseq checkpoint keeps (with the plugin's checkpoint loader),
asks fairseq's registry for the arch's own values (its model's flags, filled by the arch's function), and prints
the flags that differ, as one line to paste."""

import argparse
import shlex
import sys
from typing import List


class FlagsError(ValueError):
    """A checkpoint whose flags cannot be read, with the reason."""


def _model_config(path):
    import fairseq_smallvocab  # noqa: F401  (the plugin's archs, and torch >= 2.6 reading fairseq checkpoints)
    from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError, checkpoint_configs

    try:
        model, _ = checkpoint_configs(path)
    except (FileNotFoundError, CheckpointLoadError) as err:
        raise FlagsError(str(err)) from None
    if model is None:
        raise FlagsError(f"{path} holds no model config (not a fairseq checkpoint?)")
    return model


def _value(model, name):
    try:
        return getattr(model, name)
    except AttributeError:
        return model.get(name) if hasattr(model, "get") else None


def _arch_values(arch, given: dict) -> argparse.Namespace:
    """What the arch's function sets, the flags in ``given`` set first (so that a value it derives from another,
    e.g. the decoder's output dim from its embedding dim, follows the checkpoint's)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    values = argparse.Namespace(**given)
    ARCH_CONFIG_REGISTRY[arch](values)
    return values


def architecture_flags(path) -> List[str]:
    """``--arch ARCH`` and the model flags of checkpoint ``path`` that differ from what ARCH sets (or, where it
    sets nothing, from what the model fills in when it is built: its module's ``DEFAULT_<FLAG>``)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model = _model_config(path)
    arch = _value(model, "arch") or _value(model, "_name")
    if arch not in ARCH_MODEL_REGISTRY:
        raise FlagsError(f"{path}: arch {arch!r} is not registered (a model of another plugin? give its --user-dir "
                         "the way fairseq-train does)")
    cls = ARCH_MODEL_REGISTRY[arch]
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_args(parser)
    parser_defaults = parser.parse_args([])
    module = sys.modules[cls.__module__]
    flags, given = ["--arch", arch], {}
    for action in parser._actions:  # in the parser's order, which puts a derived flag after what it derives from
        if not action.option_strings or action.dest in ("arch", "_name"):
            continue
        value = _value(model, action.dest)
        default = getattr(_arch_values(arch, given), action.dest, None)
        if default is None:
            default = getattr(parser_defaults, action.dest, None)
        if default is None:
            default = getattr(module, f"DEFAULT_{action.dest.upper()}", None)
        if value is None or value == default:
            continue
        given[action.dest] = value
        option = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        if isinstance(action, argparse._StoreTrueAction):
            if value:
                flags.append(option)
            continue  # False where the arch sets True: no flag can say so (fairseq's own archs have none)
        flags += [option, " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)]
    return flags


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print the flags that rebuild a fairseq checkpoint's model: its "
                                                 "--arch and each model flag that differs from what the arch sets, "
                                                 "for --finetune-from-model or --restore-file.")
    parser.add_argument("path", help="a fairseq checkpoint (.pt)")
    args = parser.parse_args(argv)
    try:
        flags = architecture_flags(args.path)
    except FlagsError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"the model flags of {args.path} (add them to the fairseq-train command that fine-tunes it):",
          file=sys.stderr)
    print(shlex.join(flags))
