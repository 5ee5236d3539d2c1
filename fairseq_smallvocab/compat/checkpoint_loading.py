"""Let torch >= 2.6 load fairseq checkpoints with ``weights_only=True``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``: its
unpickler only rebuilds tensors, plain containers and the classes registered
with ``torch.serialization.add_safe_globals``.  fairseq 0.12 calls
``torch.load(f, map_location=...)`` without the argument, and its checkpoints
pickle a few non-tensor objects, so stock ``fairseq-generate --path ckpt.pt``
fails with "Unsupported global: GLOBAL argparse.Namespace".

Rather than turning ``weights_only`` off (which would let a checkpoint run
arbitrary code), this module allow-lists exactly the types fairseq checkpoints
hold, found by ``torch.serialization.get_unsafe_globals_in_checkpoint`` on
checkpoints written by ``fairseq-train`` (see tests/test_checkpoint_compat.py):

* ``argparse.Namespace``: ``cfg["model"]`` of every architecture registered
  with ``add_args`` (``lstm``, ``transformer``, ...), and ``args`` of legacy
  checkpoints;
* numpy arrays, dtypes and scalars: the metrics state in ``extra_state``
  (for instance the sacrebleu counts that ``--eval-bleu`` logs);
* omegaconf's ``DictConfig``/``ListConfig`` with their node and metadata
  classes, and the builtin types they record as type tags: checkpoints of
  fairseq versions that pickled the config object itself.

fairseq's distributed training also goes through ``torch.load``: rank 0
broadcasts the loaded checkpoint state to the other workers
(``distributed_utils.broadcast_object``), pickled with its tensors replaced by
``fairseq.distributed.utils._TensorPlaceholder`` (an index), which is on the
list too; without it every multi-process run that resumes or fine-tunes from a
checkpoint fails on the non-zero ranks.

No function that executes code (``os.system``, ``eval``, ``getattr``...) is on
the list; everything else is still refused.  What the pickle holds may still
be code that fairseq evaluates (a config value it passes to ``eval``): a
loaded checkpoint's config is checked for that too (``evaluated_config.py``).

The allow-list is scoped: it holds for fairseq's own loads only (``allowed_globals``, torch's
``safe_globals`` context), never for other ``torch.load`` calls in the process, and where the user had added
an entry to torch's global list, it stays there.  The plugin routes fairseq's loads through it:
``fairseq.checkpoint_utils`` (``load_checkpoint_to_cpu``, used by fairseq-train, -generate, -interactive and the
hub interface; ``load_ema_from_checkpoint``) sees torch through ``TorchWithLoad(load_checkpoint_file)``, which is
torch itself except for ``load``
(``load_checkpoint_file``: ``weights_only=True`` passed explicitly, as torch 2.4 and 2.5 still default to
False), and ``fairseq.distributed.utils`` (``broadcast_object``: the workers' copy of rank 0's loaded state, and
the other objects fairseq's distributed training broadcasts) through one whose ``load`` only allows the list.
The list is torch's process-wide one for the duration of such a load.  The plugin's own tools read checkpoints
with ``read_checkpoint``, the same loader whether or not the patch is installed (``SMALLVOCAB_COMPAT``).

``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch's switch for files you trust) is honoured as torch honours it
where no ``weights_only`` is passed: fairseq's checkpoints then load with ``weights_only=False``, said in one
warning.  The hook turns a truncated or foreign file and a refused global into errors that name the file and
say what to do; each is also an instance of the error torch raised (``pickle.UnpicklingError``, ``EOFError``,
``RuntimeError``...), which is its ``__cause__``, so code that catches those still catches it.  torch's own
messages name neither the file nor, for a refused global, a safe way on (its advice includes loading with
``weights_only=False``), and fairseq-train's resume (``compat/train_checkpoints.py``) and the predictor loader
catch ``CheckpointLoadError`` to name the newest readable checkpoint.
"""

import argparse
import collections
import contextlib
import os
import pickle
import re
import typing
import warnings
import zipfile

import torch

from fairseq_smallvocab.compat.evaluated_config import unsafe_config_message


