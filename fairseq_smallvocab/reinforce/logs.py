"""What ``smallvocab_reinforce`` logs: one batch's logging output (``batch_log``: sums, the same keys for every
batch) and their reduction to the logged averages (``reduce``), which is the same whether fairseq hands over
the per-batch dicts of one process or the workers' summed ones (tests/test_distributed_logs.py).

For a multilingual task, the reward of each target language apart (``reward/LANG``): one model tuned for
several pairs can gain on one and lose on another, and the mean reward alone would not say which. Each batch
logs, for every target language of the task (the same keys in every batch and on every worker, as fairseq's
all-reduce sums them key by key), the sum of its samples' rewards and their count (``language_sums``); the
logged ``reward/LANG`` is their ratio over all batches (x 100, as ``reward``). A language with no sample in
what was reduced logs nothing."""

import math
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from fairseq import metrics
from torch import Tensor

REWARD, COUNT = "reward/", "samples/"


def batch_log(sample, finite: bool, **values):
    """The same keys for every batch (fairseq sums logging outputs key by key, across workers too); a
    batch skipped as non-finite adds zeros (its numbers may be NaN: replaced, not multiplied by 0) and no
    finite_* count, so it does not move the averages."""
    nsentences = sample["target"].size(0)
    kept = {key: value if finite else 0.0 for key, value in values.items()}
    return {"ntokens": sample["ntokens"], "nsentences": nsentences, "sample_size": nsentences,
            "nonfinite": 0 if finite else 1, "finite_sentences": nsentences if finite else 0.0,
            "finite_tokens": sample["ntokens"] if finite else 0.0, **kept}


def reduce(logging_outputs) -> None:
    """Each average is over the batches that produced its numbers:
    batches skipped as non-finite only add to ``nonfinite``."""
    def total(key):
        return sum(float(log.get(key, 0)) for log in logging_outputs)

    metrics.log_scalar_sum("nonfinite", total("nonfinite"))
    sentences, tokens, steps = total("finite_sentences"), total("finite_tokens"), total("steps")
    if not sentences:  # every batch skipped: nothing to average, and no loss to rank a checkpoint by
        if total("nonfinite"):
            metrics.log_scalar("loss", math.inf, 1, round=3)
        return
    samples = total("finite_samples")
    metrics.log_scalar("loss", total("loss") / sentences, sentences, round=3)
    metrics.log_scalar("ce", total("ce") / max(tokens, 1) / math.log(2), tokens, round=3)
    metrics.log_scalar("rl_loss", total("rl") / sentences, sentences, round=3)
    if not samples:  # lambda = 1: nothing sampled
        return
    metrics.log_scalar("reward", 100.0 * total("reward") / samples, samples, round=2)
    _log_languages(logging_outputs[0].keys(), total)
    if any("baseline" in log for log in logging_outputs):  # a learned baseline's (the others' say nothing new)
        metrics.log_scalar("baseline", 100.0 * total("baseline") / samples, samples, round=2)
    if any("risk" in log for log in logging_outputs):  # risk's expected cost, x 100, and its distinct samples
        metrics.log_scalar("risk", 100.0 * total("risk") / sentences, sentences, round=2)
        metrics.log_scalar("distinct", total("distinct") / sentences, sentences, round=2)
    metrics.log_scalar("sample_len", total("sample_len") / samples, samples, round=2)
    if total("ref_words"):  # the samples' tokens over their references' (pieces on subword data), BLEU's ratio
        metrics.log_scalar("len_ratio", total("sample_words") / total("ref_words"), total("ref_words"), round=3)
    if any("greedy_samples" in log for log in logging_outputs):
        metrics.log_scalar("greedy_frac", total("greedy_samples") / samples, samples, round=3)
        metrics.log_scalar("entropy", total("entropy") / max(steps, 1), steps, round=3)
    if any("reward_std" in log for log in logging_outputs):
        metrics.log_scalar("reward_std", 100.0 * total("reward_std") / sentences, sentences, round=2)
    if any("baseline_mse" in log for log in logging_outputs):
        metrics.log_scalar("baseline_mse", total("baseline_mse") / sentences, sentences, round=4)
    if any("greedy_reward" in log for log in logging_outputs):
        metrics.log_scalar("greedy_reward", 100.0 * total("greedy_reward") / sentences, sentences, round=2)


def target_languages(task) -> Optional[List[str]]:
    """The task's target languages when it has several and can tell each row's (a multilingual task), else
    None (nothing is logged per language)."""
    langs = sorted(set(getattr(task, "target_langs", None) or ()))
    return langs if len(langs) > 1 and hasattr(task, "target_languages") else None


def language_sums(langs: Sequence[str], row_langs: Sequence[str], reward: Tensor, n: int) -> Dict[str, float]:
    """Per language of ``langs``: the sum of the rewards of its rows' samples and their count. ``reward``
    holds B * N values, the N samples of row b at b * N .. b * N + N - 1; ``row_langs`` the B rows'
    languages."""
    per_row = reward.detach().double().view(-1, n).sum(1).tolist()
    if len(per_row) != len(row_langs):
        raise ValueError(f"{len(per_row)} rows of rewards for {len(row_langs)} rows of languages")
    logs = {key + lang: 0.0 for lang in langs for key in (REWARD, COUNT)}
    for value, lang in zip(per_row, row_langs):
        logs[REWARD + lang] += value
        logs[COUNT + lang] += n
    return logs


def _log_languages(keys: Iterable[str], total: Callable[[str], float]) -> None:
    """``reward/LANG`` for each language among ``keys`` (the logging outputs' keys) with samples, from the
    summed logging outputs (``total(key)``)."""
    for key in sorted(keys):
        if key.startswith(REWARD):
            lang = key[len(REWARD):]
            count = total(COUNT + lang)
            if count:
                metrics.log_scalar(key, 100.0 * total(key) / count, count, round=2)
