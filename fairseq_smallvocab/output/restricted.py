"""The restricted output layer: a decoder's own linear output layer, scoring
only each example's K candidate words.

A fairseq decoder ends with logits = W s_t + b over the whole target
vocabulary V (W: |V| x d; ``output_projection`` of a Transformer, with W the
target embedding when embeddings are tied; ``fc_out`` or the tied embedding
of fairseq's ``lstm``; the target embedding and ``output_bias`` of the
plugin's LSTMs).  With the candidates c_b of example b (K ids, see
``candidates.space``), the restricted layer computes

    logits[b, t, k] = W[c_b[k]] . s[b, t] + b[c_b[k]]        (B x T x K)

with the decoder's own parameters: nothing is added to the model, so its
state-dict keys stay the stock ones, and ``candidates=None`` gives the full
softmax by the same code (one model, one code path).

``find_output_weights`` discovers W and b and checks, on random features, that
the decoder's ``output_layer`` is exactly that linear map; a model whose output
cannot be restricted (adaptive softmax, a non-linear head, no incremental
decoder) is refused, naming the arch and the reason.
"""

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor, nn

from fairseq_smallvocab.candidates.space import batch_union
from fairseq_smallvocab.output.gathered_grad import accumulator, active_route, lookup_rows


class RestrictionError(ValueError):
    """A model whose output layer cannot be restricted to candidates."""


class Scratch:
    """Buffers that every chunk of one forward or backward call reuses (the
    last, shorter chunk takes a prefix).  Why: a chunk's gathered rows and
    row gradients are 16 MB each (16 x 1000 x 256 floats), and a fresh tensor
    of that size comes from the OS with its pages faulted in again: the same
    bmm took 4.5 ms into a new tensor and 1.5 ms into a reused one (2 threads)."""

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
    2-D index (aten::index) copied a chunk's rows 5x slower (16 x 1000 rows
    of 256 floats: 7.8 vs 1.4 ms, 2 threads); it runs 25 times per
    REINFORCE step (docs/RESULTS.md: the step gained about 5%)."""
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
        ctx.dtypes = features.dtype, weight.dtype, None if bias is None else bias.dtype
        ctx.buffer = buffer  # W's gradient goes into it (see _routed), not into a new tensor
        dtype = torch.promote_types(features.dtype, weight.dtype)
        with torch.autocast(features.device.type, enabled=False):
            features, weight = features.to(dtype), weight.to(dtype)
            bias = None if bias is None else bias.to(dtype)
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
        f_dtype, w_dtype, b_dtype = ctx.dtypes
        routed = ctx.buffer is not None
        return (None if grad_f is None else grad_f.to(f_dtype),
                None if grad_w is None or routed else grad_w.to(w_dtype),
                None if grad_b is None else grad_b.to(b_dtype), None,
                grad_out.new_zeros(1) if routed else None, None)


class CandidateLogProbs(torch.autograd.Function):
    """The log-probabilities of chosen words, log p(y[b, t]) = z[b, t, y] -
    logsumexp_k z[b, t, k] with z the restricted logits (``positions``: the
    chosen index among the example's candidates, or the word id when
    ``candidates`` is None; ``excluded``: indices whose logit is -inf), made
    chunk by chunk of examples without the B x T x K logits ever existing
    whole, forward and backward.

    This is what REINFORCE needs of the output layer for its T sampled steps:
    composed from ``restricted_logits``, masking, ``log_softmax`` and
    ``gather``, the full softmax's step (T = 99, |V| = 18.7K, B = 128) made
    and passed over four B x T x V tensors of 950 MB (logits, log-softmax,
    and their gradients, plus copies for the in-place masking), which took
    most of its time (torch.profiler: copy_, fill_, log_softmax and its
    backward).  Here a chunk's logits are made, used and freed; the backward
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
        ctx.dtypes = features.dtype, weight.dtype, None if bias is None else bias.dtype
        ctx.buffer = buffer  # W's gradient goes into it (see _routed), not into a new tensor
        if probs is not None:
            ctx.save_for_backward(features, weight, bias, candidates, positions, probs)
            ctx.excluded, ctx.width, ctx.stored = excluded, probs.size(-1), True
            return chosen.clone()
        dtype = torch.promote_types(features.dtype, weight.dtype)
        with torch.autocast(features.device.type, enabled=False):
            features, weight = features.to(dtype), weight.to(dtype)
            bias = None if bias is None else bias.to(dtype)
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
        dtype = torch.promote_types(features.dtype, weight.dtype)
        with torch.autocast(features.device.type, enabled=False):
            grad_out = grad_out.float()
            features, weight = features.to(dtype), weight.to(dtype)  # no-ops unless the probs were kept
            bias = None if bias is None else bias.to(dtype)
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
        f_dtype, w_dtype, b_dtype = ctx.dtypes
        routed = ctx.buffer is not None
        return (None if grad_f is None else grad_f.to(f_dtype),
                None if grad_w is None or routed else grad_w.to(w_dtype),
                None if grad_b is None else grad_b.to(b_dtype), None, None, None, None, None,
                grad_out.new_zeros(1) if routed else None, None)


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


