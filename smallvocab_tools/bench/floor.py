"""A step's matrix products alone (``benchmark.py --floor``).

How far is a training step from the arithmetic it cannot avoid?  A step is
run once under ``ProductRecorder`` (a ``TorchDispatchMode``: it sees every
ATen call, the backward's included, below autograd), which keeps, for each
distinct product call (the operator, its operands' shapes, strides and
dtypes), one copy of the operands and how often it ran; ``replay`` then runs
those calls again, the same number of times each, with nothing between them:
no elementwise operations, no gathers, no autograd, no Python.  Its wall time
estimates what the step's products cost on this machine at the step's own
shapes and layouts (close to a lower bound: a call repeated in the step,
as the decoder's per-step products are, runs back to back on cache-warm
operands), and ``step / products`` says how much of the step is everything
else.

Products: fairseq's and the plugin's layers reach BLAS and oneDNN through
``mm``, ``addmm``, ``bmm``, ``baddbmm`` (and their in-place and ``out=``
forms), ``mv`` / ``addmv`` / ``addbmm`` / ``dot``, oneDNN's LSTM layer
(``mkldnn_rnn_layer`` and its backward, where torch runs an ``nn.LSTM``
through oneDNN on the CPU, as the paper's encoder in the benchmark's steps), the
CPU's fused attention (``_scaled_dot_product_flash_attention_for_cpu`` and
its backward) and anything torch's own FLOP counter
(``torch.utils.flop_counter``) knows.  FLOPs are counted with torch's formulas
where it has them (2mnk for a product of m x k by k x n), else:

- LSTM layer over T steps of B rows, input I, hidden H: forward
  2 T B 4H (I + H) (the input and recurrent products); backward twice that
  (the gradients of the inputs and of the weights);
- the CPU's fused attention: torch's formulas for the other attention
  kernels (``sdpa_flop_count`` and ``sdpa_backward_flop_count``).

On CUDA (``--device cuda``) cuDNN's RNN kernels (``_cudnn_rnn`` and its
backward, an ``nn.LSTM``'s whole pass) count as products, with the formulas
above for every layer and direction; they have not run on a GPU yet, so
``benchmark.py`` asks an LSTM there for ``--set untested_cuda_modes=on``.
The recorded calls are replayed as one captured CUDA graph: issued from a
Python loop, each product of a decoding step would wait on its own launch,
which at a decoding step's sizes can take longer than the product, and the
replay would time the launches, not the arithmetic.  Its attention kernels
(efficient, flash, cuDNN) count with torch's formulas.  A captured sampling
step or teacher-forced pass makes no ATen calls when it replays, so the
recorded step runs the same program eagerly (``train_worker.floor_steps``).
"""

import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _rnn_flops(forward: bool):
    def count(args) -> int:
        x, w_ih, w_hh = args[0], args[1], args[2]  # input (T, B, I), weights (4H, I) and (4H, H)
        steps_rows = x.shape[0] * x.shape[1]
        flops = 2 * steps_rows * w_ih.shape[0] * (w_ih.shape[1] + w_hh.shape[1])
        return flops if forward else 2 * flops
    return count


def _cudnn_rnn_flops(forward: bool):
    def count(args) -> int:
        x, weights = args[0], args[1]  # input (T, B, I), or packed (sum of the steps' rows, I); the layers' weights
        steps_rows = x.shape[0] * x.shape[1] if x.dim() == 3 else x.shape[0]
        # every layer and direction: its input and recurrent products over all steps (biases aside)
        flops = 2 * steps_rows * sum(w.numel() for w in weights if w.dim() == 2)
        return flops if forward else 2 * flops
    return count


def _attention_flops(forward: bool):
    def count(args) -> int:
        if forward:  # query, key, value, ...
            return int(sdpa_flop_count(args[0].shape, args[1].shape, args[2].shape))
        return int(sdpa_backward_flop_count(args[0].shape, args[1].shape, args[2].shape, args[3].shape))
    return count


def _mm_like(a_index: int):  # mv / addmv / addbmm / dot: torch's counter has no formula for these
    def count(args) -> int:
        a, b = args[a_index], args[a_index + 1]
        if a.dim() == 3:  # addbmm: (b, n, m) x (b, m, p)
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        return 2 * a.numel() * (b.shape[1] if b.dim() == 2 else 1)  # mv: (n, m) x (m,); dot: (n,) . (n,)
    return count


