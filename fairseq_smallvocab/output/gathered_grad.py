"""Embedding lookups made step by step whose weight gradient is gathered into
one dense tensor.

REINFORCE through a recurrent decoder keeps the graph of every sampling step
(``engine.sampling.sample(keep_graph=True)``), and step t looks up the embedding of
the token drawn at t - 1.  With ``nn.Embedding``'s own backward each of the
T lookups makes a dense |V| x d gradient (zeros, then its B rows added) and
autograd adds the T of them up: 2 x T passes over a |V| x d tensor per step
(measured on the CPU; docs/results.md, "CPU speed vs the paper's code").

``gathered_embedding_grads(module)`` makes, inside the block, every plain
``nn.Embedding`` (the class itself, not a subclass) of the module look up
its rows through ``StepLookup``, whose backward adds its rows' gradient
into one buffer shared by all the lookups of the block (index_add: B rows
each), and hands nothing to the weight itself.  All the lookups take one
extra input, ``anchor``: the output of ``Gather`` applied to the weight
when the block opens.  Autograd runs a node once every node that uses its
output is done, so ``Gather``'s backward runs after every lookup's, and
returns the buffer as the weight's gradient:
the same sum as T dense gradients (up to the order of the additions), made
with one |V| x d tensor.

Lookups that are not plain (``max_norm``, ``scale_grad_by_freq``,
``sparse``) keep ``nn.Embedding``'s own forward, as do lookups outside the
block and lookups made without gradient.

The restricted output layer (``output.restricted``) routes its uses of a
weight through the innermost open block too (``active_route``): a tied
embedding's whole REINFORCE step (the encoder's and the decoder's lookups of
the CE pass and of the policy, the CE pass's output layer, the scoring's)
then makes one |V| x d gradient instead of one per use.  Why: a Transformer
with shared embeddings made six (32K x 512 floats, 64 MB each), and a fresh
tensor that size is zeroed through page faults (measured on the CPU).  A block opened inside another block over
a module that contains it reuses the outer one.
"""

from contextlib import contextmanager
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def accumulator(shape, dtype: torch.dtype, device) -> Tensor:
    """Zeros to sum the gradient of a weight (or bias) of ``dtype`` in:
    float32 for a half or bfloat16 weight (thousands of rows of one frequent
    word add up in it: in bfloat16 a sum of ones stops growing at 256, in
    half at 2048; ``nn.Embedding``'s own backward accumulates in float32
    too), the weight's own dtype otherwise."""
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return torch.zeros(shape, dtype=wide, device=device)


class _Buffer:
    """The gathered gradient of one weight (None until the first lookup's backward adds to it)."""

    def __init__(self):
        self.grad = None

    def start(self, weight_shape, weight_dtype, device) -> Tensor:
        """The gradient tensor to add into, made at the first use
        (``accumulator``: float32 for a half or bfloat16 weight).
        ``Gather`` hands it back in the weight's dtype."""
        if self.grad is None:
            self.grad = accumulator(weight_shape, weight_dtype, device)
        return self.grad


class Gather(torch.autograd.Function):
    """anchor = Gather(weight): a 1-element zero every lookup of the block
    takes as input; its backward returns the buffer (the weight's gradient)."""

    @staticmethod
    def forward(ctx, weight, buffer):
        ctx.buffer, ctx.dtype = buffer, weight.dtype
        return weight.new_zeros(1)

    @staticmethod
    def backward(ctx, _unused):
        grad, ctx.buffer.grad = ctx.buffer.grad, None  # a second backward (retain_graph) starts afresh
        return (None if grad is None else grad.to(ctx.dtype)), None


