"""What a REINFORCE step minimises (the paper's section 2.2 / 4.2): the
baseline subtracted from each reward, the loss as pure functions, and the two
objectives that the criterion ``smallvocab_reinforce`` runs (``PolicyGradient``,
``ExpectedRisk``: its ``--rl-objective``).

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

The baselines b_t (``--rl-baseline``), each a small module with its own
state:

- ``learned`` (the paper's): b_t = sigmoid(w . s_t + b) on the detached
  decoder state s_t, fitted by MSE to the sentence's reward with its own Adam
  optimizer (``--baseline-lr``, default 1e-3).  Its size, d of s_t, comes
  from the model's states at the first batch (or from a checkpoint), and it
  starts there at that batch's mean reward (w = 0, b = logit(mean)).  w and b
  are buffers, not parameters: fairseq's trainer gives a criterion with
  parameters to its main optimizer's bookkeeping and wraps it in the
  distributed wrapper, and PyTorch's DDP rejects a module none of whose
  parameters needs a gradient, so ``--ddp-backend c10d`` (fairseq's default)
  would fail.  They stay float32 whatever fairseq does to the criterion
  (``criterion.half()`` under ``--fp16``).  Under distributed training its
  gradients are averaged over the workers, so every worker keeps the same
  baseline.
- ``loo`` (leave-one-out; Kool et al. 2019, RLOO): with N >= 2 samples of
  the same input, sample j's baseline is the mean reward of the other N - 1,
  b_j = (sum_i R_i - R_j) / (N - 1), the same at every step.  Unbiased (b_j
  does not depend on sample j) and free: no parameters, no extra decode.
- ``self-critical`` (Rennie et al. 2017): the reward of the model's greedy
  decode of the same input.
- ``none``: b_t = 0.

``values(features, mask, rewards, greedy_reward, group_size)`` sees the B * N
samples in groups of N consecutive rows (the samples of one input).
"""

import copy
import logging
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from torch import Tensor, nn

logger = logging.getLogger(__name__)


class Baseline(nn.Module):
    """b_t for every sampled step (B x T)."""

    needs_greedy = False  # whether ``values`` reads the greedy decode's reward
    min_samples = 1  # samples per input that it needs
    log_keys: Tuple[str, ...] = ()  # what ``learn`` returns (logged for every training batch: 0 for a skipped one)
    # whether the mean of its values tells the log something: not for none (0), self_critical (the logged
    # greedy_reward) nor loo (the samples' leave-one-out means average to the mean reward exactly)
    logs_its_mean = False

    def values(self, features: Tensor, mask: Tensor, rewards: Tensor, greedy_reward: Optional[Tensor] = None,
               group_size: int = 1) -> Tensor:
        raise NotImplementedError

    def learn(self, features: Tensor, mask: Tensor, rewards: Tensor) -> Dict[str, float]:
        """Fit what the baseline learns to this batch's rewards; returns what to log."""
        return {}


class NoBaseline(Baseline):
    def values(self, features, mask, rewards, greedy_reward=None, group_size=1):
        return torch.zeros_like(mask, dtype=torch.float)


class SelfCriticalBaseline(Baseline):
    needs_greedy = True

    def values(self, features, mask, rewards, greedy_reward=None, group_size=1):
        return greedy_reward.float().unsqueeze(1).expand(mask.shape)


class LeaveOneOutBaseline(Baseline):
    min_samples = 2

    def values(self, features, mask, rewards, greedy_reward=None, group_size=1):
        if group_size < 2:
            raise ValueError(f"the leave-one-out baseline needs >= 2 samples per input, got {group_size}")
        grouped = rewards.double().view(-1, group_size)
        others = (grouped.sum(1, keepdim=True) - grouped) / (group_size - 1)
        return others.float().view(-1, 1).expand(mask.shape)


START_MIN = 0.01  # a fresh learned baseline starts at the first mean reward, kept in [START_MIN, 1 - START_MIN]


