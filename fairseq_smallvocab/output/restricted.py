"""The restricted output layer: a decoder's own linear output layer, scoring
only each example's K candidate words (c_b: K ids, ``candidates.space``):

    logits[b, t, k] = W[c_b[k]] . s[b, t] + b[c_b[k]]        (B x T x K)

with the decoder's own parameters (W, b: ``output.weights``): nothing is
added to the model, and ``candidates=None`` gives the full softmax by the
same code (one model, one code path).

Two autograd functions make it without the B x K x d gathered rows or the
B x T x K logits ever existing whole: ``CandidateLogits`` (the teacher-forced
logits) and ``CandidateLogProbs`` (the log-probabilities of chosen words, what
REINFORCE scores).  Both run their products in the wider of the states' and
the weights' dtypes and hand each gradient back in its input's dtype
(``_in_product_dtype``, ``_input_grads``), and both can add W's gradient into
an open ``gathered_embedding_grads`` block (``_routed``).
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_smallvocab.output.gathered_grad import accumulator, active_route, lookup_rows


class Scratch:
    """Buffers that every chunk of one forward or backward call reuses (the
    last, shorter chunk takes a prefix).  Why: a chunk's gathered rows and
    row gradients are 16 MB each (16 x 1000 x 256 floats), and a fresh tensor
    of that size comes from the OS with its pages faulted in again, which made
    a product into it several times slower than into a reused one (measured
    on the CPU)."""

    def __init__(self):
        self.buffers = {}

    def get(self, name: str, shape, like: Tensor) -> Tensor:
        numel = 1
        for size in shape:
            numel *= size
        buf = self.buffers.get(name)
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype or buf.device != like.device:
            buf = self.buffers[name] = like.new_empty(numel)
        return buf[:numel].view(*shape)


def gather_rows(table: Tensor, ids: Tensor, scratch: Optional[Scratch] = None, name: str = "rows") -> Tensor:
    """``table[ids]`` for ids of any shape (ids.shape + table.shape[1:]), by
    ``index_select`` on the flattened ids (into a reused buffer with
    ``scratch``): the same values, but on the CPU advanced indexing with a
    2-D index (aten::index) copied a chunk's rows several times slower, and
    it runs 25 times per REINFORCE step (measured on the CPU)."""
    shape = (*ids.shape, *table.shape[1:])
    if scratch is None:
        return table.index_select(0, ids.reshape(-1)).view(shape)
    out = scratch.get(name, shape, table)
    torch.index_select(table, 0, ids.reshape(-1), out=out.view(ids.numel(), *table.shape[1:]))
    return out


def _weight_grad(buffer, weight: Tensor) -> Tensor:
    """Where a backward adds W's gradient: a new zero tensor, or (routed
    through an open ``gathered_embedding_grads`` block) the block's buffer;
    float32 for a half or bfloat16 weight either way (``accumulator``: the
    chunks' and the repeated rows' contributions add up in it)."""
    if buffer is None:
        return accumulator(weight.shape, weight.dtype, weight.device)
    return buffer.start(weight.shape, weight.dtype, weight.device)


def _routed(features: Tensor, weight: Tensor):
    """(weight, anchor, buffer) for the autograd functions below: W detached and
    its gradient routed into the innermost open block's buffer when there is
    one (and W is in the products' dtype), else W itself."""
    if weight.dtype == torch.promote_types(features.dtype, weight.dtype):
        route = active_route(weight)
        if route is not None:
            return (weight.detach(), *route)
    return weight, None, None


def _in_product_dtype(features: Tensor, weight: Tensor, bias: Optional[Tensor]):
    """(features, weight, bias) in the wider of the states' and the weights' dtypes, the products' dtype
    (no copies when they already are)."""
    dtype = torch.promote_types(features.dtype, weight.dtype)
    return features.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)


def _remember_inputs(ctx, features: Tensor, weight: Tensor, bias: Optional[Tensor], buffer):
    """What the backward needs to hand gradients back: the inputs' dtypes, and the buffer W's gradient
    goes into (see _routed), if any."""
    ctx.dtypes = features.dtype, weight.dtype, None if bias is None else bias.dtype
    ctx.buffer = buffer


def _input_grads(ctx, grad_f, grad_w, grad_b, like: Tensor):
    """(features, weight, bias, anchor) gradients as autograd wants them: each in its input's dtype; W's
    none when it went into a block's buffer, whose anchor then takes a zero (so that the block's backward
    runs after this one)."""
    f_dtype, w_dtype, b_dtype = ctx.dtypes
    routed = ctx.buffer is not None
    return (None if grad_f is None else grad_f.to(f_dtype),
            None if grad_w is None or routed else grad_w.to(w_dtype),
            None if grad_b is None else grad_b.to(b_dtype),
            like.new_zeros(1) if routed else None)


