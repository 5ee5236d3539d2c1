"""The sampling step captured as a CUDA graph and replayed per token.

On a GPU the sampling loop of a REINFORCE step waits on kernel launches and
Python, not on arithmetic: a step of the base Transformer launches a few
hundred small kernels for rows x d states.  Captured, the step is one
``graph.replay()``: the decoder step on the static state
(``transformer_state.py``, ``recurrent_state.py``), the scores over the batch's candidate union U or the
whole vocabulary (``UnionScorer``), the draw with its entropy and greedy flag,
the kept probabilities and the loop's bookkeeping (``loop.Loop.step``),
with t a 0-d device tensor that the step itself advances.  The self-critical
baseline's greedy decode is captured the same way.

Shape buckets.  A graph has fixed shapes and addresses, so one is captured
per bucket: rows, steps, source length and |U| rounded up (``bucket``: at
most 50% padding), the candidates' K, greedy or sampled, the temperature,
whether probabilities are kept, whether eos may be drawn (``to_limit``),
the device and dtype, and the
``EngineSettings`` it runs under.  A training run
captures a handful of graphs, not one per batch.  Each batch is loaded into
the front of its bucket's tensors (``buckets.Slots``, ``Loop.load``):

    padded rows:      length 0, never alive; they attend to one zero key
    padded sources:   masked
    padded U rows:    zero, and no row's candidate

so padding changes no example's result.  The uniform draws are made per
batch outside the graph (``sampling.sample``), the same whatever the bucket.

The graph reads the parameters at their addresses: an optimizer's in-place
update is seen by the next replay; a parameter replaced (``.to()``,
``load_state_dict(assign=True)``, a swap of weights) changes an address, and
the bucket is captured again.  Under autocast (``--amp``) the loop runs
eagerly.

Recurrent decoders keep the sampling steps' graph for the backward when they
run eagerly (``sampling.py``); a captured step keeps none, so where capture
applies the samples are scored by one teacher-forced pass instead
(``sampling.sample_and_score``).

The settings' ``capture``: "cuda-graphs" (captured on CUDA, eager
elsewhere), "buckets" (the bucketed step with a device t run eagerly on any
device: the captured program without the graph, for debugging and the CPU
oracles), "off" (the eager loop everywhere).

Their ``compile`` fuses a bucket's step with ``torch.compile`` first: a
captured step of the base Transformer replays about as long as its kernels
take to run one after another, so fewer, fused kernels are what is left to
gain.  "off" (the default until measured on a
GPU); "fuse" (inductor's kernels, then captured by hand as above);
"reduce-overhead" (inductor with its own CUDA graphs, none captured here:
to compare the hand-captured step against).  A bucket compiles at its first step
(seconds to minutes), outside any capture.
"""

import copy
import logging
import weakref
from typing import Optional, Tuple

import torch
from torch import Tensor

from fairseq_smallvocab.engine.device_modes.buckets import (
    CAPTURE_ERROR_MODE,
    BucketStore,
    addresses,
    bucket,
    failures_name,
)
from fairseq_smallvocab.engine.families import Slots
from fairseq_smallvocab.engine.loop import Loop, Samples
from fairseq_smallvocab.engine.request import SampleRequest
from fairseq_smallvocab.engine.settings import flag
from fairseq_smallvocab.output.union_scorer import UnionScorer

logger = logging.getLogger(__name__)

# compiled steps kept per code object before dynamo gives up compiling (one per bucket; its default is 8)
RECOMPILE_LIMIT = 1024
# eager steps on a side stream before a capture (lazy initializations, e.g. cuBLAS handles, happen there)
WARMUP_STEPS = 2

_BUCKETS = BucketStore()
# decoder -> the memory pool its graphs share: a step's intermediates live only while it replays (what outlives
# it is in the buckets' tensors, made outside capture), so one bucket's replay may reuse another's memory, and
# the pool holds the largest bucket's intermediates, not their sum
_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fingerprint(decoder, weight: Tensor, bias: Optional[Tensor]):
    """The addresses a captured step reads its parameters from."""
    return addresses(decoder) + (weight.data_ptr(), 0 if bias is None else bias.data_ptr())