@dataclass(frozen=True)
class OutputWeights:
    """Where a decoder keeps W and b: parameter names inside the decoder
    (looked up at every use, so that ``.to()``, ``.half()`` and loading a
    state dict are always seen)."""

    weight: str
    bias: Optional[str] = None

    def get(self, decoder) -> Tuple[Tensor, Optional[Tensor]]:
        return (decoder.get_parameter(self.weight),
                None if self.bias is None else decoder.get_parameter(self.bias))


# where stock fairseq decoders and the plugin's keep their output layer, most specific first
_WEIGHT_NAMES = ("output_projection.weight", "fc_out.weight", "embed_tokens.weight")


def _named(decoder, name) -> Optional[Tensor]:
    try:
        return decoder.get_parameter(name)
    except AttributeError:
        return None


def find_output_weights(decoder, arch: str) -> OutputWeights:
    """W and b of ``decoder.output_layer``, checked to be that layer: on
    random features, ``output_layer(x) == x W^T + b``."""
    if not isinstance(decoder, FairseqIncrementalDecoder):
        raise RestrictionError(f"arch '{arch}': its decoder ({type(decoder).__name__}) is not an incremental "
                               "decoder (FairseqIncrementalDecoder), so it cannot sample or decode step by step "
                               "inside a small vocabulary")
    if getattr(decoder, "adaptive_softmax", None) is not None:
        raise RestrictionError(f"arch '{arch}' uses an adaptive softmax, which has no output row per word for "
                               "its tail clusters: train it without --adaptive-softmax-cutoff to use a small "
                               "vocabulary")
    vocab = len(decoder.dictionary)
    tried = []
    for weight_name in _WEIGHT_NAMES:
        weight = _named(decoder, weight_name)
        if weight is None or weight.dim() != 2 or weight.size(0) != vocab:
            continue
        module = weight_name.rsplit(".", 1)[0]
        biases = [name for name in (f"{module}.bias", "output_bias") if _named(decoder, name) is not None]
        for bias_name in biases + [None]:
            spec = OutputWeights(weight_name, bias_name)
            tried.append(f"{weight_name}{' + ' + bias_name if bias_name else ''}")
            if _is_output_layer(decoder, spec):
                return spec
    detail = f"it is not x W^T + b with {' or '.join(tried)}" if tried else \
        f"no {' / '.join(_WEIGHT_NAMES)} parameter with one row per target word ({vocab})"
    raise RestrictionError(f"arch '{arch}': the decoder's output layer cannot be restricted to candidates: "
                           f"{detail} (a small vocabulary needs a linear output layer over the target dictionary)")


@contextmanager
def eval_mode(module):
    """Every submodule computes as in eval mode inside the block (no dropout,
    no LayerDrop), its own flag restored after.

    PyTorch's recurrent layers (``nn.LSTM``, ``nn.GRU``, ...) are the
    exception in form, not in effect: they stay in training mode with their
    inter-layer dropout set to 0, which computes exactly what eval mode
    computes (that dropout is their only train/eval difference), because
    cuDNN refuses the backward of an RNN run in eval mode ("cudnn RNN
    backward can only be called in training mode"), and REINFORCE
    differentiates through the policy's encoder."""
    modes = [(m, m.training) for m in module.modules()]
    rnn_dropouts = [(m, m.dropout) for m in module.modules() if isinstance(m, nn.RNNBase)]
    module.eval()
    for m, _ in rnn_dropouts:
        m.training, m.dropout = True, 0.0
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode
        for m, dropout in rnn_dropouts:
            m.dropout = dropout


