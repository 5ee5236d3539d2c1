"""What loading the plugin changes in the process, measured: run as a script in a fresh interpreter,

    python tests/plugin_state.py USER_DIR

it imports every module the plugin's import brings in (a first interpreter lists them), takes a snapshot of
fairseq's and torch's modules (every attribute, and every attribute of their classes), torch's allow-list,
Python's warning filters and every logger's filters, level and handlers, loads the plugin as ``--user-dir``
does, takes the snapshot again and prints what differs as JSON: ``fairseq.trainer.Trainer.train_step``,
``fairseq.utils.eval``, ``torch-safe-globals``, ``warnings``, ``logging:NAME``...  (``SMALLVOCAB_COMPAT`` is
read from the environment, as the plugin reads it.)  fairseq-interactive's module is imported first too, as
that command has it.  Left out as registration, not change: the plugin's own new loggers, and the
``NAME_parser`` entries that fairseq's ``import_user_module`` adds to ``fairseq.tasks`` and ``fairseq.models``
for each module of a plugin's ``tasks/`` and ``models/``."""

import argparse
import importlib
import inspect
import json
import logging
import subprocess
import sys
import warnings

ROOTS = ("fairseq", "fairseq_cli", "torch")


def _modules():
    """{name: module} of ROOTS, each module once, under its own name (fairseq.distributed_utils is another name of
    fairseq.distributed.utils)."""
    return {module.__name__: module for name, module in list(sys.modules.items())
            if module is not None and name.split(".")[0] in ROOTS and getattr(module, "__name__", None) == name}


def snapshot():
    import torch

    state = {}
    for name, module in _modules().items():
        for key, value in list(vars(module).items()):
            if key == "__warningregistry__":
                continue
            state[f"{name}.{key}"] = value
            if inspect.isclass(value) and value.__module__ == name:
                for attr, member in list(vars(value).items()):
                    state[f"{name}.{key}.{attr}"] = member
    state["torch-safe-globals"] = tuple(map(repr, torch.serialization.get_safe_globals()))
    state["warnings"] = tuple(map(repr, warnings.filters))
    loggers = dict(logging.Logger.manager.loggerDict, root=logging.getLogger())
    for name, logger in loggers.items():
        if isinstance(logger, logging.Logger):
            state[f"logging:{name}"] = (tuple(logger.filters), logger.level, tuple(logger.handlers), logger.disabled)
    return state


def _registration(key) -> bool:
    """A key that is the plugin's registration with fairseq (see the module doc)."""
    if key.startswith("logging:fairseq_smallvocab"):
        return True
    module, _, attr = key.rpartition(".")
    return module in ("fairseq.tasks", "fairseq.models") and attr.endswith("_parser")


def changed(before, after):
    def same(a, b):
        return a == b if isinstance(a, tuple) and isinstance(b, tuple) else a is b

    return sorted(key for key in set(before) | set(after)
                  if (key not in before or key not in after or not same(before[key], after[key]))
                  and not (key not in before and _registration(key)))


def _plugin_imports(user_dir):
    """The modules of ROOTS that loading the plugin imports (listed by another interpreter, with every patch
    installed)."""
    code = (f"import argparse, sys; from fairseq import utils; "
            f"utils.import_user_module(argparse.Namespace(user_dir={user_dir!r})); "
            f"print('\\n'.join(n for n in sys.modules if n.split('.')[0] in {ROOTS!r}))")
    import os

    env = {key: value for key, value in os.environ.items() if key != "SMALLVOCAB_COMPAT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return out.split()


def main(user_dir):
    for name in [*_plugin_imports(user_dir), "fairseq_cli.interactive"]:
        try:
            importlib.import_module(name)
        except Exception:  # a module that only imports as part of another's import: it is in sys.modules anyway
            pass
    before = snapshot()
    from fairseq import utils

    utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    print(json.dumps(changed(before, snapshot())))


if __name__ == "__main__":
    main(sys.argv[1])
