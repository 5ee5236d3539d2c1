"""Everything the plugin logs reduces to the same numbers when fairseq hands
it one dict of tensors, as its distributed trainer does (``Trainer.
_fast_stat_sync_sum``: the workers' logging outputs summed key by key, the
keys of the first output, each a float64 tensor), as from the plain list of
per-batch dicts of a single process."""

import math

import pytest
import torch
from fairseq import metrics
from helpers import _setup
from translation_helpers import mt_task

from fairseq_smallvocab.criterions.reinforce_gleu import ReinforceGleuConfig, ReinforceGleuCriterion
from fairseq_smallvocab.criterions.vocab_prediction_bce import VocabPredictionBCECriterion


def summed_as_fairseq_does(logs):
    """One worker's view after fairseq's all-reduce of ``logs`` (both workers' batches)."""
    return [{key: torch.as_tensor(sum(log[key] for log in logs if key in log), dtype=torch.double)
             for key in logs[0]}]


def _reduced(reduce, logs):
    with metrics.aggregate(new_root=True) as agg:
        reduce(logs)
        return agg.get_smoothed_values()


def _same_values(reduce, logs):
    plain, summed = _reduced(reduce, logs), _reduced(reduce, summed_as_fairseq_does(logs))
    assert set(plain) == set(summed)
    for key, value in plain.items():
        assert float(summed[key]) == pytest.approx(float(value), rel=1e-6, abs=1e-9), key
    return plain


def test_the_task_reduces_tensors_from_distributed_workers(tiny_bin):
    """gold_outside_cands (the task's) and the criterion's values, from two
    workers' validation batches."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    crit = ReinforceGleuCriterion(task, ReinforceGleuConfig(rl_baseline="none"))
    crit.eval()
    logs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        logs.append(crit(model.eval(), sample)[2])
        logs[-1].update(cand_tokens=40 + seed, cand_outside=seed)
    values = _same_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert values["gold_outside_cands"] == pytest.approx(100 * 3 / 83, abs=1e-3)
    assert {"loss", "reward", "entropy", "sample_len"} <= set(values)


def test_the_predictor_criterion_reduces_tensors_from_distributed_workers():
    logs = [{"loss": torch.tensor(3.0 * i), "nsentences": 4, "ntokens": 20, "sample_size": 4,
             "recall_tokens": 20, "recall_hits_50": 10 + i, "recall_hits_100": 15 + i} for i in (1, 2)]
    values = _same_values(VocabPredictionBCECriterion.reduce_metrics, logs)
    assert values["recall@50"] == pytest.approx(100 * 23 / 40, abs=0.01)
    assert values["recall@100"] == pytest.approx(100 * 33 / 40, abs=0.01)


def test_the_ce_control_reduces_tensors_from_distributed_workers(tiny_bin):
    """lambda = 1 samples nothing: its logs carry no reward, and reduce to the
    CE numbers alone, summed or not."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    crit = ReinforceGleuCriterion(task, ReinforceGleuConfig(rl_lambda=1.0))
    logs = [crit(model.eval(), sample)[2] for _ in range(2)]
    values = _same_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert {"loss", "ce", "rl_loss"} <= set(values) and not {"reward", "baseline", "entropy"} & set(values)
    assert values["ce"] == pytest.approx(float(logs[0]["ce"]) / float(logs[0]["ntokens"]) / math.log(2), abs=1e-3)
