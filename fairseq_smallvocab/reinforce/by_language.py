"""The reward of each target language, apart, for a multilingual task: one
model tuned for several pairs can gain on one and lose on another, and the
mean reward alone would not say which.

Each batch logs, for every target language of the task (the same keys in
every batch and on every worker, as fairseq's all-reduce sums them key by
key), the sum of its samples' rewards and their count; the logged
``reward/LANG`` is their ratio over all batches (x 100, as ``reward``).
A language with no sample in what was reduced logs nothing."""

from typing import Callable, Dict, Iterable, List, Optional, Sequence

from fairseq import metrics
from torch import Tensor

REWARD, COUNT = "reward/", "samples/"


def target_languages(task) -> Optional[List[str]]:
    """The task's target languages when it has several and can tell each row's (a multilingual task), else
    None (nothing is logged per language)."""
    langs = sorted(set(getattr(task, "target_langs", None) or ()))
    return langs if len(langs) > 1 and hasattr(task, "target_languages") else None


def sums(langs: Sequence[str], row_langs: Sequence[str], reward: Tensor, n: int) -> Dict[str, float]:
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


def log(keys: Iterable[str], total: Callable[[str], float]) -> None:
    """``reward/LANG`` for each language among ``keys`` (the logging outputs' keys) with samples, from the
    summed logging outputs (``total(key)``)."""
    for key in sorted(keys):
        if key.startswith(REWARD):
            lang = key[len(REWARD):]
            count = total(COUNT + lang)
            if count:
                metrics.log_scalar(key, 100.0 * total(key) / count, count, round=2)