def _numpy_globals():
    """numpy's array/scalar reconstructors under both of their pickle names
    (numpy 1.x writes ``numpy.core``, numpy 2.x ``numpy._core``), ndarray, and
    dtype with its per-type classes (numpy >= 1.25)."""
    import numpy as np

    try:  # numpy >= 2
        from numpy._core import multiarray
    except ImportError:
        from numpy.core import multiarray
    entries = [np.ndarray, np.dtype]
    for name in ("_reconstruct", "scalar"):
        fn = getattr(multiarray, name)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            entries.append((fn, f"{module}.{name}"))
    for code in ("?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "g"):
        dtype_class = type(np.dtype(code))
        if dtype_class is not np.dtype:
            entries.append(dtype_class)
    return entries


def _omegaconf_globals():
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    # typing.Any, dict, list and int are the ref/key/element type tags that
    # omegaconf's metadata stores; collections.defaultdict holds its flags.
    return [DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode, typing.Any,
            dict, list, int, collections.defaultdict]


def _fairseq_globals():
    from fairseq.distributed.utils import _TensorPlaceholder

    return [_TensorPlaceholder]


def fairseq_checkpoint_globals():
    """The allow-list: every global a fairseq 0.x checkpoint (or fairseq's
    broadcast of one) may reference."""
    return [argparse.Namespace] + _numpy_globals() + _omegaconf_globals() + _fairseq_globals()


@contextlib.contextmanager
def allowed_globals():
    """Within it, torch's weights-only unpickler also allows ``fairseq_checkpoint_globals()``; on leaving, torch's
    list is what it was (entries the user had added stay)."""
    present = set(torch.serialization.get_safe_globals())
    missing = [entry for entry in fairseq_checkpoint_globals() if entry not in present]
    if hasattr(torch.serialization, "safe_globals"):  # torch >= 2.5
        with torch.serialization.safe_globals(missing):
            yield
        return
    torch.serialization.add_safe_globals(missing)  # torch 2.4: no context of its own
    try:
        yield
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(list(present))


class CheckpointLoadError(RuntimeError):
    """A checkpoint file that cannot be loaded, with the file and the fix."""


_ERROR_CLASSES = {}


def _load_error(message: str, err: BaseException) -> CheckpointLoadError:
    """A ``CheckpointLoadError`` saying ``message`` that is also of ``err``'s class (raise it ``from err``), so that
    code catching what torch raised (``pickle.UnpicklingError``, ``EOFError``...) still catches it."""
    base = type(err)
    if base not in _ERROR_CLASSES:
        def init(self, text):  # one message, whatever the arguments the base wants (UnicodeDecodeError's five)
            BaseException.__init__(self, text)

        try:
            cls = type(f"CheckpointLoadError_{base.__name__}", (CheckpointLoadError, base),
                       {"__module__": __name__, "__init__": init, "__str__": BaseException.__str__})
            cls(message)
        except TypeError:  # a class that cannot be mixed in
            cls = CheckpointLoadError
        _ERROR_CLASSES[base] = cls
    return _ERROR_CLASSES[base](message)


TRUE_VALUES = ("1", "y", "yes", "true")  # what torch reads as set in its TORCH_FORCE_* variables
_warned_unsafe = False


def _on(name) -> bool:
    return os.getenv(name, "0").lower() in TRUE_VALUES


def _warn_unsafe_once():
    global _warned_unsafe
    if not _warned_unsafe:
        _warned_unsafe = True
        warnings.warn("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set: fairseq checkpoints are loaded with "
                      "weights_only=False, so any type in them loads and a checkpoint can run code while it loads. "
                      "Use it only for checkpoints you trust; unset it to load with the allow-list.", UserWarning,
                      stacklevel=3)


def read_checkpoint(path, **kwargs):
    """fairseq's ``load_checkpoint_to_cpu(path)`` (its upgrades of old checkpoints included) through
    ``load_checkpoint_file``, whether or not the ``checkpoint_loading`` patch is installed: how the plugin's own
    tools and tasks read a checkpoint.  Where the patch is left out, fairseq sees the loader for this call only."""
    from fairseq import checkpoint_utils

    seen = checkpoint_utils.torch
    if not isinstance(seen, TorchWithLoad):
        checkpoint_utils.torch = TorchWithLoad(load_checkpoint_file)
    try:
        return checkpoint_utils.load_checkpoint_to_cpu(str(path), **kwargs)
    finally:
        checkpoint_utils.torch = seen


def checkpoint_configs(path):
    """(model config, task config) of a fairseq checkpoint, read with fairseq's loader (``read_checkpoint``):
    the model config is the argparse Namespace of a checkpoint written before fairseq's
    dataclass configs, whose task config is then None.  A missing file raises ``FileNotFoundError``, one that
    cannot be read safely ``CheckpointLoadError``; both say which file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    state = read_checkpoint(path)
    cfg = state.get("cfg")
    return (cfg.get("model") if cfg else None) or state.get("args"), (cfg.get("task") if cfg else None)


def load_checkpoint_file(f, *args, **kwargs):
    """``torch.load`` as fairseq's checkpoint loading calls it: with ``weights_only=True`` and the allow-list
    (``weights_only=False`` where ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set), and with errors that name the
    file."""
    name = getattr(f, "name", f)
    forced_off = _on("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")  # torch's switch, read as torch reads it
    if forced_off and _on("TORCH_FORCE_WEIGHTS_ONLY_LOAD"):
        return torch.load(f, *args, **kwargs)  # torch refuses the pair itself, and its error says so
    if forced_off:
        _warn_unsafe_once()
    kwargs["weights_only"] = not forced_off
    try:
        with allowed_globals():
            state = torch.load(f, *args, **kwargs)
    except pickle.UnpicklingError as err:
        refused = _refused_globals(f, err)
        what = ", ".join(refused) if refused else f"what torch's safe loader refused ({_torch_reason(err)})"
        raise _load_error(
            f"refused to load {name}: it references {what}, which fairseq checkpoints never hold. It was not "
            "loaded, and nothing in it ran. Do not use the file unless you trust its source; if it is a fairseq "
            "checkpoint from a source you trust, report what is named here to fairseq-smallvocab, whose "
            "allow-list (fairseq_smallvocab/compat/checkpoint_loading.py) may lack it.", err) from err
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise _load_error(
            f"cannot read {name} as a fairseq checkpoint ({type(err).__name__}: {err}); the file may be incomplete "
            "or corrupt (an interrupted copy or save): copy or save it again, or use another checkpoint", err) from err
    unsafe = unsafe_config_message(state, name)
    if unsafe:
        raise CheckpointLoadError(unsafe)
    return renamed_classes(state)


def load_broadcast_state(f, *args, **kwargs):
    """``torch.load`` as fairseq's distributed training calls it for the workers' copy of rank 0's loaded
    checkpoint state (``distributed_utils.broadcast_object``), with the allow-list (which holds its tensors'
    placeholder); what torch raises passes unchanged."""
    with allowed_globals():
        return torch.load(f, *args, **kwargs)


# the plugin's classes under their former names, as checkpoints written before a rename record them
RENAMED_CLASSES = {"ReinforceGleuCriterion": "SmallVocabReinforceCriterion"}


def renamed_classes(state):
    """``state`` with the criterion class names its optimizer history records renamed as the plugin renamed
    them, so that fairseq-train resumes a checkpoint written before the rename (it compares them)."""
    history = state.get("optimizer_history") if isinstance(state, dict) else None
    for entry in history or []:
        if isinstance(entry, dict) and entry.get("criterion_name") in RENAMED_CLASSES:
            entry["criterion_name"] = RENAMED_CLASSES[entry["criterion_name"]]
    return state


def _refused_globals(f, err) -> list:
    """The globals of a refused checkpoint that are not allow-listed: all of
    them where torch can list them (its unpickler stops at the first),
    else the one its error message names."""
    found = []
    if hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"):  # torch >= 2.5, zip checkpoints
        try:
            if hasattr(f, "seek"):
                f.seek(0)
            found = list(torch.serialization.get_unsafe_globals_in_checkpoint(f))
        except Exception:  # a legacy (non-zip) file, an unseekable stream: the message still names one
            found = []
    return found or list(dict.fromkeys(re.findall(r"GLOBAL\s+([\w.]+)", str(err))))


def _torch_reason(err) -> str:
    """The line of torch's weights-only error that says what it refused,
    without its general advice (which includes loading the file unsafely)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Weights only load failed", "Check the documentation"))]
    return (useful or [type(err).__name__])[0]


class TorchWithLoad:
    """What a fairseq module sees as ``torch``: torch itself, except ``load``."""

    def __init__(self, load):
        self.load = load

    def __getattr__(self, name):
        return getattr(torch, name)


def install():
    """Route fairseq's checkpoint loading through ``load_checkpoint_file``, and the distributed copy of a loaded
    state through ``load_broadcast_state`` (once)."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    if not isinstance(checkpoint_utils.torch, TorchWithLoad):
        checkpoint_utils.torch = TorchWithLoad(load_checkpoint_file)
    if not isinstance(distributed_utils.torch, TorchWithLoad):
        distributed_utils.torch = TorchWithLoad(load_broadcast_state)
