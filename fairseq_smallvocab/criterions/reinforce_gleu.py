"""Criterion ``reinforce_gleu``: REINFORCE with sentence GLEU rewards, mixed with
cross-entropy (the paper's section 2.2 / 4.2).

Per batch the model (one forward) computes the teacher-forced output for the
CE term and samples one sequence Y per example from its own distribution,
inside the example's candidates when the batch has them (full vocabulary
otherwise), up to a length limit.  Then

    R_t = GLEU(Y, Y_gold) - b_t
    L_r = - sum_t R_t log p(y_t)          (steps after the sampled eos excluded)
    L   = lambda L_c + (1 - lambda) L_r    (L_c: CE of the gold target)

summed over the batch; the sample size is the number of sentences.

Baselines (``--rl-baseline``, ``baselines.py``): ``learned`` (default, the
paper's), ``self-critical`` and ``none``.  The learned baseline's state (w,
b and its Adam state) is saved in fairseq checkpoints through the task's
checkpoint dict (``extra_state``; fairseq's ``get_checkpoint_dict`` /
``set_checkpoint_dict``) and restored when training resumes; fine-tuning
from another checkpoint starts a fresh baseline.

The model is any encoder-decoder restricted by the plugin's tasks
(``candidate_model``): its forward with ``sample_lens`` draws the samples in
eval mode without gradient and scores them with gradient (``sampler``).

A batch whose reward or loss is not finite is skipped: its loss is replaced by
an exact zero (so nothing reaches the optimizer) and ``nonfinite`` counts it;
the logged averages (loss, ce, reward, baseline, ...) are over the batches
that produced them, so skipped batches do not pull them towards zero.
"""

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_smallvocab.baselines import BASELINES as BASELINE_CLASSES
from fairseq_smallvocab.baselines import build_baseline
from fairseq_smallvocab.rewards import gleu_batch

BASELINES = ChoiceEnum(list(BASELINE_CLASSES))


@dataclass
class ReinforceGleuConfig(FairseqDataclass):
    rl_lambda: float = field(default=0.005, metadata={"help": "lambda: weight of the CE term, 1 - lambda: RL's"})
    rl_baseline: BASELINES = field(default="learned", metadata={"help": "reward baseline"})
    baseline_lr: float = field(default=1e-3, metadata={"help": "Adam learning rate of the learned baseline"})
    max_sample_len: int = field(default=100, metadata={"help": "longest sampled sequence (tokens, eos included)"})
    sample_len_ratio: float = field(
        default=0.0, metadata={"help": "if > 0, also limit each sample to ceil(ratio * source length) + 5 tokens"})
    gleu_max_order: int = field(default=4, metadata={"help": "GLEU's longest n-gram"})
    gleu_detok: Optional[str] = field(
        default=None, metadata={"help": "score GLEU on words after this post-processing of subword tokens "
                                        "(e.g. sentencepiece, subword_nmt: as fairseq-generate's --post-process)"})