class _Bucket:
    """One shape bucket's loop, state and scorer at fixed addresses, and its captured step."""

    def __init__(self, decoder, family, encoder_out, union: UnionScorer, rows: int, steps: int, src_len: int,
                 union_size: int, width: int, k: int, greedy: bool, temperature: float, store_probs: bool,
                 compile_mode: str, to_limit: bool = False):
        device = union.weight.device
        self.slots = Slots(rows, src_len)
        self.shape = f"rows x steps x source x union {rows} x {steps} x {src_len} x {union_size}"
        self.union_size = union_size
        self.state = family.static_state(decoder, encoder_out, steps, self.slots)
        self.loop = Loop(decoder.dictionary, rows, steps, width, device, greedy, temperature, store_probs, k=k,
                         to_limit=to_limit)
        # the bucket's own scorer, whose tensors ``_load_union`` points at the slots: not the batch's, whose
        # tensors a second load of the same batch (after a capture) would then copy from the slots they were just
        # zeroed in.  The union's slots are made here, so that the bucket's bytes count them
        self.scorer = copy.copy(union)
        self._load_union(union)
        self.t = torch.zeros((), dtype=torch.long, device=device)
        self._step = self._eager_step if compile_mode == "off" else _compiled(self._eager_step, compile_mode)
        self.graph = None
        self.params = None
        # a state lives in its slots, a Transformer's also in its self-attention keys and values
        cache = self.state.own_tensors()
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


def _compiled(step, mode: str):
    """``step`` compiled as the settings' ``compile`` says (shapes static: a bucket's never change)."""
    compiled = torch.compile(step, dynamic=False, mode="reduce-overhead" if mode == "reduce-overhead" else None)

    def run():
        # every bucket compiles the same code: dynamo's default limit of 8 versions would leave the 9th eager
        # (cache_size_limit: its name on every torch >= 2.4; recompile_limit only from 2.7)
        with torch._dynamo.config.patch(cache_size_limit=RECOMPILE_LIMIT):
            compiled()
    return run


def forget(decoder):
    """Drop ``decoder``'s buckets and their graphs (their memory returns to the allocator's cache)."""
    _BUCKETS.drop(decoder)
    _POOLS.pop(decoder, None)


def loop_shape(decoder, rows: int, steps: int) -> Tuple[int, int]:
    """The shape bucket's rows and steps for a batch of ``rows`` sampled for at most ``steps``: each rounded up
    (``bucket``), the steps within the decoder's positions (a learned position table ends there)."""
    return bucket(rows), max(steps, min(bucket(steps), int(decoder.max_positions())))


def sample(model, encoder_out, candidates: Optional[Tensor], request: SampleRequest, steps: int,
           uniforms: Optional[Tensor], greedy: bool, store_probs: bool) -> Samples:
    """``sampling.sample`` on the batch's shape bucket (``loop_shape``): each step replays the bucket's captured
    graph ("cuda-graphs"), or runs its step eagerly ("buckets"), for at most ``steps`` steps (the longest of the
    request's ``max_lens``; with its ``to_limit`` eos is never drawn); the loop asks whether any row is still
    going every ``settings.stop_check_every`` steps.
    The samples are copies (the next batch reuses the bucket).  ``store_probs``: whether the bucket keeps its
    step probabilities (``eager.draws`` decided it for the bucket's padded rows x steps x width)."""
    decoder, (weight, bias) = model.decoder, model.output_weights()
    max_lens, settings, temperature, to_limit = request.max_lens, request.settings, request.temperature, \
        request.to_limit
    bsz = max_lens.size(0)
    union = UnionScorer(weight, bias, candidates, settings.transposed_min_rows)
    k = 0 if candidates is None else candidates.size(1)
    width = k or weight.size(0)
    union_size = 0 if candidates is None else bucket(union.weight.size(0), floor=k)
    family = request.plan.family
    assert family is not None  # ``passes.plan`` turns the capture off for a decoder without a static state
    src_len = bucket(family.source_length(encoder_out))
    rows, bucket_steps = loop_shape(decoder, bsz, steps)
    key = (rows, bucket_steps, src_len, union_size, width, greedy, temperature, store_probs, to_limit,
           weight.dtype, str(weight.device), settings.capture, settings.compile, settings.transposed_min_rows)
    entry = _BUCKETS.get(decoder, key, lambda: _Bucket(
        decoder, family, encoder_out, union, rows, bucket_steps, src_len, union_size, width, k, greedy, temperature,
        store_probs, settings.compile, to_limit), settings.capture_max_buckets, settings.capture_max_mib * 2 ** 20)
    entry.load(encoder_out, union, max_lens, candidates, uniforms)
    if settings.capture == "cuda-graphs" and settings.compile != "reduce-overhead":  # (which makes its own)
        params = _fingerprint(decoder, weight, bias)
        if entry.graph is None or entry.params != params:
            if decoder not in _POOLS:
                _POOLS[decoder] = torch.cuda.graph_pool_handle()
            hint = f"{flag('capture', 'off')} samples without one"
            if settings.compile != "off":
                hint += f", and {flag('compile', 'off')} compiles nothing"
            with failures_name(hint):
                entry.capture(_POOLS[decoder])
            entry.params = params
            entry.load(encoder_out, union, max_lens, candidates, uniforms)
    entry.loop.run(steps, settings.stop_check_every, lambda t: entry.replay())
    return entry.loop.samples(bsz, copy=True)
