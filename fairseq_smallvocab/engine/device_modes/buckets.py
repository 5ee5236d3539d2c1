"""What both kinds of capture share (the sampling step, ``capture.py``, and
the teacher-forced pass, ``graphed_pass.py``): shape buckets, the store of a
decoder's buckets (least recently used dropped first, within a count and a
memory cap), padding a batch into a bucket so that padding changes no
example's result, whether a graph may be captured here, and the error that a
failed capture raises.

A CUDA graph has fixed shapes and addresses, so one is captured per bucket:
sizes are rounded up (``bucket``: at most 50% padding) and each batch is
copied into the front of its bucket's tensors, the rest padded:

    padded rows:     zero states, never alive; they attend to one (zero)
                     source position, unmasked: a softmax over nothing would
                     be NaN, and a backward would carry it into the weights
    padded sources:  masked
"""

import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Dict

import torch
from torch import Tensor

from fairseq_smallvocab.engine.families import enlarged

# Only the capturing thread's unsafe CUDA calls (cudaMalloc, cudaHostAlloc, event queries) may break a
# capture: fairseq-train's DataLoader pins the next batches in a thread of its own, and a pinned allocation
# there while a bucket is captured would break the capture under torch's default ("global").
CAPTURE_ERROR_MODE = "thread_local"


def bucket(n: int, floor: int = 8) -> int:
    """``n`` rounded up to the next of 2^k and 3 * 2^(k-1) (at least ``floor``): two buckets per octave, at
    most 50% padding."""
    if n <= floor:
        return floor
    power = 1 << (n - 1).bit_length()
    return power * 3 // 4 if n <= power * 3 // 4 else power


def addresses(module) -> tuple:
    """Where a graph captured on ``module`` reads its parameters and buffers: one replaced (``.to()``,
    ``load_state_dict(assign=True)``, ``.data =``) changes it, and the graph must be captured again."""
    return tuple(p.data_ptr() for p in module.parameters()) + tuple(b.data_ptr() for b in module.buffers())


class BucketStore:
    """Each decoder's buckets (weakly keyed by the decoder: a bucket must not keep its decoder alive), the
    least recently used dropped while more than ``max_buckets`` are kept or their ``bytes`` add up to more
    than ``max_bytes`` (the bucket asked for is always kept)."""

    def __init__(self):
        self._buckets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, decoder, key, make: Callable, max_buckets: int, max_bytes: int):
        """The bucket of ``key`` (made by ``make()`` the first time), now the most recently used.  Those that
        must go whatever the new bucket weighs go before ``make()``: their memory is free for its capture."""
        buckets = self._buckets.setdefault(decoder, OrderedDict())

        def over(coming: int) -> bool:  # beyond the limits, with ``coming`` buckets still to be made
            return len(buckets) + coming > max_buckets or sum(b.bytes for b in buckets.values()) > max_bytes

        entry = buckets.get(key)
        if entry is None:
            while buckets and over(1):
                buckets.popitem(last=False)
            entry = buckets[key] = make()
        buckets.move_to_end(key)
        while len(buckets) > 1 and over(0):
            buckets.popitem(last=False)
        return entry

    def peek(self, decoder, key):
        """The bucket of ``key`` if there is one (its use not counted)."""
        return self._buckets.get(decoder, {}).get(key)

    def drop(self, decoder, key=None):
        """Drop ``decoder``'s bucket of ``key``, or all of its buckets (their memory returns to the cache)."""
        if key is None:
            self._buckets.pop(decoder, None)
        else:
            self._buckets.get(decoder, {}).pop(key, None)

    def of(self, decoder) -> "OrderedDict":
        """``decoder``'s buckets, least recently used first."""
        return self._buckets.get(decoder, OrderedDict())


@contextmanager
def failures_name(hint: str):
    """A graph's preparation (its eager warm-up, where a compiled step compiles, and its capture) that fails,
    re-raised with ``hint``, the flag that does without it (e.g. "--rl-engine capture=off ..."), the original error
    chained; running out of memory is left as it is: fairseq-train recovers from it by skipping the batch,
    which it recognizes by its message."""
    try:
        yield
    except RuntimeError as err:
        if isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err):
            raise
        raise RuntimeError(f"preparing a CUDA graph (warm-up and capture) failed ({type(err).__name__}: {err}); "
                           f"{hint}") from err


def padded(x: Tensor, sizes: Dict[int, int], fill) -> Tensor:
    """``x`` in the front of a new tensor enlarged to ``sizes`` ({dim: size}), the rest ``fill``;
    differentiable (``x`` itself when nothing grows)."""
    shape = enlarged(x.shape, sizes)
    if shape == list(x.shape):
        return x
    out = x.new_full(shape, fill)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out
