"""Everything the plugin logs reduces to the same numbers when fairseq hands
it one dict of tensors, as its distributed trainer does (``Trainer.
_fast_stat_sync_sum``: the workers' logging outputs summed key by key, the
keys of the first output, each a float64 tensor), as from the plain list of
per-batch dicts of a single process."""

import math

import pytest
import torch
from helpers import _setup, reduced, same_reduced_values, summed_as_fairseq_does
from translation_helpers import mt_task

from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceConfig, SmallVocabReinforceCriterion
from fairseq_smallvocab.criterions.vocab_prediction_bce import VocabPredictionBCECriterion


def test_the_task_reduces_tensors_from_distributed_workers(tiny_bin):
    """gold_outside_cands (the task's) and the criterion's values, from two
    workers' validation batches."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(rl_baseline="none"))
    crit.eval()
    logs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        logs.append(crit(model.eval(), sample)[2])
        logs[-1].update(cand_tokens=40 + seed, cand_outside=seed)
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert values["gold_outside_cands"] == pytest.approx(100 * 3 / 83, abs=1e-3)
    assert {"loss", "reward", "entropy", "sample_len"} <= set(values)


def test_the_predictor_criterion_reduces_tensors_from_distributed_workers():
    logs = [{"loss": torch.tensor(3.0 * i), "nsentences": 4, "ntokens": 20, "sample_size": 4,
             "recall_tokens": 20, "recall_hits_50": 10 + i, "recall_hits_100": 15 + i, "freq_recall_hits_50": 5 + i,
             "freq_recall_hits_100": 8 + i} for i in (1, 2)]
    values = same_reduced_values(VocabPredictionBCECriterion.reduce_metrics, logs)
    assert values["recall@50"] == pytest.approx(100 * 23 / 40, abs=0.01)
    assert values["recall@100"] == pytest.approx(100 * 33 / 40, abs=0.01)
    assert values["freq_recall@50"] == pytest.approx(100 * 13 / 40, abs=0.01)
    assert values["freq_recall@100"] == pytest.approx(100 * 19 / 40, abs=0.01)


def test_the_ce_control_reduces_tensors_from_distributed_workers(tiny_bin):
    """lambda = 1 samples nothing in training: its logs carry no reward, and reduce to the CE numbers alone,
    summed or not; in validation it samples (to log the reward REINFORCE logs), reduced as REINFORCE's are."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(ce_weight=1.0, rl_baseline="loo",
                                                                        rl_samples=2))
    logs = [crit(model.train(), sample)[2] for _ in range(2)]
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert {"loss", "ce", "rl_loss"} <= set(values) and not {"reward", "baseline", "entropy"} & set(values)
    assert values["ce"] == pytest.approx(float(logs[0]["ce"]) / float(logs[0]["ntokens"]) / math.log(2), abs=1e-3)
    logs = [crit(model.eval(), sample)[2] for _ in range(2)]
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert {"reward", "len_ratio", "entropy"} <= set(values)
    assert values["reward"] == pytest.approx(100 * sum(float(log["reward"]) for log in logs)
                                             / sum(float(log["finite_samples"]) for log in logs), abs=0.01)


def test_len_ratio_and_the_baseline_reduce_as_the_reward_does(tiny_bin):
    """len_ratio is the samples' words over their references' (summed over the
    samples, as BLEU's ratio is over a corpus), and a learned baseline is logged
    per sample like the reward (leave-one-out's is not: its samples' baselines
    average to exactly the mean reward); summed across workers or not."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    loo = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(rl_baseline="loo", rl_samples=3,
                                                                       max_sample_len=9))
    assert "baseline" not in loo(model.eval(), sample)[2]
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(rl_baseline="learned", rl_samples=3,
                                                                        max_sample_len=9))
    logs = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        logs.append(crit(model.eval(), sample)[2])
    d = task.target_dictionary
    ref_words = int((sample["target"].ne(d.pad()) & sample["target"].ne(d.eos())).sum())
    for log in logs:
        assert log["ref_words"] == 3 * ref_words and log["sample_words"] == log["sample_len"] > 0
    assert logs[0]["sample_words"] != logs[1]["sample_words"]
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    want = sum(log["sample_words"] for log in logs) / sum(log["ref_words"] for log in logs)
    assert values["len_ratio"] == pytest.approx(want, abs=1e-3) and 0 < want
    per_sample = sum(log["baseline"] for log in logs) / sum(log["finite_samples"] for log in logs)
    assert values["baseline"] == pytest.approx(100 * per_sample, abs=0.01) and values["reward"] > 0


def test_the_eval_bleu_length_ratio_reduces_from_distributed_workers(tiny_bin):
    """bleu_len_ratio: --eval-bleu's decodes' length over the references'."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    task.cfg.eval_bleu = True
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(ce_weight=1.0))
    logs = []
    for sys_len, ref_len in ((9, 10), (12, 20)):
        log = {"loss": 1.0, "ce": 1.0, "rl": 0.0, "ntokens": 10, "nsentences": 2, "sample_size": 2, "nonfinite": 0,
               "finite_sentences": 2, "finite_tokens": 10, "finite_samples": 0,
               "_bleu_sys_len": sys_len, "_bleu_ref_len": ref_len}
        for i in range(4):
            log[f"_bleu_counts_{i}"], log[f"_bleu_totals_{i}"] = max(sys_len - 2 * i, 0), sys_len - i
        logs.append(log)
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert values["bleu_len_ratio"] == pytest.approx(21 / 30, abs=1e-3) and values["bleu"] > 0


@pytest.mark.parametrize("sys_lens, warned", [((9, 12), "0.700 times as long as the references (bleu_len_ratio), so "
                                                        "BLEU's brevity penalty takes 35% off"),
                                              ((30, 20), "1.667 times as long as the references (bleu_len_ratio): "
                                                         "the model writes long"),
                                              ((10, 19), None),
                                              ((9, 12, 0.1), None), ((9, 12, 0.25), "0.700 times as long")])
def test_a_validation_far_shorter_or_longer_than_its_references_is_warned_about(tiny_bin, caplog, sys_lens, warned):
    """--eval-bleu's length ratio over the whole validation set (every batch's lengths, summed across workers or
    not), said once after the validation when below 0.95 or above 1.1 (a 1.68 once passed without a word);
    within, nothing; nor while fewer than a fifth of the output words match a reference word (an untrained model's
    first validations: the unigram counts, where logged)."""
    import logging

    task = mt_task(tiny_bin, small_vocab_size=40)
    task.cfg.eval_bleu = True
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(ce_weight=1.0))
    matched = sys_lens[2] if len(sys_lens) > 2 else None
    logs = [{"loss": 1.0, "ntokens": 10, "nsentences": 2, "sample_size": 2, "_bleu_sys_len": sys_len,
             "_bleu_ref_len": ref_len, **({} if matched is None else {"_bleu_counts_0": round(matched * sys_len, 3),
                                                                       "_bleu_totals_0": sys_len})}
            for sys_len, ref_len in zip(sys_lens[:2], (10, 20))]
    for batch in (summed_as_fairseq_does(logs[:1]), summed_as_fairseq_does(logs[1:])):  # two validation batches
        reduced(lambda outs: task.reduce_metrics(outs, crit), batch)
    with caplog.at_level(logging.WARNING):
        task.report_validation()
        task.report_validation()  # nothing since: said once
    if warned is None:
        assert "bleu_len_ratio" not in caplog.text
    else:
        assert caplog.text.count("bleu_len_ratio") == 1 and warned in caplog.text, caplog.text
