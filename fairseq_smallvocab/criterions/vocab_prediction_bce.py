"""Criterion ``vocab_prediction_bce``: multi-label binary cross-entropy for the
vocabulary predictor, with label smoothing toward the unigram prior.

    t_i  <- (1 - eps) t_i + eps p(i)
    loss  = sum over words i of BCE(o_i, t_i), summed over the batch

where t is the example's gold word indicator and p(i) the fraction of training
examples whose target contains word i (the model's ``prior`` buffer).  On
validation it also counts recall@K for each K of ``--recall-at``: the share of
target tokens (repeats counted, eos included) that fall in the example's K
most probable words.  ``recall@K`` can serve as ``--best-checkpoint-metric``
(with ``--maximize-best-checkpoint-metric``).  Beside it, ``freq_recall@K``:
the same recall of the frequency list (the K words most frequent in the
training targets, for every example, no model), which a predictor worth its
cost beats by a clear margin.
"""

import logging
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from fairseq_smallvocab.predictor.scoring import check_k, multi_hot, recall_hits

logger = logging.getLogger(__name__)

DEFAULT_RECALL_AT = "500,1000,2000"


@dataclass
class VocabPredictionBCEConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "eps: smooth the labels toward the prior"})
    recall_at: str = field(default=DEFAULT_RECALL_AT,
                           metadata={"help": "comma-separated K values of the recall@K logged on validation "
                                             "(by default those up to the target vocabulary size)"})


def parse_ks(text):
    try:
        ks = sorted({int(k) for k in str(text).split(",") if k.strip()})
    except ValueError as err:
        raise ValueError(f"--recall-at takes comma-separated integers, got {text!r}") from err
    if not ks:
        raise ValueError("--recall-at needs at least one K")
    return ks


@register_criterion("vocab_prediction_bce", dataclass=VocabPredictionBCEConfig)
class VocabPredictionBCECriterion(FairseqCriterion):
    def __init__(self, task, label_smoothing, recall_at):
        super().__init__(task)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        self.eps = label_smoothing
        self._frequency = None  # the frequency list's scores, read from the training targets at the first validation
        vocab = len(task.target_dictionary)
        self.ks = parse_ks(recall_at)
        if str(recall_at) == DEFAULT_RECALL_AT:
            # the default was chosen for the paper's vocabularies; a user who
            # did not pick it should not have to for a small one
            # (an explicit --recall-at equal to the default reads the same)
            above = [k for k in self.ks if k > vocab]
            self.ks = [k for k in self.ks if k <= vocab]
            if not self.ks:
                logger.info(f"no recall@K is logged on validation: every default --recall-at value ({recall_at}) "
                            f"is above the target vocabulary size |V| = {vocab}; pass --recall-at with values up "
                            f"to {vocab} to log it")
            elif above:
                logger.info(f"recall@{','.join(map(str, above))} left out of the default --recall-at: above the "
                            f"target vocabulary size |V| = {vocab}")
        for k in self.ks:
            try:
                check_k(k, vocab, "a --recall-at value")
            except ValueError as err:
                raise ValueError(f"{err}; pass --recall-at values up to {vocab}") from None

    def smoothed_labels(self, target, prior):
        d = self.task.target_dictionary
        labels = multi_hot(target, prior.numel(), ignore=(d.pad(), d.bos()))
        return (1.0 - self.eps) * labels + self.eps * prior.unsqueeze(0)

    def forward(self, model, sample, reduce=True):
        logits = model(**sample["net_input"]).float()
        target = sample["target"]
        labels = self.smoothed_labels(target, model.prior.float())
        loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum" if reduce else "none")
        nsentences = target.size(0)
        logging_output = {"loss": loss.data, "nsentences": nsentences, "ntokens": sample["ntokens"],
                          "sample_size": nsentences}
        if not model.training and self.ks:
            hits, tokens = recall_hits(logits.detach(), target, self.ks, self.padding_idx)
            frequent, _ = recall_hits(self.frequency_scores().to(logits.device).expand_as(logits), target, self.ks,
                                      self.padding_idx)
            logging_output["recall_tokens"] = tokens
            for k, h, f in zip(self.ks, hits, frequent):
                logging_output[f"recall_hits_{k}"] = h
                logging_output[f"freq_recall_hits_{k}"] = f
        return loss, nsentences, logging_output

    def frequency_scores(self):
        """The frequency list's scores: each target word's count in the training targets (read once)."""
        if self._frequency is None:
            from fairseq_smallvocab.predictor.inference import frequency_scores

            self._frequency = frequency_scores(self.task).float()
        return self._frequency

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):  # float(): distributed runs hand over the workers' sums as tensors (round() refuses them)
            return float(sum(log.get(key, 0) for log in logging_outputs))

        nsentences = total("nsentences")
        metrics.log_scalar("loss", total("loss") / max(nsentences, 1), nsentences, round=3)
        tokens = total("recall_tokens")
        if tokens > 0:
            metrics.log_scalar_sum("_recall_tokens", tokens)
            keys = sorted({key for log in logging_outputs for key in log if key.startswith("recall_hits_")},
                          key=lambda key: int(key.rsplit("_", 1)[1]))
            for key in keys:
                k = key.rsplit("_", 1)[1]
                for name in ("recall", "freq_recall"):
                    metrics.log_scalar_sum(f"_{name}_hits_{k}", total(f"{name}_hits_{k}"))
                    metrics.log_derived(f"{name}@{k}", lambda meters, name=name, k=k: round(
                        100.0 * meters[f"_{name}_hits_{k}"].sum / meters["_recall_tokens"].sum, 2)
                        if meters["_recall_tokens"].sum > 0 else math.nan)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