@torch.no_grad()
def _is_output_layer(decoder, spec: OutputWeights) -> bool:
    weight, bias = spec.get(decoder)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(2, 3, weight.size(1), generator=gen).to(device=weight.device, dtype=weight.dtype)
    with eval_mode(decoder):
        try:
            got = decoder.output_layer(x)
        except Exception:  # a head that does not take features of this size is not this linear map
            return False
    want = F.linear(x, weight, bias)
    return torch.is_tensor(got) and got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5)


# the batch union is scored with one product when it has at most this many words per candidate row:
# measured by scripts/bench_output_layer.py (forward + backward, d = 512, T = 30), the union's product
# costs as much as the per-example rows when |U| is about 3-4 K (B = 32 and 128)
UNION_MAX_RATIO = 2.0


def restricted_logits(features: Tensor, weight: Tensor, bias: Optional[Tensor],
                      candidates: Optional[Tensor]) -> Tensor:
    """B x T x K logits over each example's candidates (B x K ids), or B x T x V
    with ``candidates=None``.  Two ways to the same values, the faster for the
    batch: when the batch's candidates overlap so much that their union U has
    at most ``UNION_MAX_RATIO`` x K words (a predictor's lists share their
    frequent words), one product with U's rows and each row's K picked out of
    it; otherwise each example's own rows (``CandidateLogits``)."""
    if candidates is None:
        return F.linear(features, weight, bias)
    union, pos = batch_union(candidates)
    if len(union) <= UNION_MAX_RATIO * candidates.size(1):
        scores = F.linear(features, lookup_rows(weight, union), None if bias is None else gather_rows(bias, union))
        return scores.gather(-1, pos.unsqueeze(1).expand(-1, features.size(1), -1))
    weight, anchor, buffer = _routed(features, weight)
    return CandidateLogits.apply(features, weight, bias, candidates, anchor, buffer)


# the fewest decoding rows for which ``UnionScorer`` makes the union's scores transposed on the CPU (see there)
TRANSPOSED_MIN_ROWS = 32


class UnionScorer:
    """Step-wise scoring (sampling, beam search) inside each row's candidates:
    the rows of W and b for the union U of the batch's candidates are gathered
    once; every step then scores U for all rows with one matrix product
    (memory traffic |U| x d, against rows x K x d for per-example rows) and
    picks each row's K out of it.  ``sent`` maps each decoding row to its
    example and follows the generator's reorderings (``reorder``).  Without
    candidates it scores the whole vocabulary.  No gradient."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor]):
        weight = weight.detach()
        bias = None if bias is None else bias.detach()
        if candidates is None:
            self.weight, self.bias, self.pos = weight, bias, None
        else:
            union, self.pos = batch_union(candidates)
            self.weight = gather_rows(weight, union)
            self.bias = None if bias is None else gather_rows(bias, union)
        self.sent = None if candidates is None else torch.arange(len(candidates), device=candidates.device)
        self.row_pos = self.pos  # each row's K positions in U (made again after a reordering, when next used)

    def reorder(self, new_order: Tensor):
        if self.sent is not None:
            self.sent = self.sent.index_select(0, new_order)
            self.row_pos = None

    def __call__(self, features: Tensor) -> Tensor:
        """rows x d (or rows x T x d) states -> rows x K (or rows x T x K) logits."""
        features = features.to(self.weight.dtype)
        if (self.pos is not None and features.dim() == 2 and features.size(0) >= TRANSPOSED_MIN_ROWS
                and features.device.type == "cpu"):
            # the union's scores made as W_U s^T (|U| x rows) and read through a transposed view: on the
            # CPU (MKL, 2 threads) this orientation ran 1.25-1.3x faster than F.linear's rows x |U| for
            # 32 to 320 rows, gather included (|U| = 4,419, d = 256; 15% slower for 5 rows, hence the floor;
            # not measured on CUDA, which keeps F.linear)
            bias = self.bias
            scores = (torch.mm(self.weight, features.t()) if bias is None
                      else torch.addmm(bias.unsqueeze(1), self.weight, features.t())).t()
        else:
            scores = F.linear(features, self.weight, self.bias)
        if self.pos is None:
            return scores
        if self.row_pos is None:
            self.row_pos = self.pos.index_select(0, self.sent)
        pos = self.row_pos
        if scores.dim() == 3:
            pos = pos.unsqueeze(1).expand(-1, scores.size(1), -1)
        return scores.gather(-1, pos)
