"""The loss of REINFORCE mixed with cross-entropy, as pure functions (the
criterion ``reinforce_gleu`` calls them; the paper's section 2.2 / 4.2).

For sample j of example b (N samples per example), with its reward R_bj,
the baseline b_bjt of each of its steps and the model's log-probabilities
log p(y_bjt):

    A_bjt = (R_bj - b_bjt) * m_bjt                   (m: the steps that count, the sampled eos included)
    L_r   = - sum_b (1/N) sum_j sum_t A_bjt log p(y_bjt)
    L     = lambda L_c + (1 - lambda) L_r            (L_c: the gold target's CE)

summed over the batch: N samples give the average of N single-sample
gradients, not N times one.
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


def mixed(ce: Tensor, rl: Tensor, rl_lambda: float) -> Tensor:
    """L = lambda L_c + (1 - lambda) L_r."""
    return rl_lambda * ce + (1.0 - rl_lambda) * rl


def skipped_loss(model) -> Tensor:
    """A skipped batch's loss: an exact zero that still touches every parameter (distributed wrappers expect
    each to get a gradient)."""
    return sum(p.reshape(-1)[:1].sum() * 0.0 for p in model.parameters() if p.requires_grad)


def is_finite(*tensors: Tensor) -> bool:
    """Whether every entry of every tensor is finite (one device sync)."""
    return bool(torch.stack([torch.isfinite(x).all() for x in tensors]).all())
