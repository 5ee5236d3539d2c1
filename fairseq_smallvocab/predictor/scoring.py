"""Vocabulary-prediction arithmetic shared by the task, the criterion and the
scripts: labels, the unigram prior, recall@K and top-K candidate selection."""

from typing import Iterable, Optional, Sequence

import numpy as np
import torch


def multi_hot(targets: torch.Tensor, vocab_size: int, ignore: Iterable[int]) -> torch.Tensor:
    """(B, T) padded target ids -> (B, V) float labels: 1 for every word that
    occurs in the example's target, 0 elsewhere; the ids in ``ignore`` (pad,
    bos) are never labels."""
    labels = targets.new_zeros(targets.size(0), vocab_size, dtype=torch.float)
    labels.scatter_(1, targets, 1.0)
    for idx in ignore:
        labels[:, idx] = 0.0
    return labels


def document_frequency(token_stream: np.ndarray, sizes: np.ndarray, vocab_size: int,
                       ignore: Iterable[int] = ()) -> np.ndarray:
    """p(i): the fraction of examples whose target contains word i.

    ``token_stream`` is every example's tokens concatenated, ``sizes`` the
    examples' lengths (as in fairseq's indexed datasets)."""
    n = len(sizes)
    if n == 0:
        raise ValueError("cannot compute a word prior from an empty training set")
    example = np.repeat(np.arange(n, dtype=np.int64), sizes)
    pairs = np.unique(example * vocab_size + token_stream.astype(np.int64))
    prior = np.bincount(pairs % vocab_size, minlength=vocab_size).astype(np.float64) / n
    for idx in ignore:
        prior[idx] = 0.0
    return prior


def topk_positions(scores: torch.Tensor, k_max: int) -> torch.Tensor:
    """(B, V) scores -> (B, V) int64: each word's rank among the example's
    top-``k_max`` words (0 = best), or ``k_max`` for words outside them.
    A word is in the top-K (K <= k_max) exactly when its position is < K."""
    top = scores.topk(k_max, dim=1, sorted=True).indices
    pos = torch.full_like(scores, k_max, dtype=torch.long)
    ranks = torch.arange(k_max, device=scores.device).expand_as(top)
    return pos.scatter_(1, top, ranks)


def recall_hits(scores: torch.Tensor, targets: torch.Tensor, ks: Sequence[int], pad: int):
    """Token-level recall counts: for each K, how many non-pad target tokens
    (repeats counted, eos included) are in the example's top-K words.
    Returns (list of hits per K, number of target tokens)."""
    positions = topk_positions(scores, max(ks)).gather(1, targets)
    real = targets.ne(pad)
    return [int((positions.lt(k) & real).sum()) for k in ks], int(real.sum())


class TooManyForcedWords(ValueError):
    """An example (``row`` of the batch) with more words to force in
    (``forced``) than K."""

    def __init__(self, message, row: int, forced: int):
        super().__init__(message)
        self.row, self.forced = row, forced


def select_candidates(scores: torch.Tensor, k: int, gold: Optional[torch.Tensor] = None,
                      always: Sequence[int] = ()) -> torch.Tensor:
    """The top-``k`` word ids of each example, best first, as (B, k) int64.

    ``gold`` (B, V) 0/1 labels and the ids in ``always`` are forced in (the
    paper's 100% training recall: top-K of o + gold indicator); scores are
    probabilities in [0, 1], so a bonus of 2 (gold) and 4 (always) ranks
    forced words first without changing the order of the others."""
    adjusted = scores.float().clone()
    forced = torch.zeros_like(adjusted) if gold is None else gold.float().clone()
    for idx in always:
        forced[:, idx] = 1.0
    n_forced = forced.sum(1)
    if bool((n_forced > k).any()):
        row = int((n_forced > k).nonzero()[0])
        raise TooManyForcedWords(f"example {row} of the batch needs {int(n_forced[row])} forced words (its "
                                 f"distinct gold words and {list(always)}), more than K = {k}; use a larger K",
                                 row, int(n_forced[row]))
    if gold is not None:
        adjusted += 2.0 * gold
    for idx in always:
        adjusted[:, idx] += 4.0
    return adjusted.topk(k, dim=1, sorted=True).indices


def check_k(k: int, vocab_size: int, what: str = "K"):
    if not 1 <= k <= vocab_size:
        raise ValueError(f"{what} = {k} is out of range: it must be between 1 and the target "
                         f"vocabulary size {vocab_size}")


def versus_frequency(recall: float, frequency: float, margin: float = 0.0) -> str:
    """How a predictor's recall (percent) stands against the frequency list's, worded from the two numbers:
    "X points below the frequency list's F%", "level with" it, "within ``margin`` points of" it (above it by
    less than ``margin``), or "X points above" it."""
    recall, frequency = round(recall, 2), round(frequency, 2)  # the gap of the percentages as shown
    gap = round(recall - frequency, 2)
    theirs = f"the frequency list's {frequency:.2f}%"
    if gap < 0:
        return f"{-gap:.2f} points below {theirs}"
    if gap == 0:
        return f"level with {theirs}"
    if gap < margin:
        return f"within {margin:g} points of {theirs}"
    return f"{gap:.2f} points above {theirs}"
