"""The sampling step captured as a CUDA graph and replayed per token.

On a GPU the sampling loop of a REINFORCE step waits on kernel launches and
Python, not on arithmetic: a step of the base Transformer launches a few
hundred small kernels for rows x d states.  Captured, the step is one
``graph.replay()``: the decoder step on the static state
(``static_state.py``), the scores over the batch's candidate union U or the
whole vocabulary (``UnionScorer``), the draw with its entropy and greedy flag,
the kept probabilities and the loop's bookkeeping (``loop.Loop.step``),
with t a 0-d device tensor that the step itself advances.  The self-critical
baseline's greedy decode is captured the same way.

Shape buckets.  A graph has fixed shapes and addresses, so one is captured
per bucket: rows, steps, source length and |U| rounded up (``bucket``: at
most 50% padding), the candidates' K, greedy or sampled, the temperature,
whether probabilities are kept, the device and dtype.  A training run
captures a handful of graphs, not one per batch.  Each batch is loaded into
the front of its bucket's tensors (``static_state.Slots``, ``Loop.load``):

    padded rows:      length 0, never alive; they attend to one zero key
    padded sources:   masked
    padded U rows:    zero, and no row's candidate

so padding changes no example's result.  The uniform draws are made per
batch outside the graph (``sampler.sample``), the same whatever the bucket.

The graph reads the parameters at their addresses: an optimizer's in-place
update is seen by the next replay; a parameter replaced (``.to()``,
``load_state_dict(assign=True)``, a swap of weights) changes an address, and
the bucket is captured again.  Under autocast (``--amp``) the loop runs
eagerly.

Recurrent decoders keep the sampling steps' graph for the backward when they
run eagerly (``sampler.py``); a captured step keeps none, so where capture
applies the samples are scored by one teacher-forced pass instead
(``restricted_model``).

``CAPTURE`` switches: "cuda-graphs" (captured on CUDA, eager elsewhere),
"buckets" (the bucketed step with a device t run eagerly on any device: the
captured program without the graph, for debugging and the CPU oracles),
"off" (the eager loop everywhere).

``COMPILE`` fuses a bucket's step with ``torch.compile`` first: a captured
step of the base Transformer replays about as long as its kernels take to
run one after another (docs/RESULTS.md, "#31 on the GPU"), so fewer, fused
kernels are what is left to gain.  "off" (the default until measured on a
GPU); "fuse" (inductor's kernels, then captured by hand as above);
"reduce-overhead" (inductor with its own CUDA graphs, none captured here:
the comparison the issue asks for).  A bucket compiles at its first step
(seconds to minutes), outside any capture.
"""

import copy
import logging
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Optional

import torch
from torch import Tensor

from fairseq_smallvocab.output.union_scorer import UnionScorer
from fairseq_smallvocab.reinforce.loop import Loop, Samples
from fairseq_smallvocab.reinforce.static_state import (
    Slots,
    TransformerStaticState,
    has_static_state,
    static_state,
)

logger = logging.getLogger(__name__)

MODES = ("cuda-graphs", "buckets", "off")
CAPTURE = "cuda-graphs"
COMPILE_MODES = ("off", "fuse", "reduce-overhead")
COMPILE = "off"
# compiled steps kept per code object before dynamo gives up compiling (one per bucket; its default is 8)
RECOMPILE_LIMIT = 1024

# buckets kept per decoder, least recently used dropped first; and the most bytes their tensors may hold (the
# bucket in use is always kept): a full softmax's kept probabilities are rows x steps x |V| floats per bucket
MAX_BUCKETS = 16
MAX_BUCKET_BYTES = 2 * 2 ** 30

# eager steps on a side stream before a capture (lazy initializations, e.g. cuBLAS handles, happen there)
WARMUP_STEPS = 2
# Only the capturing thread's unsafe CUDA calls (cudaMalloc, cudaHostAlloc, event queries) may break a
# capture: fairseq-train's DataLoader pins the next batches in a thread of its own, and a pinned allocation
# there while a bucket is captured would break the capture under torch's default ("global").
CAPTURE_ERROR_MODE = "thread_local"

_BUCKETS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # decoder -> OrderedDict(key -> _Bucket)
# decoder -> the memory pool its graphs share: a step's intermediates live only while it replays (what outlives
# it is in the buckets' tensors, made outside capture), so one bucket's replay may reuse another's memory, and
# the pool holds the largest bucket's intermediates, not their sum
_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def bucket(n: int, floor: int = 8) -> int:
    """``n`` rounded up to the next of 2^k and 3 * 2^(k-1) (at least ``floor``): two buckets per octave, at
    most 50% padding."""
    if n <= floor:
        return floor
    power = 1 << (n - 1).bit_length()
    return power * 3 // 4 if n <= power * 3 // 4 else power