FLOPS = {
    aten.mv: _mm_like(0), aten.addmv: _mm_like(1), aten.addbmm: _mm_like(1), aten.dot: _mm_like(0),
    aten.vdot: _mm_like(0),
    aten.mkldnn_rnn_layer: _rnn_flops(True), aten.mkldnn_rnn_layer_backward: _rnn_flops(False),
    aten._cudnn_rnn: _cudnn_rnn_flops(True), aten._cudnn_rnn_backward: _cudnn_rnn_flops(False),
    aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops(True),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_flops(False),
}
# in-place forms count as their out-of-place operators (same operands)
_IN_PLACE = {aten.addmm_: aten.addmm, aten.baddbmm_: aten.baddbmm, aten.addmv_: aten.addmv,
             aten.addbmm_: aten.addbmm}


def is_product(packet) -> bool:
    """Whether calls of ``packet`` (an operator's overload packet) are products."""
    packet = _IN_PLACE.get(packet, packet)
    return packet in FLOPS or packet in flop_registry


def product_flops(packet, args, kwargs=None, out=None):
    """FLOPs of one call of a product operator (its overload packet), or
    None if ``packet`` is not a product."""
    packet = _IN_PLACE.get(packet, packet)
    if packet in FLOPS:
        return FLOPS[packet](args)
    if packet in flop_registry:  # torch's formulas take the shapes of the operands (not of ``out=``)
        kwargs = {k: v for k, v in (kwargs or {}).items() if k != "out"}
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    return None


def _copy(x):
    """A tensor with the same shape, strides, dtype, device and values as
    ``x`` in a storage of its own, holding only the span the view reads (so a
    product reads the same layout: a transposed view stays transposed, an
    expanded one expanded); lists of tensors copied element-wise; anything
    else as is."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.numel() == 0:
            return x.clone()
        span = 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))
        return x.as_strided((span,), (1,), x.storage_offset()).clone().as_strided(x.shape, x.stride(), 0)
    if isinstance(x, (list, tuple)):
        return type(x)(_copy(y) for y in x)
    return x


def _signature(x):
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), tuple(x.stride()), str(x.dtype), str(x.device))
    if isinstance(x, (list, tuple)):
        return tuple(_signature(y) for y in x)
    return repr(x)


class ProductRecorder(TorchDispatchMode):
    """Records the product calls made while it is active (``with``): for each
    distinct call (operator overload, operands' shapes, strides, dtypes,
    devices, other arguments) a copy of its operands, how many times it ran
    and its FLOPs per call; counts every other ATen call in ``other``."""

    def __init__(self):
        super().__init__()
        self.calls = {}  # signature -> [operator, args, kwargs, count, flops per call]
        self.other = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not is_product(func.overloadpacket):
            self.other[str(func.overloadpacket)] += 1
            return out
        key = (str(func), _signature(args), _signature(sorted(kwargs.items())))
        entry = self.calls.get(key)
        if entry is None:  # a new call: its operands copied and its FLOPs counted once
            flops = product_flops(func.overloadpacket, args, kwargs, out)
            entry = self.calls[key] = [func, _copy(args), {k: _copy(v) for k, v in kwargs.items()}, 0, flops]
        entry[3] += 1
        return out

    @property
    def product_calls(self) -> int:
        return sum(entry[3] for entry in self.calls.values())

    @property
    def flops(self) -> int:
        return sum(entry[3] * entry[4] for entry in self.calls.values())

    def _run(self):
        for func, args, kwargs, count, _ in self.calls.values():
            for _ in range(count):
                func(*args, **kwargs)

    def replay(self, sync=lambda: None, graph: bool = False) -> float:
        """Runs every recorded call as many times as it ran; returns the wall
        seconds (``sync`` before and after: CUDA's queue).  ``graph``: the
        calls captured once as a CUDA graph (after an untimed run that makes
        the libraries' lazy workspaces), and the graph's replay timed."""
        run = self._run
        if graph:
            self._run()
            torch.cuda.synchronize()
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                self._run()
            captured.replay()  # (a first replay uploads the graph)
            run = captured.replay
        sync()
        start = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - start

    def table(self, top: int = 10):
        """The ``top`` signatures by total FLOPs: (operator, operand shapes,
        calls, GFLOP)."""
        rows = [(str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)], count, count * flops / 1e9)
                for func, args, _, count, flops in self.calls.values()]
        return sorted(rows, key=lambda row: -row[3])[:top]
