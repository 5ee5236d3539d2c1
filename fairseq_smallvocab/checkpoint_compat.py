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
the list; everything else is still refused.
"""

import argparse
import collections
import typing

import torch

_registered = False


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


def allow_fairseq_checkpoint_globals():
    """Register the allow-list with torch (once; a no-op on torch < 2.4, whose
    ``torch.load`` does not default to ``weights_only=True`` anyway)."""
    global _registered
    if _registered or not hasattr(torch.serialization, "add_safe_globals"):
        return
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
    _registered = True