def autocast_on(device) -> bool:
    """Whether autocast (``--amp``) is on for ``device``: graphs are not captured under it."""
    try:
        return torch.is_autocast_enabled(device.type)
    except TypeError:  # torch < 2.4 asks about CUDA only
        return device.type == "cuda" and torch.is_autocast_enabled()


def applies(decoder, encoder_out, device) -> bool:
    """Whether the bucketed step (captured on CUDA) applies to this decoder and device (``sampler.captures``
    also asks whether the static state is on)."""
    if CAPTURE not in MODES:
        raise ValueError(f"capture.CAPTURE is {CAPTURE!r}; choose one of {', '.join(MODES)}")
    if COMPILE not in COMPILE_MODES:
        raise ValueError(f"capture.COMPILE is {COMPILE!r}; choose one of {', '.join(COMPILE_MODES)}")
    if CAPTURE == "off":
        return False
    if CAPTURE == "cuda-graphs" and (device.type != "cuda" or autocast_on(device)):
        return False
    return has_static_state(decoder, encoder_out)


def _source_length(encoder_out) -> int:
    if isinstance(encoder_out, dict):
        enc = encoder_out.get("encoder_out") or []
        return enc[0].size(0) if enc and enc[0].dim() == 3 else 0
    return encoder_out[0].size(0)  # fairseq's lstm: S x rows x C first


def addresses(module) -> tuple:
    """Where a graph captured on ``module`` reads its parameters and buffers: one replaced (``.to()``,
    ``load_state_dict(assign=True)``, ``.data =``) changes it, and the graph must be captured again."""
    return tuple(p.data_ptr() for p in module.parameters()) + tuple(b.data_ptr() for b in module.buffers())


def _fingerprint(decoder, weight: Tensor, bias: Optional[Tensor]):
    """The addresses a captured step reads its parameters from."""
    return addresses(decoder) + (weight.data_ptr(), 0 if bias is None else bias.data_ptr())