def _add_row_grads(dz, features, gathered, rows, grad_f, grad_w, grad_b, scratch: Scratch):
    """The backward of a chunk's per-example logits (``dz``: chunk x T x K, the
    gradient of logits = features . gathered^T + b[rows]): the states'
    gradient written into ``grad_f`` (the chunk's slice, or None), and the
    rows' gradients added into W's and b's (index_add; None: not wanted)."""
    ids = rows.reshape(-1)
    if grad_f is not None:
        torch.bmm(dz, gathered, out=grad_f)
    if grad_w is not None:
        row_grads = scratch.get("row_grads", (dz.size(0), dz.size(2), features.size(2)), features)
        torch.bmm(dz.transpose(1, 2), features, out=row_grads)
        row_grads = row_grads.view(len(ids), -1)
        if row_grads.dtype != grad_w.dtype:  # a half weight's float32 sum (accumulator)
            row_grads = scratch.get("row_grads_wide", row_grads.shape, grad_w).copy_(row_grads)
        grad_w.index_add_(0, ids, row_grads)
    if grad_b is not None:
        grad_b.index_add_(0, ids, dz.sum(1, dtype=grad_b.dtype).reshape(-1))


class CandidateLogits(torch.autograd.Function):
    """logits[b, t, k] = W[c[b, k]] . s[b, t] + bias[c[b, k]], computed chunk by
    chunk of examples, forward and backward: the gathered rows of a chunk
    (chunk x K x d) are made, used and freed, and in the backward pass their
    gradient goes straight into W's and bias's (index_add), so peak memory
    holds neither all B x K x d gathered rows nor their gradient (131 MB
    each at B = 128, K = 1000, d = 256).  Same values as
    ``baddbmm(bias[c], s, W[c]^T)``, which the oracle tests check.

    Mixed precision: the products run in the wider of the states' and the
    weights' dtypes with autocast off inside (autocast rejects ``out=``), and
    each gradient goes back in its input's dtype.  ``bias`` may be None (a
    Transformer's ``output_projection`` has none)."""

    CHUNK = 16

    @staticmethod
    def forward(ctx, features, weight, bias, candidates, anchor=None, buffer=None):
        _remember_inputs(ctx, features, weight, bias, buffer)
        with torch.autocast(features.device.type, enabled=False):
            features, weight, bias = _in_product_dtype(features, weight, bias)
            bsz, steps, _ = features.shape
            out = features.new_empty(bsz, steps, candidates.size(1))
            scratch = Scratch()
            for start in range(0, bsz, CandidateLogits.CHUNK):
                rows = candidates[start: start + CandidateLogits.CHUNK]
                chunk = features[start: start + len(rows)]
                rows_t, dest = gather_rows(weight, rows, scratch).transpose(1, 2), out[start: start + len(rows)]
                if bias is None:
                    torch.bmm(chunk, rows_t, out=dest)
                else:
                    torch.baddbmm(gather_rows(bias, rows).unsqueeze(1), chunk, rows_t, out=dest)
        ctx.save_for_backward(features, weight, candidates)
        ctx.bias_shape = None if bias is None else bias.shape
        return out

    @staticmethod
    def backward(ctx, grad_out):
        features, weight, candidates = ctx.saved_tensors
        need_f, need_w, need_b = ctx.needs_input_grad[:3]
        need_w = need_w or ctx.buffer is not None
        need_b = need_b and ctx.bias_shape is not None
        with torch.autocast(features.device.type, enabled=False):
            grad_out = grad_out.to(features.dtype)
            grad_f = torch.empty_like(features) if need_f else None
            grad_w = _weight_grad(ctx.buffer, weight) if need_w else None
            grad_b = accumulator(ctx.bias_shape, grad_out.dtype, grad_out.device) if need_b else None
            scratch = Scratch()
            for start in range(0, features.size(0), CandidateLogits.CHUNK):
                rows = candidates[start: start + CandidateLogits.CHUNK]
                sl = slice(start, start + len(rows))
                _add_row_grads(grad_out[sl], features[sl], gather_rows(weight, rows, scratch) if need_f else None,
                               rows, grad_f[sl] if need_f else None, grad_w, grad_b, scratch)
        grad_f, grad_w, grad_b, grad_anchor = _input_grads(ctx, grad_f, grad_w, grad_b, grad_out)
        return grad_f, grad_w, grad_b, None, grad_anchor, None


