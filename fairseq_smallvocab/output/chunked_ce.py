"""The full softmax's cross-entropy without a (tokens x |V|) tensor: the
honest full-vocabulary baseline.

A plain full softmax makes the gold targets' B x T x |V| logits, their
log-softmax and both gradients; at |V| = 128K-256K those are the step's
largest tensors.  The best full-vocabulary practice (Cut Cross-Entropy,
Liger's fused linear cross-entropy) never holds them: the logits of a chunk
of rows are made, reduced to what the loss needs and freed, and made again in
the backward.  ``full_cross_entropy`` is that, in PyTorch (CPU and GPU), from
the decoder's states and the output layer's weights:

    log p(y_t) = z_t[y_t] - logsumexp(z_t)      chunk by chunk of examples
                                                (``CandidateLogProbs`` with no candidates;
                                                its backward makes the chunk's logits again)
    sum_v log p_v(t) = sum_v z_t[v] - |V| logsumexp(z_t)
                     = s_t . (sum_v W_v) + sum_v b_v - |V| (z_t[y_t] - log p(y_t))

so that label smoothing (fairseq's ``label_smoothed_nll_loss``) needs no
|V|-wide tensor either.  Same loss and gradients as
``objective.cross_entropy`` over the plain log-softmax (tested), and with
REINFORCE's scoring pass (which already makes its logits chunk by chunk) and
no kept sampling probabilities (``engine.sampling``), the whole step holds at
most one chunk's logits: ``--rl-full-softmax chunked``."""

from typing import Optional

import torch
from torch import Tensor

from fairseq_smallvocab.output.restricted import candidate_log_probs


def full_cross_entropy(features: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                       label_smoothing: float, pad: int) -> Tensor:
    """L_c of ``objective.cross_entropy`` for the full softmax over ``weight``'s |V| rows, from the decoder
    states ``features`` (B x T x d) and the gold ids ``target`` (B x T), summed over its tokens, pad excluded,
    made chunk by chunk of examples (see the module)."""
    lprobs = candidate_log_probs(features, weight, bias, None, target, excluded=())  # B x T float32
    keep = target.ne(pad)
    nll = -lprobs.masked_fill(~keep, 0.0).sum()
    if label_smoothing <= 0:
        return nll
    vocab = weight.size(0)
    gold = (features * weight[target]).sum(-1).float()  # z_t[y_t]
    total = torch.matmul(features, weight.sum(0)).float()  # sum_v z_t[v]
    if bias is not None:
        gold = gold + bias[target].float()
        total = total + bias.sum().float()
    sum_lprobs = total - vocab * (gold - lprobs)
    # fairseq's label_smoothed_nll_loss, whose two per-token terms are -log p(y) and -sum_v log p_v
    smooth = -sum_lprobs.masked_fill(~keep, 0.0).sum()
    eps_i = label_smoothing / (vocab - 1)
    return (1.0 - label_smoothing - eps_i) * nll + eps_i * smooth