class _Bucket:
    """One shape bucket's loop, state and scorer at fixed addresses, and its captured step."""

    def __init__(self, decoder, encoder_out, union: UnionScorer, rows: int, steps: int, src_len: int,
                 union_size: int, width: int, k: int, greedy: bool, temperature: float, store_probs: bool):
        device = union.weight.device
        self.slots = Slots(rows, src_len)
        self.shape = f"rows x steps x source x union {rows} x {steps} x {src_len} x {union_size}"
        self.union_size = union_size
        self.state = static_state(decoder, encoder_out, steps, slots=self.slots)
        self.loop = Loop(decoder.dictionary, rows, steps, width, device, greedy, temperature, store_probs, k=k)
        # the bucket's own scorer, whose tensors ``_load_union`` points at the slots: not the batch's, whose
        # tensors a second load of the same batch (after a capture) would then copy from the slots they were just
        # zeroed in.  The union's slots are made here, so that the bucket's bytes count them
        self.scorer = copy.copy(union)
        self._load_union(union)
        self.t = torch.zeros((), dtype=torch.long, device=device)
        self._step = self._eager_step if COMPILE == "off" else _compiled(self._eager_step)
        self.graph = None
        self.params = None
        # a recurrent state lives in its slots; a Transformer's also in its self-attention keys and values
        cache = self.state.keys + self.state.values if isinstance(self.state, TransformerStaticState) else []
        self.bytes = sum(x.numel() * x.element_size() for x in [
            *self.slots.slots.values(), *cache, *(x for x in vars(self.loop).values() if isinstance(x, Tensor))])

    def _load_union(self, union: UnionScorer):
        if union.pos is None:  # the full softmax reads the output layer's own parameters
            self.scorer = copy.copy(union)
        else:  # the batch's union rows (and their positions) into the bucket's
            scorer, slots = self.scorer, self.slots
            scorer.weight = slots.put("union_weight", union.weight, {0: self.union_size})
            if union.bias is not None:
                scorer.bias = slots.put("union_bias", union.bias, {0: self.union_size})
            scorer.pos = scorer.row_pos = slots.put("union_pos", union.pos, {0: slots.rows})

    def load(self, encoder_out, union: UnionScorer, max_lens: Tensor, candidates, uniforms):
        self.state.load(encoder_out)
        self._load_union(union)
        self.loop.load(max_lens, candidates, uniforms)
        self.t.zero_()

    def _eager_step(self):
        self.loop.step(self.state, self.scorer, self.t)
        self.t += 1

    def step(self):
        with torch.no_grad():
            self._step()

    def replay(self):
        if self.graph is None:
            self.step()
        else:
            self.graph.replay()

    def capture(self, pool):
        """Record one step (after eager warm-up steps on a side stream, as CUDA graphs need) into the
        memory ``pool`` of the decoder's graphs; the loop's tensors are then stale: load the batch again."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):
                self.step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode=CAPTURE_ERROR_MODE):
            self.step()
        self.graph = graph
        logger.info(f"capture: captured the sampling step for {self.shape} ({self.bytes / 2 ** 20:.0f} MiB)")


@contextmanager
def failures_name(hint: str):
    """A graph's preparation (its eager warm-up, where a compiled step compiles, and its capture) that fails,
    re-raised with ``hint``, the flag that does without it (e.g. "--rl-capture off ..."), the original error
    chained; running out of memory is left as it is: fairseq-train recovers from it by skipping the batch,
    which it recognizes by its message."""
    try:
        yield
    except RuntimeError as err:
        if isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err):
            raise
        raise RuntimeError(f"preparing a CUDA graph (warm-up and capture) failed ({type(err).__name__}: {err}); "
                           f"{hint}") from err


def _compiled(step):
    """``step`` compiled as ``COMPILE`` says (shapes static: a bucket's never change)."""
    compiled = torch.compile(step, dynamic=False, mode="reduce-overhead" if COMPILE == "reduce-overhead" else None)

    def run():
        # every bucket compiles the same code: dynamo's default limit of 8 versions would leave the 9th eager
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            compiled()
    return run


def forget(decoder):
    """Drop ``decoder``'s buckets and their graphs (their memory returns to the allocator's cache)."""
    _BUCKETS.pop(decoder, None)
    _POOLS.pop(decoder, None)


def bucket_for(store: "weakref.WeakKeyDictionary", decoder, key, make, max_buckets: int, max_bytes: int):
    """The bucket of ``key`` among ``decoder``'s in ``store`` (made by ``make()`` the first time), now the
    most recently used; the least recently used are dropped while more than ``max_buckets`` are kept or
    their ``bytes`` add up to more than ``max_bytes`` (the bucket asked for is always kept).  Those that must
    go whatever the new bucket weighs go before ``make()``: their memory is free for its capture."""
    buckets = store.setdefault(decoder, OrderedDict())

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


def sample(decoder, encoder_out, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
           max_lens: Tensor, steps: int, uniforms: Optional[Tensor], greedy: bool, temperature: float,
           store_probs: bool, stop_check_every: int = 1, max_stored: Optional[int] = None) -> Samples:
    """``sampler.sample`` on the batch's shape bucket: each step replays the bucket's captured graph
    ("cuda-graphs"), or runs its step eagerly ("buckets"), for at most ``steps`` steps (the longest of
    ``max_lens``); the loop asks whether any row is still going every ``stop_check_every`` steps.  The
    samples are copies (the next batch reuses the bucket).  ``max_stored``: the most probabilities a bucket
    may keep (its padded rows x steps x width: about 2.25 times the batch's at most, above the buckets' floor
    of 8 rows and steps), else none are kept."""
    bsz = max_lens.size(0)
    union = UnionScorer(weight, bias, candidates)
    k = 0 if candidates is None else candidates.size(1)
    width = k or weight.size(0)
    union_size = 0 if candidates is None else bucket(union.weight.size(0), floor=k)
    src_len = bucket(_source_length(encoder_out))
    rows = bucket(bsz)
    # the bucket's steps stay within the decoder's positions (a learned position table ends there)
    bucket_steps = max(steps, min(bucket(steps), int(decoder.max_positions())))
    if max_stored is not None and rows * bucket_steps * width > max_stored:
        store_probs = False  # ``sampler.score`` makes the logits again instead: the same gradient
    key = (rows, bucket_steps, src_len, union_size, width, greedy, temperature, store_probs,
           weight.dtype, str(weight.device), CAPTURE, COMPILE)
    entry = bucket_for(_BUCKETS, decoder, key, lambda: _Bucket(
        decoder, encoder_out, union, rows, bucket_steps, src_len, union_size, width, k, greedy, temperature,
        store_probs), MAX_BUCKETS, MAX_BUCKET_BYTES)
    entry.load(encoder_out, union, max_lens, candidates, uniforms)
    if CAPTURE == "cuda-graphs" and COMPILE != "reduce-overhead":  # (which makes its own graphs)
        params = _fingerprint(decoder, weight, bias)
        if entry.graph is None or entry.params != params:
            if decoder not in _POOLS:
                _POOLS[decoder] = torch.cuda.graph_pool_handle()
            hint = "--rl-capture off (capture.CAPTURE = 'off') samples without one"
            if COMPILE != "off":
                hint += ", and --rl-compile off (capture.COMPILE = 'off') compiles nothing"
            with failures_name(hint):
                entry.capture(_POOLS[decoder])
            entry.params = params
            entry.load(encoder_out, union, max_lens, candidates, uniforms)
    loop = entry.loop
    for t in range(steps):
        entry.replay()
        if (t + 1) % stop_check_every == 0 and not loop.alive.any():
            break
    return loop.samples(bsz, copy=True)