class LearnedBaseline(Baseline):
    log_keys = ("baseline_mse",)
    logs_its_mean = True
    weight: Tensor  # (buffers: see the module)
    bias: Tensor

    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.lr = lr
        # empty until the first states (or a checkpoint) give d
        self.register_buffer("weight", torch.zeros(0))
        self.register_buffer("bias", torch.zeros(()))
        self._adam: Optional[torch.optim.Adam] = None

    def _materialize(self, features: Tensor):
        dim = features.size(-1)
        if self.weight.numel() == 0:
            self.weight = torch.zeros(dim, device=features.device)
            self.bias = self.bias.to(features.device)
        elif self.weight.numel() != dim:
            raise ValueError(f"the learned baseline was made for decoder states of size {self.weight.numel()}, "
                             f"this model's are {dim}: fine-tune with a fresh criterion (--finetune-from-model "
                             "or --reset-optimizer) or --rl-baseline self-critical/none")

    def _apply(self, fn, *args, **kwargs):
        """Moves with the criterion (``.to(device)``) but stays float32."""
        super()._apply(fn, *args, **kwargs)
        for name in ("weight", "bias"):
            if self._buffers[name].dtype != torch.float32:
                self._buffers[name] = self._buffers[name].float()
        return self

    def _optimizer(self):
        """The Adam optimizer, bound to the current buffers (moving the
        module to another device replaces them; the Adam state follows)."""
        params = [self.weight, self.bias]
        if self._adam is None or any(a is not b for a, b in zip(self._adam.param_groups[0]["params"], params)):
            state = None if self._adam is None else self._adam.state_dict()
            self._adam = torch.optim.Adam(params, lr=self.lr)
            if state is not None and state["state"]:
                self._adam.load_state_dict(state)
        return self._adam

    def get_extra_state(self):
        """The Adam state, saved with the buffers."""
        return {"adam": self._adam.state_dict() if self._adam is not None else None}

    def set_extra_state(self, state):
        if state.get("adam"):
            self._optimizer().load_state_dict(copy.deepcopy(state["adam"]))  # never share tensors with the source
        else:  # saved before its first step: Adam starts afresh, as it did then
            self._adam = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for old, new in (("baseline_weight", "weight"), ("baseline_bias", "bias")):  # checkpoints before 0.2
            if prefix + old in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        saved = state_dict.get(prefix + "weight")
        if saved is not None and saved.shape != self.weight.shape and 0 in (self.weight.numel(), saved.numel()):
            # sized by the saved state, or, saved before the first states gave its size, empty again
            self.weight = torch.zeros_like(saved, dtype=torch.float32, device=self.bias.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def values(self, features, mask, rewards, greedy_reward=None, group_size=1):
        fresh = self.weight.numel() == 0
        self._materialize(features)
        if fresh:
            self._start_at(rewards)
        return torch.sigmoid(features.float() @ self.weight + self.bias)

    def _start_at(self, rewards):
        """A fresh baseline reads the first batch's mean reward (over every
        worker's batch, so that all start alike): sigmoid(0) = 0.5 would sit
        far above early GLEU rewards (0.02-0.05), making nearly every
        advantage negative until Adam has walked the bias down."""
        finite = rewards.float()[torch.isfinite(rewards)]
        total = torch.stack([finite.sum(), torch.tensor(float(finite.numel()), device=finite.device)])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(total)
        if total[1] > 0:
            mean = (total[0] / total[1]).clamp(START_MIN, 1 - START_MIN)
            self.bias.fill_(torch.logit(mean).item())

    def learn(self, features, mask, rewards):
        """One Adam step on the MSE between b_t and the sentence's reward
        (gradients averaged over distributed workers)."""
        self._materialize(features)
        weight = self.weight.detach().requires_grad_()
        bias = self.bias.detach().requires_grad_()
        pred = torch.sigmoid(features.float() @ weight + bias)
        mask = mask.float()
        err = ((pred - rewards.float().unsqueeze(1)) ** 2) * mask
        mse = err.sum() / mask.sum().clamp(min=1)
        grads = torch.autograd.grad(mse, [weight, bias])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = torch.distributed.get_world_size()
            for g in grads:
                torch.distributed.all_reduce(g)
                g.div_(world)
        adam = self._optimizer()
        self.weight.grad, self.bias.grad = grads
        adam.step()
        self.weight.grad = self.bias.grad = None
        mse, largest = torch.stack([mse.detach(), self.weight.abs().amax() + self.bias.abs()]).tolist()  # one sync
        if not math.isfinite(largest):
            raise FloatingPointError(f"the learned baseline's weights are no longer finite after a step of its Adam "
                                     f"(--baseline-lr {self.lr:g}): lower --baseline-lr")
        return {"baseline_mse": mse}


BASELINES = {"learned": LearnedBaseline, "loo": LeaveOneOutBaseline, "self-critical": SelfCriticalBaseline,
             "none": NoBaseline}


def build_baseline(name: str, lr: float = 1e-3) -> Baseline:
    if name == "learned":
        return LearnedBaseline(lr)
    return BASELINES[name]()


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


class PolicyGradient:
    """``--rl-objective reinforce``: L_r, the policy gradient of each sample's advantage over the ``baseline``
    (``advantage``, ``policy_gradient``)."""

    def __init__(self, baseline: Baseline):
        self.baseline = baseline

    def term(self, reward: Tensor, greedy_reward: Optional[Tensor], samples, chosen: Tensor, num_samples: int,
             training: bool) -> Tuple[Tensor, Dict[str, float]]:
        """(L_r of the B * N ``samples`` (their ``lprobs``, ``mask`` and ``features``) with their ``reward``
        (and the greedy decodes', B * N, for the self-critical baseline), over the ``chosen`` steps; what it
        logs: the baseline's mean per sample, where it tells something)."""
        mask, logged = samples.mask, {}
        with torch.no_grad():
            base = self.baseline.values(samples.features, mask, reward, greedy_reward, num_samples) * mask
            if self.baseline.logs_its_mean:  # per sample as the reward is: each sample's mean over its steps
                logged["baseline"] = (base.sum(1) / mask.sum(1).clamp(min=1)).sum().item()
        return policy_gradient(advantage(reward, base, mask), samples.lprobs, chosen, num_samples), logged


class ExpectedRisk:
    """``--rl-objective risk``: L_r, the expected cost over each input's distinct candidates (``distinct``,
    ``candidate_scores``, ``expected_risk``), no baseline.  ``sharpness``: alpha; ``warn``: whether to warn
    once when every candidate of a training batch's inputs was one sentence (no gradient: not for the
    constant control reward, which never has one)."""

    def __init__(self, sharpness: float, warn: bool = True):
        self.sharpness, self.warn = sharpness, warn

    def term(self, reward: Tensor, greedy_reward: Optional[Tensor], samples, chosen: Tensor, num_samples: int,
             training: bool) -> Tuple[Tensor, Dict[str, float]]:
        """(L_r of the B * N candidates ``samples``, over the ``chosen`` steps; what it logs: the risk and the
        distinct candidates)."""
        keep = distinct(samples.tokens, num_samples)
        scores = candidate_scores(samples.lprobs, chosen, self.sharpness)
        rl, _ = expected_risk(reward, scores, keep, num_samples)
        logged = {"risk": rl.item(), "distinct": keep.sum().item()}
        if training and self.warn and logged["distinct"] <= reward.numel() // num_samples:
            logger.warning(f"--rl-objective risk: the {num_samples} candidates of each input of a training batch "
                           f"(--rl-samples {num_samples}) were all the same sentence, so the risk (the expected "
                           "cost over distinct candidates) got no gradient from it; the log's 'distinct' says how "
                           "many differ per input. For varied candidates draw more of them (a larger "
                           "--rl-samples), at a higher --sample-temperature, or take a beam's (--risk-candidates "
                           "beam)")
            self.warn = False  # (once)
        return rl, logged


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
