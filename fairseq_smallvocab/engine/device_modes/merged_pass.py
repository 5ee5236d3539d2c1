"""One teacher-forced pass for the CE term and the samples' scores (the settings' ``merged_pass``).

A REINFORCE step runs the decoder teacher-forced twice with gradient: over
the gold targets for the CE term (training mode: dropout) and, where the
sampling loop keeps no graph (a Transformer; a recurrent decoder whose step
is captured), over the samples to score them (eval mode: no dropout); and
the encoder twice, once in each mode.  ``run`` makes each one pass, over the
rows of both:

    encoder: each source twice, adjacent (rows 2b: training's, with dropout;
             2b + 1: the policy's, without; adjacent rows keep the lengths
             sorted, as fairseq's LSTM encoder needs them)
    decoder: [gold prefixes (B rows, with dropout); sample prefixes (B * N
             rows, without)], padded at the end to one length, each row on its
             own encoder row (``reorder_encoder_out``)

then splits the outputs: the gold rows' states give the CE logits, the
sample rows' the samples' log-probabilities (``sampling.score``).  Between
the two passes the policy draws its samples on the encoder's eval rows, as
``sampling.sample_and_score`` does.  A recurrent decoder then runs half as many
sequential steps, a Transformer half as many kernel launches.

Dropout for some rows only: ``RowDropout`` (a ``TorchFunctionMode``) takes
every ``F.dropout`` call in training mode and applies its mask to the
dropout rows only; a call's row dimension is the one dimension whose size is
a multiple of the pass's rows (R x ..., T x R x C, or R * heads x T x S for
attention).  The rows are padded (copies of the last row, without dropout)
to a prime of at least 11 that divides no length of the pass, so that no
other dimension is taken for it; a call where two dimensions could be is
refused.  The masks are drawn from the same generator as ``F.dropout``'s,
for the whole input (the other rows' part unused): the same distribution as
the two passes, not the same draws.

Where it does not apply (``why_not``): dropout that no Python call draws
(an ``nn.LSTM``'s between its layers, torch's fused attention's), LayerDrop
(a draw per batch, not per row), batch norm, the graphed pass (it replays its
own program); the step then runs its two passes, and the log says why once.
"""

from contextlib import nullcontext
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from fairseq_smallvocab.engine import sampling
from fairseq_smallvocab.engine.request import SampleRequest
from fairseq_smallvocab.output.restricted import restricted_logits
from fairseq_smallvocab.output.weights import eval_mode


class RowDropout(TorchFunctionMode):
    """``F.dropout`` in training mode on the rows ``rows`` (a bool per row of the pass) only; the other rows
    pass unchanged (see the module)."""

    def __init__(self, rows: Tensor):
        super().__init__()
        self.rows = rows

    def mask(self, x: Tensor, p: float) -> Tensor:
        """The keep-mask of a dropout call (1 - p of the entries kept)."""
        return torch.empty_like(x).bernoulli_(1.0 - p)

    def row_dim(self, x: Tensor):
        """(dimension, rows per pass row) of a dropout input: the one dimension whose size is a multiple of
        the pass's rows."""
        rows = self.rows.numel()
        dims = [d for d, size in enumerate(x.shape) if size and size % rows == 0]
        if len(dims) != 1:
            raise RuntimeError(f"merged pass: a dropout input of shape {tuple(x.shape)} has no single dimension "
                               f"of the pass's {rows} rows; --rl-engine merged_pass=off runs the two passes")
        return dims[0], x.size(dims[0]) // rows

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            x, p, training, inplace = _dropout_args(*args, **kwargs)
            if training and p > 0:
                dim, per_row = self.row_dim(x)
                shape = [1] * x.dim()
                shape[dim] = -1
                on = self.rows.to(x.device).repeat_interleave(per_row).view(shape)
                dropped = x * self.mask(x, p) * (1.0 / (1.0 - p)) if p < 1 else torch.zeros_like(x)
                out = torch.where(on, dropped, x)
                return x.copy_(out) if inplace else out
        elif func is F.multi_head_attention_forward and _fused_dropout(*args, **kwargs):
            raise RuntimeError("merged pass: torch's fused attention draws its own dropout; "
                               "--rl-engine merged_pass=off runs the two passes")
        return func(*args, **kwargs)


def _dropout_args(input, p=0.5, training=True, inplace=False):
    return input, p, training, inplace


def _fused_dropout(*args, **kwargs) -> bool:
    dropout_p = kwargs.get("dropout_p", args[10] if len(args) > 10 else 0.0)
    training = kwargs.get("training", args[13] if len(args) > 13 else True)
    return bool(training) and dropout_p > 0


