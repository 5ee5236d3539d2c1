"""Whether K fits the data: said once per evaluated split when a task loads it (by the translation task from
the split's lists, by the multilingual one from the rows its predictors make for the split's first batches).

One log line gives K, the target vocabulary |V| and K's share of it, and the
share of the split's reference words outside their sentence's K candidates
(words the model cannot write there).  A warning names the fix when that
share is high (raise K, or the full softmax) or when K is so large a share of
|V| that the small softmax saves little.  Training lists hold every gold word,
so only evaluated splits (validation, test) are measured."""

import logging
from typing import Sequence, Tuple

import numpy as np
import torch

from fairseq_smallvocab.candidates.space import gold_outside_candidates

logger = logging.getLogger(__name__)

# judgement, not measurement: a user's 5.3% of reference words outside (K = 500 of 1,042 words) cost about 4 BLEU,
# Multi30k's 3.7% (K = 500 of 7,864) cost none measurable; the output layer of K = |V| / 4 is only 4x smaller
OUTSIDE_WARN = 5.0
SHARE_WARN = 0.25
MEASURED = 5000  # sentences: the share is measured on the split's first ones


def reference_outside(rows: np.ndarray, targets: Sequence[torch.Tensor], tgt_dict, limit: int = MEASURED,
                      chunk: int = 512) -> Tuple[int, int, int]:
    """(sentences, reference tokens, how many of them are outside their sentence's row) over the first ``limit``
    sentences; ``targets[i]`` holds sentence i's target ids (eos included, as the model is trained to write it)."""
    n = min(len(rows), len(targets), limit)
    tokens = outside = 0
    for start in range(0, n, chunk):
        part = [targets[i].long() for i in range(start, min(n, start + chunk))]
        target = torch.nn.utils.rnn.pad_sequence(part, batch_first=True, padding_value=tgt_dict.pad())
        counted, missed = gold_outside_candidates(torch.from_numpy(rows[start:start + len(part)].astype(np.int64)),
                                                  target, tgt_dict)
        tokens, outside = tokens + counted, outside + missed
    return n, tokens, outside


def fit_messages(split: str, k: int, vocab: int, sentences: int, tokens: int, outside: int):
    """(the log line, [warnings]) for a split whose ``outside`` of ``tokens`` reference tokens (in its first
    ``sentences`` sentences) are outside their K candidates, of a target dictionary of ``vocab`` entries."""
    share = 100.0 * outside / tokens if tokens else 0.0
    line = (f"candidates for {split}: K = {k} of |V| = {vocab:,} target entries ({100.0 * k / vocab:.1f}%); "
            f"{share:.2f}% of the reference words of its {'first ' if sentences >= MEASURED else ''}{sentences:,} "
            "sentences are outside their sentence's K candidates")
    warnings = []
    if share >= OUTSIDE_WARN:
        warnings.append(f"{share:.1f}% of the reference words of {split} are outside their K = {k} candidates: the "
                        "model cannot write them there, which costs BLEU. Raise --small-vocab-size (scripts/"
                        "recall_curve.py gives the predictor's recall at each K), or train with the full softmax "
                        "(--small-vocab-size 0)")
    if k >= SHARE_WARN * vocab:
        warnings.append(f"K = {k} is {100.0 * k / vocab:.0f}% of the {vocab:,} target entries: the small softmax "
                        "saves little at such a share (its speed comes from K much smaller than |V|), and the "
                        "words outside the candidates still cost BLEU; the full softmax (--small-vocab-size 0) "
                        "loses none")
    return line, warnings


def log_fit(split: str, k: int, vocab: int, sentences: int, tokens: int, outside: int):
    """Log how K fits ``split`` (``fit_messages``' line), with a warning where it does not."""
    line, warnings = fit_messages(split, k, vocab, sentences, tokens, outside)
    logger.info(line)
    for warning in warnings:
        logger.warning(warning)


def batches_outside(batches, rows_of, tgt_dict) -> Tuple[int, int, int]:
    """``reference_outside`` for a task whose rows are made per batch (the multilingual one): (sentences,
    reference tokens, outside their rows) over collated ``batches`` (the caller's first sentences of a split);
    ``rows_of(batch)`` gives a batch's candidate rows as validation gives them."""
    sentences = tokens = outside = 0
    for batch in batches:
        counted, missed = gold_outside_candidates(rows_of(batch), batch["target"], tgt_dict)
        sentences, tokens, outside = sentences + batch["nsentences"], tokens + counted, outside + missed
    return sentences, tokens, outside
