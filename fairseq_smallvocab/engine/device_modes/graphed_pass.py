"""A recurrent decoder's teacher-forced pass captured with its backward.

A recurrent decoder computes its states one step after another,

    s_t = f(s_(t-1), y_(t-1), x)        t = 1 ... T

(the paper's decoder: LSTM cell, global attention over the source, input
feeding), so a pass over T given tokens launches a handful of small kernels
per step forward and as many again backward.  On a GPU such a pass waits on
launches, not arithmetic, and REINFORCE makes two per step: the CE pass over
the gold targets (training mode) and, where the sampling step is captured
(``capture.py``) and so keeps no graph, the scoring pass over the samples
(eval mode).  ``extract_features`` runs such a pass as two CUDA graphs, the
forward and its backward (what ``torch.cuda.make_graphed_callables`` records,
with the gradients handed back as copies, see ``_Replay``), one pair per
shape bucket:

    rows, steps and source length rounded up (``buckets.bucket``: at most
    50% padding), training or eval mode, the dtype and device, which of
    the encoder's outputs take a gradient, and the settings' ``graphed_pass``.

Each batch is copied into the front of its bucket's inputs, the rest padded
so that padding changes no example's states or gradients:

    padded steps (at the end):  step t reads steps < t only
    padded source positions:    masked
    padded rows:                token pad, zero states, attending to one
                                unmasked (zero) source position: a softmax
                                over nothing would be NaN, and NaN times a
                                zero gradient is still NaN in the weights'

The pass runs on aliases of the decoder's parameters (the same storage, fresh
leaves, ``_aliases``), its warm-up and captures on one side stream.  The
graphs read the parameters at their addresses (an optimizer's in-place
update is seen; a parameter replaced is captured again).  A bucket whose
last forward still waits for its backward (its saved activations would be
overwritten) runs the pass eagerly instead.  Only passes with gradient use
it (validation and decoding keep the decoder's own pass); under autocast
(``--amp``) the pass runs eagerly.

The settings' ``graphed_pass``: "cuda-graphs" (captured on CUDA, the
decoder's own pass elsewhere), "buckets" (the padded pass and its backward
run again at each replay, on any device: the captured program and its
bookkeeping without the graphs, for the CPU oracles), "off" (the decoder's
own pass everywhere; the default until it has passed its tests on a GPU).
Decoders: those whose family gives the encoder ``parts`` to pad
(``families``): the plugin's translation LSTM and fairseq's ``lstm`` with
attention (the captioning LSTM runs one ``nn.LSTM`` call over all steps:
nothing to gain).
"""

import logging
import weakref
from contextlib import nullcontext
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_smallvocab.engine.device_modes.buckets import (
    CAPTURE_ERROR_MODE,
    BucketStore,
    addresses,
    bucket,
    failures_name,
    padded,
)
from fairseq_smallvocab.engine.families import Part, family_of, unmask_first_position
from fairseq_smallvocab.engine.settings import EngineSettings, flag
from fairseq_smallvocab.output.gathered_grad import suspended

logger = logging.getLogger(__name__)

WARMUP_PASSES = 3  # eager passes with backward on a side stream before the capture (as make_graphed_callables)

_BUCKETS = BucketStore()


def _parts(decoder):
    """The decoder family's encoder parts, or None: the decoder's own pass."""
    family = family_of(decoder)
    if family is None or family.parts is None or family.why_not(decoder) is not None:
        return None
    return family.parts


def _pad_part(x: Tensor, part: Part, rows: int, src_len: int) -> Tensor:
    sizes = {part.rows_dim: rows} if part.src_dim is None else {part.rows_dim: rows, part.src_dim: src_len}
    if not part.mask:
        return padded(x, sizes, 0)
    real = x.size(part.rows_dim)
    mask = padded(x, sizes, True)
    # (rows grow there, so the mask is a new tensor, not the batch's)
    if real >= rows:
        return mask
    assert part.src_dim is not None  # a source mask has a source dim
    return unmask_first_position(mask, real, part.rows_dim, part.src_dim)


class _Pass(nn.Module):
    """The decoder's features for tensors only (what a graph takes): (prev tokens, *encoder parts)."""

    def __init__(self, decoder, build: Callable):
        super().__init__()
        self.decoder, self.build = decoder, build

    def forward(self, prev: Tensor, *parts: Tensor) -> Tensor:
        return self.decoder.extract_features(prev, self.build(list(parts)))[0]

    def on_aliases(self, aliases: List[Tensor], *inputs: Tensor) -> Tensor:
        """``forward`` with the decoder's parameters that take a gradient replaced by ``aliases`` (``_aliases``)."""
        names = ["decoder." + name for name, p in self.decoder.named_parameters() if p.requires_grad]
        return torch.func.functional_call(self, dict(zip(names, aliases)), inputs)