def why_not(model, settings) -> Optional[str]:
    """Why the step runs two passes, or None: the merged one applies."""
    if not settings.merged_pass:
        return "off"
    if settings.graphed_pass != "off":
        return "the graphed pass replays its own program (--rl-engine graphed_pass=off merges)"
    for module in model.modules():
        if isinstance(module, nn.RNNBase) and module.dropout > 0 and module.num_layers > 1:
            return f"{type(module).__name__}'s dropout between its layers is drawn inside it, for every row"
        if getattr(module, "p", 0) and type(module).__name__ == "LayerDropModuleList":
            return "LayerDrop draws its layers per batch, not per row"
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return "batch norm's statistics are the batch's"
        dropout = getattr(module, "dropout_module", None)
        if type(module).__name__ == "MultiheadAttention" and dropout is not None and dropout.p > 0:
            return "attention dropout is drawn inside torch's fused attention, for every row"
    return None


def _rows(real: int, lengths: List[int]) -> int:
    """The pass's rows: a prime >= max(real, 11) that divides none of ``lengths`` (see the module)."""
    rows = max(real, 11)
    while any(rows % k == 0 for k in range(2, int(rows ** 0.5) + 1)) or any(n % rows == 0 for n in lengths if n):
        rows += 1
    return rows


def _grown(x: Tensor, rows: int) -> Tensor:
    """``x`` with copies of its last row appended up to ``rows`` rows."""
    return torch.cat([x, x[-1:].expand(rows - x.size(0), *x.shape[1:])]) if rows > x.size(0) else x


def _padded(tokens: Tensor, steps: int, pad: int) -> Tensor:
    return F.pad(tokens, (0, steps - tokens.size(1)), value=pad)


def run(model, net_input: dict, prev_output_tokens: Tensor, candidates: Optional[Tensor], request: SampleRequest,
        keep_graph: bool, features_only: bool = False):
    """The restricted model's forward with a REINFORCE request, in one encoder and one decoder pass (see the
    module): (the gold rows' logits, or with ``features_only`` their decoder states, the decoder's extra
    output, the policy's ``greedy`` and scored ``samples``)."""
    settings, bsz = request.settings, prev_output_tokens.size(0)
    device = prev_output_tokens.device
    src = net_input.get("src_tokens")
    src_len = src.size(1) if src is not None and src.dim() > 1 else 0
    enc_rows = _rows(2 * bsz, [src_len])
    order = _grown(torch.arange(bsz, device=device).repeat_interleave(2), enc_rows)
    net2 = {key: value.index_select(0, order) if torch.is_tensor(value) and value.dim() and value.size(0) == bsz
            else value for key, value in net_input.items()}
    trained = torch.zeros(enc_rows, dtype=torch.bool, device=device)
    trained[: 2 * bsz: 2] = True
    with RowDropout(trained):
        encoder_out = model.encoder(**net2)
    evens = torch.arange(bsz, device=device) * 2
    reorder = model.encoder.reorder_encoder_out
    with eval_mode(model):  # the policy's draws on the eval rows
        drawn = sampling.draw(model, reorder(encoder_out, evens + 1), candidates, request, keep_graph)
    samples, pad = drawn.samples, model.decoder.dictionary.pad()
    scored = samples.features is None and samples.tokens.size(1) > 0  # (kept graph: scored from its states)
    prevs, rows_of = [prev_output_tokens], [evens]
    if scored:
        tokens = samples.tokens
        prevs.append(torch.cat([tokens.new_full((tokens.size(0), 1), model.decoder.dictionary.eos()),
                                tokens[:, :-1]], dim=1))
        rows_of.append((evens + 1).repeat_interleave(request.num_samples))
    steps = max(x.size(1) for x in prevs)
    real = sum(x.size(0) for x in prevs)
    dec_rows = _rows(real, [steps, src_len]) if scored else real
    prev = _grown(torch.cat([_padded(x, steps, pad) for x in prevs]), dec_rows)
    dropped = torch.zeros(dec_rows, dtype=torch.bool, device=device)
    dropped[:bsz] = True
    with RowDropout(dropped) if scored else nullcontext():  # (gold rows alone: every row's dropout applies)
        features, _ = model.decoder.extract_features(prev, reorder(encoder_out, _grown(torch.cat(rows_of), dec_rows)))
    weight, bias = model.output_weights()
    gold = features[:bsz, : prev_output_tokens.size(1)]
    out = gold if features_only else restricted_logits(gold, weight, bias, candidates, settings.union_max_ratio)
    if scored:
        samples.features = features[bsz: real, : samples.tokens.size(1)]
    drawn.out["samples"] = sampling.score(model, drawn.encoder_out, drawn.candidates, samples, drawn.request)
    return out, {"attn": [None]}, drawn.out