class CandidateLogProbs(torch.autograd.Function):
    """The log-probabilities of chosen words, log p(y[b, t]) = z[b, t, y] -
    logsumexp_k z[b, t, k] with z the restricted logits (``positions``: the
    chosen index among the example's candidates, or the word id when
    ``candidates`` is None; ``excluded``: indices whose logit is -inf), made
    chunk by chunk of examples without the B x T x K logits ever existing
    whole, forward and backward.

    This is what REINFORCE needs of the output layer for its T sampled steps:
    composed from ``restricted_logits``, masking, ``log_softmax`` and
    ``gather``, the full softmax's step made and passed over four B x T x V
    tensors (logits, log-softmax, and their gradients, plus copies for the
    in-place masking), which took most of its time (measured on the CPU;
    docs/results.md, "CPU speed vs the paper's code").  Here a chunk's logits are made, used and freed; the backward
    makes them again (one more product, in place of reading 950 MB tensors)
    and forms the gradient of the chosen log-probabilities directly,
    dL/dz = g (onehot(y) - softmax(z)).  Same values and gradients as the
    composition (the oracle tests check both, small and full softmax).

    With ``probs`` (B x T x K, the softmax each step was sampled from at
    temperature 1, kept by the sampler) and ``chosen`` (B x T, the drawn
    words' log-probabilities), the forward returns ``chosen`` and the
    backward forms dL/dz from ``probs``: no logits are made at all, and the
    backward's only products are the two that give the gradients of the
    states and of W.

    Products run in the wider of the states' and the weights' dtypes, the
    softmax in float32; gradients go back in their inputs' dtypes."""

    # logits per chunk (elements): 32 MB of float32
    CHUNK_ELEMENTS = 2 ** 23
    MAX_EXAMPLES = 16  # per chunk with candidates: their gathered rows (chunk x K x d)

    @staticmethod
    def _chunks(bsz, steps, width, candidates):
        per_chunk = max(1, CandidateLogProbs.CHUNK_ELEMENTS // max(1, steps * width))
        if candidates is not None:
            per_chunk = min(per_chunk, CandidateLogProbs.MAX_EXAMPLES)
        return [slice(start, min(bsz, start + per_chunk)) for start in range(0, bsz, per_chunk)]

    @staticmethod
    def _logits(features, weight, bias, rows, scratch):
        """float32 logits of a chunk (chunk x T x K, or x V with ``rows`` None) and the chunk's gathered rows."""
        if rows is None:
            return F.linear(features, weight, bias).float(), None
        gathered = gather_rows(weight, rows, scratch)  # chunk x K x d
        if bias is None:
            return torch.bmm(features, gathered.transpose(1, 2)).float(), gathered
        return torch.baddbmm(gather_rows(bias, rows).unsqueeze(1), features, gathered.transpose(1, 2)).float(), gathered

    @staticmethod
    def forward(ctx, features, weight, bias, candidates, positions, excluded, probs=None, chosen=None,
                anchor=None, buffer=None):
        _remember_inputs(ctx, features, weight, bias, buffer)
        if probs is not None:
            ctx.save_for_backward(features, weight, bias, candidates, positions, probs)
            ctx.excluded, ctx.width, ctx.stored = excluded, probs.size(-1), True
            return chosen.clone()
        with torch.autocast(features.device.type, enabled=False):
            features, weight, bias = _in_product_dtype(features, weight, bias)
            bsz, steps, _ = features.shape
            width = weight.size(0) if candidates is None else candidates.size(1)
            out = features.new_empty(bsz, steps, dtype=torch.float)
            lse = features.new_empty(bsz, steps, dtype=torch.float)
            scratch = Scratch()
            for sl in CandidateLogProbs._chunks(bsz, steps, width, candidates):
                z, _ = CandidateLogProbs._logits(features[sl], weight, bias,
                                                 None if candidates is None else candidates[sl], scratch)
                z[:, :, excluded] = float("-inf")
                lse[sl] = torch.logsumexp(z, -1)
                out[sl] = z.gather(-1, positions[sl].unsqueeze(-1)).squeeze(-1) - lse[sl]
        ctx.save_for_backward(features, weight, bias, candidates, positions, lse)
        ctx.excluded, ctx.width, ctx.stored = excluded, width, False
        return out

    @staticmethod
    def backward(ctx, grad_out):
        features, weight, bias, candidates, positions, kept = ctx.saved_tensors  # kept: probs, or the lse
        need_f, need_w, need_b = ctx.needs_input_grad[:3]
        need_w = need_w or ctx.buffer is not None
        need_b = need_b and bias is not None
        bsz, steps, dim = features.shape
        with torch.autocast(features.device.type, enabled=False):
            grad_out = grad_out.float()
            features, weight, bias = _in_product_dtype(features, weight, bias)  # no-ops unless the probs were kept
            dtype = features.dtype
            # contiguous (a Transformer's states are a transposed view, whose strides empty_like would keep): the
            # chunks' products write into slices of it
            grad_f = features.new_empty(features.shape) if need_f else None
            grad_w = _weight_grad(ctx.buffer, weight) if need_w else None
            grad_b = accumulator(bias.shape, dtype, bias.device) if need_b else None
            scratch = Scratch()
            for sl in CandidateLogProbs._chunks(bsz, steps, ctx.width, candidates):
                rows = None if candidates is None else candidates[sl]
                g = grad_out[sl].unsqueeze(-1)  # chunk x T x 1
                # dL/dz = g * (onehot(y) - softmax(z))
                if ctx.stored:
                    dz = torch.mul(kept[sl], -g, out=scratch.get("dz", kept[sl].shape, kept))
                    gathered = gather_rows(weight, rows, scratch) if rows is not None and need_f else None
                else:  # in place over the chunk's logits, made again
                    z, gathered = CandidateLogProbs._logits(features[sl], weight, bias, rows, scratch)
                    z[:, :, ctx.excluded] = float("-inf")
                    dz = z.sub_(kept[sl].unsqueeze(-1)).exp_().mul_(-g)
                dz.scatter_add_(-1, positions[sl].unsqueeze(-1), g)
                dz = dz.to(features.dtype)
                if rows is None:
                    if need_f:
                        torch.matmul(dz, weight, out=grad_f[sl])
                    if need_w:  # the chunk's product in the products' dtype, the sum over chunks in grad_w's
                        chunk_w = (dz.reshape(-1, dz.size(-1)).t(), features[sl].reshape(-1, dim))
                        if grad_w.dtype == dtype:
                            grad_w.addmm_(*chunk_w)
                        else:  # each chunk's product rounded to the products' dtype once, then summed in float32
                            grad_w += torch.mm(*chunk_w, out=scratch.get("chunk_w", grad_w.shape, dz))
                    if need_b:
                        grad_b += dz.sum((0, 1), dtype=grad_b.dtype)
                else:
                    _add_row_grads(dz, features[sl], gathered, rows, grad_f[sl] if need_f else None, grad_w, grad_b,
                                   scratch)
        grad_f, grad_w, grad_b, grad_anchor = _input_grads(ctx, grad_f, grad_w, grad_b, grad_out)
        return grad_f, grad_w, grad_b, None, None, None, None, None, grad_anchor, None


def candidate_log_probs(features: Tensor, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
                        positions: Tensor, excluded, probs: Optional[Tensor] = None,
                        chosen: Optional[Tensor] = None) -> Tensor:
    """B x T float32 log p(chosen word) under the restricted softmax
    (``CandidateLogProbs``; with the sampler's kept ``probs`` and ``chosen``
    log-probabilities, no logits are made)."""
    if (probs is None) != (chosen is None):
        raise ValueError("candidate_log_probs: probs and chosen go together (both kept by the sampler, or neither)")
    weight, anchor, buffer = _routed(features, weight)
    return CandidateLogProbs.apply(features, weight, bias, candidates, positions, list(excluded), probs, chosen,
                                   anchor, buffer)


def batch_union(candidates: Tensor) -> Tuple[Tensor, Tensor]:
    """The union U of a batch's candidates (sorted ids, |U|) and each candidate's index in U (the shape of
    ``candidates``): scoring U with one product and picking each row's K is the per-example logits."""
    return torch.unique(candidates, return_inverse=True)


# the batch union is scored with one product when it has at most this many words per candidate row, by default:
# where the union's product and the per-example rows cost the same (scripts/bench_output_layer.py)
UNION_MAX_RATIO = 2.0


def restricted_logits(features: Tensor, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
                      union_max_ratio: float = UNION_MAX_RATIO) -> Tensor:
    """B x T x K logits over each example's candidates (B x K ids), or B x T x V
    with ``candidates=None``.  Two ways to the same values, the faster for the
    batch: when the batch's candidates overlap so much that their union U has
    at most ``union_max_ratio`` x K words (a predictor's lists share their
    frequent words), one product with U's rows and each row's K picked out of
    it; otherwise each example's own rows (``CandidateLogits``)."""
    if candidates is None:
        return F.linear(features, weight, bias)
    union, pos = batch_union(candidates)
    if len(union) <= union_max_ratio * candidates.size(1):
        scores = F.linear(features, lookup_rows(weight, union), None if bias is None else gather_rows(bias, union))
        return scores.gather(-1, pos.unsqueeze(1).expand(-1, features.size(1), -1))
    weight, anchor, buffer = _routed(features, weight)
    return CandidateLogits.apply(features, weight, bias, candidates, anchor, buffer)