def _aliases(params: List[Tensor]) -> List[Tensor]:
    """The parameters as fresh leaves on the same storage: a graph reads the parameters' values (an optimizer's
    update is seen) and the aliases' gradients are the parameters'; a captured backward then reaches no gradient
    accumulator that an eager pass of the same step made on the default stream (the CUDA capture fails there:
    "operation would make the legacy stream depend on a capturing blocking stream")."""
    return [p.detach().requires_grad_() for p in params]


class _Pending:
    """A forward replayed whose backward has not run (dropped with the graph that would run it)."""

    done = False


class _Bucket:
    """One shape bucket's static inputs, output and gradients, and its forward and backward: two CUDA graphs
    (``captured``), or without them ("buckets") the pass and its backward run again at each replay, with the
    same bookkeeping (the CPU oracles test it)."""

    def __init__(self, module: _Pass, inputs: List[Tensor], params: List[Tensor], shape: Tuple[int, ...],
                 captured: bool):
        self.fingerprint = _fingerprint(module.decoder)
        self.pending: Optional[weakref.ref] = None
        self.captured = captured
        self.forward_graph = self.backward_graph = None
        # static inputs: copies (the first batch's tensors and their graph are not kept alive)
        self.inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        self.aliases = _aliases(params)
        self.bytes = sum(x.numel() * x.element_size() for x in self.inputs)
        if not captured:
            # held weakly: the buckets are weakly keyed by the decoder
            self._decoder, self._build, self._out = weakref.ref(module.decoder), module.build, None
            self.output = self.grad_output = self.grads = None
            return
        device = inputs[0].device
        with torch.cuda.device(device):
            # and the graphs' pool: its segments stay reserved after the capture frees the saved activations'
            # tensors, so reserved memory counts them and allocated memory would not
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            before = torch.cuda.memory_reserved()
            wanted = [x for x in self.inputs if x.requires_grad] + self.aliases
            # one side stream for the warm-up and both captures
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_PASSES):  # lazy initializations (cuBLAS workspaces, ...) outside capture
                    out = module.on_aliases(self.aliases, *self.inputs)
                    torch.autograd.grad(out, wanted, torch.ones_like(out), allow_unused=True)
                del out  # (not to be counted in the bucket's bytes)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            self.forward_graph, self.backward_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.forward_graph, stream=stream, capture_error_mode=CAPTURE_ERROR_MODE):
                output = module.on_aliases(self.aliases, *self.inputs)
            self.grad_output = torch.empty_like(output)
            with torch.cuda.graph(self.backward_graph, pool=self.forward_graph.pool(), stream=stream,
                                  capture_error_mode=CAPTURE_ERROR_MODE):
                grads = torch.autograd.grad(output, wanted, self.grad_output, allow_unused=True)
            self.output = output.detach()  # its autograd graph (spent by the capture) is not kept
            self.grads = self._per_input(grads)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            self.bytes += torch.cuda.memory_reserved() - before
        logger.info(f"graphed_pass: captured the {'training' if module.decoder.training else 'eval'} pass of "
                    f"{type(module.decoder).__name__} for rows x steps x source {' x '.join(map(str, shape))} "
                    f"({self.bytes / 2 ** 20:.0f} MiB)")

    def _per_input(self, grads) -> List[Optional[Tensor]]:
        """``autograd.grad``'s gradients (the inputs that take one, then the parameters) as one per input
        (None: it takes none) and one per parameter."""
        grads = iter(grads)
        return [next(grads) if x.requires_grad else None for x in self.inputs] + list(grads)

    def forward(self):
        """``output`` for the static inputs."""
        if self.captured:
            self.forward_graph.replay()
            return
        with torch.enable_grad(), suspended():  # as captured: no gathering of the open REINFORCE block
            self._out = _Pass(self._decoder(), self._build).on_aliases(self.aliases, *self.inputs)
        # written over the last batch's, as a replayed graph writes its static output
        self.output = _overwrite(self.output, self._out.detach())
        if self.grad_output is None:
            self.grad_output = torch.empty_like(self.output)

    def backward(self):
        """``grads`` for ``grad_output``, from the activations of the last ``forward``."""
        if self.captured:
            self.backward_graph.replay()
            return
        wanted = [x for x in self.inputs if x.requires_grad] + self.aliases
        grads = self._per_input(torch.autograd.grad(self._out, wanted, self.grad_output, allow_unused=True))
        old = self.grads or [None] * len(grads)
        self.grads = [_overwrite(buffer, g) for buffer, g in zip(old, grads)]
        self._out = None

    def busy(self) -> bool:
        pending = self.pending() if self.pending is not None else None
        return pending is not None and not pending.done