class StepLookup(torch.autograd.Function):
    """weight[ids] (ids of any shape), its weight gradient added into the buffer; the
    padding row gets none, as in ``F.embedding``."""

    @staticmethod
    def forward(ctx, ids, weight, anchor, buffer, padding_idx):
        ctx.save_for_backward(ids)
        ctx.buffer, ctx.padding_idx, ctx.shape, ctx.dtype = buffer, padding_idx, weight.shape, weight.dtype
        return F.embedding(ids, weight.detach(), padding_idx)

    @staticmethod
    def backward(ctx, grad_out):
        ids, = ctx.saved_tensors
        grad = ctx.buffer.start(ctx.shape, ctx.dtype, grad_out.device)
        flat, rows = ids.reshape(-1), grad_out.reshape(-1, ctx.shape[1]).to(grad.dtype)
        if ctx.padding_idx is not None:
            keep = flat.ne(ctx.padding_idx)
            flat, rows = flat[keep], rows[keep]
        grad.index_add_(0, flat, rows)
        return None, None, grad_out.new_zeros(1), None, None


def _plain(module: nn.Embedding) -> bool:
    return module.max_norm is None and not module.scale_grad_by_freq and not module.sparse


class _Block:
    """One open block: the anchor and buffer of each weight used in it."""

    def __init__(self, module):
        self.module = module
        self.anchors = {}

    def route(self, weight: Tensor):
        """(anchor, buffer) through which a use of ``weight`` adds its gradient
        (made at the first use with gradient), or None: no gradient wanted."""
        if not (torch.is_grad_enabled() and weight.requires_grad):
            return None
        if id(weight) not in self.anchors:
            buffer = _Buffer()
            self.anchors[id(weight)] = (Gather.apply(weight, buffer), buffer)
        return self.anchors[id(weight)]


_ACTIVE: List[_Block] = []  # the open blocks, innermost last


def active_route(weight: Tensor):
    """The innermost open block's (anchor, buffer) for ``weight``, or None (no
    block open, or no gradient wanted)."""
    return _ACTIVE[-1].route(weight) if _ACTIVE else None


def _lookup(route, weight: Tensor, ids: Tensor, padding_idx=None) -> Tensor:
    """weight[ids]: through ``route`` (a block's anchor and buffer), or plain."""
    if route is None:
        return F.embedding(ids, weight, padding_idx)
    return StepLookup.apply(ids, weight, *route, padding_idx)


def lookup_rows(weight: Tensor, ids: Tensor) -> Tensor:
    """``weight[ids]``: inside a block, its gradient added into the block's buffer."""
    return _lookup(active_route(weight), weight, ids)


@contextmanager
def gathered_embedding_grads(module):
    """Inside the block, the plain ``nn.Embedding`` lookups of ``module`` made
    with gradient gather their weight gradient into one tensor per weight
    (shared weights, e.g. tied input and output embeddings, share it), and so
    do the restricted output layer's uses of those weights."""
    if any(m is module for block in _ACTIVE for m in block.module.modules()):
        yield  # an open block covers this module already
        return
    block = _Block(module)
    patched = []

    def lookup_for(embedding):
        def lookup(ids: Tensor) -> Tensor:
            return _lookup(block.route(embedding.weight), embedding.weight, ids, embedding.padding_idx)
        return lookup

    for m in module.modules():
        # nn.Embedding itself only: subclasses have forwards of their own (fairseq's LearnedPositionalEmbedding
        # makes positions from tokens)
        if type(m) is nn.Embedding and _plain(m) and "forward" not in m.__dict__:
            m.forward = lookup_for(m)
            patched.append(m)
    _ACTIVE.append(block)
    try:
        yield
    finally:
        _ACTIVE.remove(block)
        for m in patched:
            del m.forward


@contextmanager
def suspended():
    """Inside, no block is open: lookups and output layers use their weights plainly (a CUDA graph
    captured here computes its own weight gradients; a block's buffer, made and added to outside the graph,
    would not be replayed).  The blocks and their lookups are back afterwards."""
    blocks, patched = list(_ACTIVE), []
    for block in blocks:
        for m in block.module.modules():
            if type(m) is nn.Embedding and "forward" in m.__dict__:
                patched.append((m, m.__dict__.pop("forward")))
    _ACTIVE.clear()
    try:
        yield
    finally:
        _ACTIVE.extend(blocks)
        for m, forward in patched:
            m.forward = forward
