"""Sentence-level GLEU (Wu et al. 2016, GNMT section 7), the REINFORCE reward.

For a hypothesis and a reference, collect all their n-grams for n = 1..N
(N = ``max_order``, default 4) and count the matching ones with clipped counts
(an n-gram matches as often as it occurs in both).  Then

    GLEU = matches / max(#hypothesis n-grams, #reference n-grams)

that is min(precision, recall); 0 when both sides have no n-gram.

``gleu`` scores one pair of token sequences (ints or strings); ``gleu_batch``
scores a batch of padded id tensors at once without a Python loop over the
examples: n-grams get exact integer ids (packed base-U numbers over the batch's
U distinct tokens), and per order, the clipped matches of every sentence come
from one ``unique`` and two ``bincount`` over (sentence, n-gram) keys.
"""

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

_LIMIT = 2**62


def _rank(x: Tensor) -> Tensor:
    return torch.unique(x, return_inverse=True)[1].view(x.shape)


def _ngram_ids(tokens: Tensor, max_order: int):
    """For n = 1..max_order: (ids, span), ids of shape rows x (L - n + 1),
    equal iff the n-grams are equal (across all rows), all < span.  Ids are
    packed base-U numbers (U = distinct tokens) while they fit in 62 bits,
    and re-ranked densely when they would not."""
    tokens = _rank(tokens.long())
    base = int(tokens.max()) + 1 if tokens.numel() else 1
    current, span = tokens, base
    out = [(tokens, span)]
    for n in range(2, max_order + 1):
        width = max(tokens.size(1) - n + 1, 0)
        if span * base >= _LIMIT:
            current, span = _rank(current), (int(current.max()) + 1 if current.numel() else 1)
        current = current[:, :width] * base + tokens[:, n - 1:n - 1 + width]
        span = span * base
        out.append((current, span))
    return out


def gleu_batch(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """GLEU of each hypothesis row against its reference row.

    hyp: B x Lh ids, the first ``hyp_lens[b]`` of row b count (the rest may
    be anything); ref: B x Lr ids and ``ref_lens`` likewise.  Returns B floats.
    """
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    bsz, lh = hyp.shape
    lr = ref.size(1)
    device = hyp.device
    hyp_lens, ref_lens = hyp_lens.to(device).long(), ref_lens.to(device).long()
    width = max(lh, lr)
    both = torch.cat([F.pad(hyp.long(), (0, width - lh)), F.pad(ref.long().to(device), (0, width - lr))], dim=0)
    lens = torch.cat([hyp_lens, ref_lens])
    rows = torch.arange(2 * bsz, device=device).unsqueeze(1)
    is_ref = rows >= bsz
    example = rows % bsz  # the example each row belongs to
    matches = torch.zeros(bsz, device=device)
    for n, (grams, span) in enumerate(_ngram_ids(both, max_order), start=1):
        if grams.size(1) == 0:
            continue
        valid = torch.arange(grams.size(1), device=device).unsqueeze(0) + n <= lens.unsqueeze(1)
        if span * bsz >= _LIMIT:  # make room for the example index in the key
            grams, span = _rank(grams), int(grams.numel())
        keys = (example * span + grams)[valid]
        side = is_ref.expand_as(grams)[valid]
        unique, inverse = torch.unique(keys, return_inverse=True)
        in_hyp = torch.bincount(inverse[~side], minlength=len(unique))
        in_ref = torch.bincount(inverse[side], minlength=len(unique))
        matches.index_add_(0, unique // span, torch.minimum(in_hyp, in_ref).float())
    orders = torch.arange(1, max_order + 1, device=device)
    hyp_total = (hyp_lens.unsqueeze(1) - orders + 1).clamp(min=0).sum(1)
    ref_total = (ref_lens.unsqueeze(1) - orders + 1).clamp(min=0).sum(1)
    denom = torch.maximum(hyp_total, ref_total).float()
    return torch.where(denom > 0, matches / denom.clamp(min=1), torch.zeros_like(matches))


def gleu(hyp: Sequence, ref: Sequence, max_order: int = 4) -> float:
    """GLEU of one hypothesis against one reference (sequences of ints or
    strings, e.g. ``"a cat".split()``)."""
    vocab = {}
    as_ids = [[vocab.setdefault(tok, len(vocab)) for tok in seq] for seq in (hyp, ref)]
    tensors = [torch.tensor([seq], dtype=torch.long).view(1, len(seq)) for seq in as_ids]
    lens = [torch.tensor([len(seq)]) for seq in as_ids]
    return float(gleu_batch(tensors[0], lens[0], tensors[1], lens[1], max_order)[0])