@register_criterion("reinforce_gleu", dataclass=ReinforceGleuConfig)
class ReinforceGleuCriterion(FairseqCriterion):
    def __init__(self, task, rl_lambda=0.005, rl_baseline="learned", baseline_lr=1e-3, max_sample_len=100,
                 sample_len_ratio=0.0, gleu_max_order=4, gleu_detok=None):
        super().__init__(task)
        if not 0.0 <= rl_lambda <= 1.0:
            raise ValueError(f"--rl-lambda must be in [0, 1], got {rl_lambda}")
        if max_sample_len < 1:
            raise ValueError(f"--max-sample-len must be >= 1, got {max_sample_len}")
        if sample_len_ratio < 0:
            raise ValueError(f"--sample-len-ratio must be >= 0, got {sample_len_ratio}")
        if gleu_max_order < 1:
            raise ValueError(f"--gleu-max-order must be >= 1, got {gleu_max_order}")
        self.rl_lambda, self.baseline_name = rl_lambda, str(rl_baseline)
        self.max_sample_len, self.sample_len_ratio = max_sample_len, sample_len_ratio
        self.max_order, self.detok = gleu_max_order, gleu_detok
        self.baseline = build_baseline(self.baseline_name, baseline_lr)
        if self.baseline_name == "learned" and hasattr(task, "add_checkpoint_state"):  # a bare test task has none
            task.add_checkpoint_state("reinforce_gleu.baseline", self.baseline)

    # -- rewards ------------------------------------------------------------------------------------

    def sample_limits(self, net_input, bsz):
        """The longest sample of each example: --max-sample-len, and with
        --sample-len-ratio at most ceil(ratio * source length) + 5."""
        src_lengths = net_input.get("src_lengths")
        if src_lengths is None:  # image features: no source length
            if self.sample_len_ratio > 0:
                raise ValueError("--sample-len-ratio needs source sentences; these inputs (image features) have "
                                 "no length: limit the samples with --max-sample-len")
            return torch.full((bsz,), self.max_sample_len, dtype=torch.long, device=net_input["features"].device)
        limit = torch.full_like(src_lengths, self.max_sample_len)
        if self.sample_len_ratio > 0:
            limit = torch.minimum(limit, torch.ceil(src_lengths.float() * self.sample_len_ratio).long() + 5)
        return limit

    def rewards(self, tokens, lengths, target):
        """GLEU of each sample against its gold target (eos and pad left out)."""
        d = self.task.target_dictionary
        ref_lens = (target.ne(d.pad()) & target.ne(d.eos())).sum(1)
        if self.detok is None:
            return gleu_batch(tokens, lengths, target, ref_lens, self.max_order)
        return self._detok_rewards(tokens, lengths, target, ref_lens)

    def _detok_rewards(self, tokens, lengths, target, ref_lens):
        d = self.task.target_dictionary
        vocab = {}

        def words(row, n):
            text = d.string(row[:n], self.detok)
            return [vocab.setdefault(w, len(vocab)) for w in text.split()]

        hyps = [words(row, int(n)) for row, n in zip(tokens.cpu(), lengths.cpu())]
        refs = [words(row, int(n)) for row, n in zip(target.cpu(), ref_lens.cpu())]

        def pack(seqs):
            out = torch.zeros(len(seqs), max([len(s) for s in seqs] + [1]), dtype=torch.long)
            for i, s in enumerate(seqs):
                out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            return out, torch.tensor([len(s) for s in seqs])

        (h, hl), (r, rl) = pack(hyps), pack(refs)
        return gleu_batch(h, hl, r, rl, self.max_order).to(tokens.device)

    # -- the loss -----------------------------------------------------------------------------------

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        limits = self.sample_limits(net_input, sample["target"].size(0))
        net_output = model(**net_input, sample_lens=limits, greedy_too=self.baseline.needs_greedy)
        samples = net_output[1]["samples"]
        pad = self.padding_idx

        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        ce = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.reshape(-1), ignore_index=pad, reduction="sum")

        mask = samples["mask"]
        with torch.no_grad():
            reward = self.rewards(samples["tokens"], samples["lengths"], sample["target"])
            greedy_reward = None
            logs = {}
            if self.baseline.needs_greedy:
                greedy = net_output[1]["greedy"]
                greedy_reward = self.rewards(greedy["tokens"], greedy["lengths"], sample["target"])
                logs["greedy_reward"] = greedy_reward.sum().item()
            base = self.baseline.values(samples["features"], mask, greedy_reward) * mask
        advantage = (reward.unsqueeze(1) - base) * mask
        rl = -(advantage * samples["lprobs"] * mask).sum()
        loss = self.rl_lambda * ce + (1.0 - self.rl_lambda) * rl

        finite = bool(torch.isfinite(reward).all() and torch.isfinite(loss))
        if not finite:  # an exact zero that still touches every parameter (distributed wrappers expect that)
            loss = sum(p.reshape(-1)[:1].sum() * 0.0 for p in model.parameters() if p.requires_grad)
        if model.training:  # a skipped batch does not teach the baseline either (its keys log 0)
            learned = self.baseline.learn(samples["features"], mask, reward) if finite \
                else dict.fromkeys(self.baseline.log_keys, 0.0)
            logs.update({key: value * sample["target"].size(0) for key, value in learned.items()})

        # The same keys for every batch (fairseq sums logging outputs key by key, across workers
        # too); a skipped batch adds zeros and no finite_* count, so it does not move the averages.
        nsentences = sample["target"].size(0)

        def kept(value):  # a non-finite batch's numbers may be NaN: replaced, not multiplied by 0
            return value if finite else 0.0

        logging_output = {
            "loss": kept(loss.data), "ce": kept(ce.data), "rl": kept(rl.data), "ntokens": sample["ntokens"],
            "nsentences": nsentences, "sample_size": nsentences, "nonfinite": 0 if finite else 1,
            "finite_sentences": kept(nsentences), "finite_tokens": kept(sample["ntokens"]),
            "reward": kept(reward.sum().item()), "baseline": kept(base.sum().item()),
            "steps": kept(mask.sum().item()), "sample_len": kept(samples["lengths"].sum().item()),
            **{key: kept(value) for key, value in logs.items()}}
        return loss, nsentences, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Each average is over the batches that produced its numbers:
        batches skipped as non-finite only add to ``nonfinite``."""
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        metrics.log_scalar_sum("nonfinite", total("nonfinite"))
        sentences, tokens, steps = total("finite_sentences"), total("finite_tokens"), total("steps")
        if not sentences:  # every batch skipped: nothing to average
            return
        metrics.log_scalar("loss", total("loss") / sentences, sentences, round=3)
        metrics.log_scalar("ce", total("ce") / max(tokens, 1) / math.log(2), tokens, round=3)
        metrics.log_scalar("rl_loss", total("rl") / sentences, sentences, round=3)
        metrics.log_scalar("reward", 100.0 * total("reward") / sentences, sentences, round=2)
        metrics.log_scalar("baseline", 100.0 * total("baseline") / max(steps, 1), steps, round=2)
        metrics.log_scalar("sample_len", total("sample_len") / sentences, sentences, round=2)
        if any("baseline_mse" in log for log in logging_outputs):
            metrics.log_scalar("baseline_mse", total("baseline_mse") / sentences, sentences, round=4)
        if any("greedy_reward" in log for log in logging_outputs):
            metrics.log_scalar("greedy_reward", 100.0 * total("greedy_reward") / sentences, sentences, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
