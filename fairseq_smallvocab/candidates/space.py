"""The candidate space: each example's K target words, and how ids map into it.

A batch's candidates are a B x K matrix of target-dictionary ids, one row per
example.  One convention holds everywhere (``check_rows`` is its validator):
position i of every row holds fairseq's special symbol i for the target
dictionary's special symbols (bos, pad, eos, unk = 0..3, ``nspecial`` of
them), then the example's words.  So a candidate-space id of a special symbol
equals its dictionary id, and fairseq's search code (pad/unk/eos handling,
min/max length, unk penalty) and criteria (``ignore_index=pad``) work
unchanged in candidate space.

The paper's K (Hashimoto & Tsuruoka 2019, section 4.1): K = 1000 for a target
vocabulary of more than 10,000 words, else 500.
"""

from typing import Tuple

import numpy as np
import torch
from torch import Tensor


def default_small_vocab_size(vocab_size: int) -> int:
    """The paper's rule for K."""
    return 1000 if vocab_size > 10000 else 500


def candidate_rows(lists: np.ndarray, k: int, nspecial: int, where: str) -> np.ndarray:
    """(N, K) rows from (N, K') candidate lists (best first): the special ids
    0..nspecial-1, then each list's first K - nspecial non-special ids, in the
    list's order.  ``where`` names the lists in errors."""
    lists = np.asarray(lists).astype(np.int64)
    keep = lists >= nspecial
    need = k - nspecial
    short = keep.sum(1) < need
    if short.any():
        row = int(np.flatnonzero(short)[0])
        raise ValueError(f"{where}: example {row} has only {int(keep[row].sum())} non-special candidates, "
                         f"{need} are needed for K = {k}; export the lists with a larger K")
    order = np.argsort(~keep, axis=1, kind="stable")[:, :need]
    words = np.take_along_axis(lists, order, axis=1)
    specials = np.broadcast_to(np.arange(nspecial, dtype=np.int64), (len(lists), nspecial))
    dtype = np.int32 if lists.max(initial=0) > np.iinfo(np.uint16).max else np.uint16
    return np.concatenate([specials, words], axis=1).astype(dtype)


def check_rows(candidates: Tensor, nspecial: int, vocab_size: int):
    """Refuse a candidate matrix that breaks the convention: B x K integer ids
    of the target dictionary, special symbol i at position i of every row."""
    if candidates.dim() != 2 or candidates.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"candidates must be a B x K matrix of int64 target ids, got {candidates.dtype} of "
                         f"shape {tuple(candidates.shape)}")
    if candidates.size(1) <= nspecial:
        raise ValueError(f"candidate rows of {candidates.size(1)} ids leave no room for words beside the "
                         f"{nspecial} special symbols")
    specials = torch.arange(nspecial, device=candidates.device)
    if not bool(candidates[:, :nspecial].eq(specials).all()):
        row = int(candidates[:, :nspecial].ne(specials).any(1).nonzero()[0])
        raise ValueError(f"candidate row {row} does not start with the special symbols 0..{nspecial - 1} at "
                         "their own ids (build rows with candidates.space.candidate_rows)")
    if candidates.numel() and (int(candidates.min()) < 0 or int(candidates.max()) >= vocab_size):
        raise ValueError(f"candidate ids outside the target dictionary (0..{vocab_size - 1})")


def candidate_positions(candidates: Tensor, target: Tensor, unk: int) -> Tensor:
    """Each target id's position in its example's candidate row (B x K);
    ids that are not candidates get the position of ``unk`` (its own id, by
    the special-symbols convention).  A sort and a binary search per row:
    memory B x K, not B x |V|."""
    sorted_ids, order = candidates.long().sort(dim=1)
    idx = torch.searchsorted(sorted_ids, target.contiguous()).clamp_(max=candidates.size(1) - 1)
    found = sorted_ids.gather(1, idx).eq(target)
    return torch.where(found, order.gather(1, idx), torch.full_like(idx, unk))


def gold_outside_candidates(candidates: Tensor, target: Tensor, tgt_dict) -> Tuple[int, int]:
    """(reference tokens, how many of them are not in their example's
    candidates), judged by the same mapping the model's targets use."""
    real = target.ne(tgt_dict.pad())
    mapped = candidates.gather(1, candidate_positions(candidates, target, tgt_dict.unk()))
    return int(real.sum()), int((real & mapped.ne(target)).sum())
