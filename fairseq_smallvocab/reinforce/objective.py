"""The loss of REINFORCE mixed with cross-entropy, as pure functions (the
criterion ``smallvocab_reinforce`` calls them; the paper's section 2.2 / 4.2).

For sample j of example b (N samples per example), with its reward R_bj,
the baseline b_bjt of each of its steps and the model's log-probabilities
log p(y_bjt):

    A_bjt = (R_bj - b_bjt) * m_bjt                   (m: the steps that count, the sampled eos included)
    L_r   = - sum_b (1/N) sum_j sum_t A_bjt log p(y_bjt)
    L     = w L_c + (1 - w) L_r                      (L_c: the gold target's CE; w: --ce-weight)

summed over the batch: N samples give the average of N single-sample
gradients, not N times one.

Sequence-level risk (``--rl-objective risk``; Shen et al. 2016, Edunov et
al. 2018) weighs the distinct samples U_b of example b (a repeated sample
counts once) by the softmax of their length-normalised log-probabilities,
sharpened by alpha (``--risk-sharpness``):

    s_bj  = alpha * sum_t log p(y_bjt) / |y_bj|      (|y_bj|: its steps, the eos included)
    q_bj  = exp(s_bj) / sum_{k in U_b} exp(s_bk)
    L_r   = sum_b sum_{j in U_b} q_bj (1 - R_bj)      (the expected cost; no baseline)

and is mixed with L_c as REINFORCE is.  Its gradient,
dL_r/ds_bj = q_bj ((1 - R_bj) - sum_k q_bk (1 - R_bk)), centres each cost on
the candidates' expectation, which is why it needs no baseline.
"""

import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from torch import Tensor


def cross_entropy(lprobs: Tensor, target: Tensor, label_smoothing: float, pad: int) -> Tensor:
    """L_c: the gold target's CE (``lprobs``: ... x K log-probabilities, ``target``: the gold positions),
    summed over its tokens, pad excluded; with ``label_smoothing`` eps > 0, fairseq's label-smoothed CE (what
    ``label_smoothed_cross_entropy`` sums), so that a model trained with it goes on with the same objective."""
    lprobs, target = lprobs.view(-1, lprobs.size(-1)), target.reshape(-1)
    if label_smoothing > 0:
        return label_smoothed_nll_loss(lprobs, target, label_smoothing, ignore_index=pad, reduce=True)[0]
    return F.nll_loss(lprobs, target, ignore_index=pad, reduction="sum")


def advantage(reward: Tensor, baseline: Tensor, mask: Tensor) -> Tensor:
    """A_bjt = (R_bj - b_bjt), 0 on the steps that do not count (rows x T)."""
    return (reward.unsqueeze(1) - baseline) * mask


def policy_gradient(advantages: Tensor, lprobs: Tensor, mask: Tensor, num_samples: int) -> Tensor:
    """L_r = - sum (1/N) sum_t A_t log p(y_t): the REINFORCE term (``advantages``, ``lprobs``: rows x T)."""
    return -(advantages * lprobs * mask).sum() / num_samples


def distinct(tokens: Tensor, num_samples: int) -> Tensor:
    """Rows (B * N, the N samples of example b in rows b * N ... b * N + N - 1) that no earlier sample of the
    same example repeats: every token equal (``tokens`` end in pad, so equal rows are equal sequences)."""
    rows, steps = tokens.shape
    grouped = tokens.view(-1, num_samples, steps)
    same = (grouped.unsqueeze(2) == grouped.unsqueeze(1)).all(-1)  # B x N x N: sample j equals sample i
    earlier = torch.ones(num_samples, num_samples, dtype=torch.bool, device=tokens.device).tril(-1)
    return ~(same & earlier).any(-1).view(-1)


def candidate_scores(lprobs: Tensor, mask: Tensor, sharpness: float) -> Tensor:
    """s_bj = alpha * sum_t log p(y_bjt) / |y_bj| over the steps of ``mask`` (rows x T -> rows)."""
    steps = mask.sum(1).clamp(min=1)
    return sharpness * (lprobs * mask).sum(1) / steps


def expected_risk(reward: Tensor, scores: Tensor, keep: Tensor, num_samples: int):
    """(L_r = sum_b sum_j q_bj (1 - R_bj), summed over the batch; q, rows): q_b the softmax of ``scores`` over
    example b's rows in ``keep`` (the distinct samples), 0 elsewhere."""
    logits = scores.view(-1, num_samples).masked_fill(~keep.view(-1, num_samples), float("-inf"))
    q = torch.softmax(logits, dim=1)
    cost = 1.0 - reward.to(q.dtype).view(-1, num_samples)
    return (q * cost).sum(), q.view(-1)


def mixed(ce: Tensor, rl: Tensor, ce_weight: float) -> Tensor:
    """L = w L_c + (1 - w) L_r (w: ``ce_weight``)."""
    return ce_weight * ce + (1.0 - ce_weight) * rl


def skipped_loss(model) -> Tensor:
    """A skipped batch's loss: an exact zero that still touches every parameter (distributed wrappers expect
    each to get a gradient)."""
    return sum(p.reshape(-1)[:1].sum() * 0.0 for p in model.parameters() if p.requires_grad)


def is_finite(*tensors: Tensor) -> bool:
    """Whether every entry of every tensor is finite (one device sync)."""
    return bool(torch.stack([torch.isfinite(x).all() for x in tensors]).all())