def _overwrite(buffer: Optional[Tensor], value: Optional[Tensor]) -> Optional[Tensor]:
    """``value`` written into ``buffer`` (made at the first value): fixed tensors, as a graph's are."""
    if value is None:
        return buffer.zero_() if buffer is not None else None
    if buffer is None:
        return value.clone()
    return buffer.copy_(value)


class _Replay(torch.autograd.Function):
    """A bucket's forward replayed on (inputs, *params), its backward in backward.  The output and the
    gradients are copies: the graphs' tensors are overwritten by the next replay, and a gradient handed to
    autograd as it is may become a parameter's ``.grad`` (autograd keeps a fresh gradient it alone holds),
    which a later replay would then overwrite (gradient accumulation over batches, pytorch#181723)."""

    @staticmethod
    def forward(ctx, entry: _Bucket, *tensors: Tensor) -> Tensor:
        for static, x in zip(entry.inputs, tensors):
            if static.data_ptr() != x.data_ptr():
                static.copy_(x)
        entry.forward()
        ctx.entry, ctx.pending = entry, _Pending()
        entry.pending = weakref.ref(ctx.pending)
        assert entry.output is not None  # written by the forward just run
        return entry.output.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: Tensor):
        entry = ctx.entry
        if ctx.pending.done:  # the activations the graph reads may be a later batch's by now
            raise RuntimeError("graphed_pass: a second backward through a replayed pass (retain_graph=True) "
                               f"is not supported; {flag('graphed_pass', 'off')} runs the decoder's own pass")
        entry.grad_output.copy_(grad_output)
        entry.backward()
        ctx.pending.done = True
        return (None, *(None if g is None else g.clone() for g in entry.grads))


def _fingerprint(decoder) -> Tuple:
    """The addresses the graphs read the decoder's parameters and buffers from, and which parameters take a
    gradient (the backward graph computes theirs)."""
    return addresses(decoder) + tuple(p.requires_grad for p in decoder.parameters())


def forget(decoder):
    """Drop ``decoder``'s buckets and their graphs."""
    _BUCKETS.drop(decoder)


def extract_features(decoder, prev_output_tokens: Tensor, encoder_out, settings: EngineSettings):
    """``decoder.extract_features(prev_output_tokens, encoder_out)`` on the bucketed pass, for a decoder whose
    family gives its encoder parts (``passes.plan`` checked it): its features, and None for the decoder's second
    output, the attention, which REINFORCE does not read.  A pass without gradient (validation, decoding) or
    without steps is the decoder's own."""
    if not torch.is_grad_enabled() or prev_output_tokens.size(1) == 0:
        return decoder.extract_features(prev_output_tokens, encoder_out)
    family_parts = _parts(decoder)
    parts_of, build = family_parts.parts, family_parts.build
    parts = family_parts.take(encoder_out)
    rows, steps = prev_output_tokens.shape
    src_len = parts[0].size(parts_of[0].src_dim)
    size_rows, size_steps, size_src = bucket(rows), bucket(steps), bucket(src_len)
    pad = decoder.dictionary.pad()
    inputs = [padded(prev_output_tokens, {0: size_rows, 1: size_steps}, pad)] + [
        _pad_part(x, part, size_rows, size_src) for x, part in zip(parts, parts_of)]
    module = _Pass(decoder, build)
    params = [p for p in decoder.parameters() if p.requires_grad]
    if not params and not any(x.requires_grad for x in inputs):  # nothing to differentiate
        return module(*inputs)[:rows, :steps], None
    key = (size_rows, size_steps, size_src, decoder.training, tuple(x.requires_grad for x in inputs),
           inputs[1].dtype, str(inputs[1].device), settings.graphed_pass)
    entry = _BUCKETS.peek(decoder, key)
    if entry is not None and entry.fingerprint != _fingerprint(decoder):
        entry = None  # a parameter or buffer replaced (or frozen, or thawed): captured again
        _BUCKETS.drop(decoder, key)
    if entry is not None and entry.busy():  # its saved activations still wait for their backward
        return module(*inputs)[:rows, :steps], None
    # (suspended: the graph's own embedding backward, not the open REINFORCE block's gathering)
    captured = settings.graphed_pass == "cuda-graphs"
    with suspended(), failures_name(f"{flag('graphed_pass', 'off')} runs the decoder's own pass") if captured \
            else nullcontext():
        entry = _BUCKETS.get(decoder, key, lambda: _Bucket(module, inputs, params, key[:3], captured=captured),
                             settings.graphed_pass_max_buckets, settings.graphed_pass_max_mib * 2 ** 20)
    return _Replay.apply(entry, *inputs, *params)[:rows, :steps], None
