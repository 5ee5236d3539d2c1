"""Sentence-level GLEU (Wu et al. 2016, GNMT section 7), the REINFORCE reward.

For a hypothesis and a reference, collect all their n-grams for n = 1..N
(N = ``max_order``, default 4) and count the matching ones with clipped counts
(an n-gram matches as often as it occurs in both).  Then

    GLEU = matches / max(#hypothesis n-grams, #reference n-grams)

that is min(precision, recall); 0 when both sides have no n-gram.

``gleu`` scores one pair of token sequences (ints or strings); ``gleu_batch``
scores a batch of padded id tensors at once without a Python loop over the
examples, exactly: from the token-equality matrices (hypothesis x hypothesis,
hypothesis x reference) of each sentence, n-gram equality is the AND of n
shifted token equalities, and an n-gram occurring c_h times in the hypothesis
and c_r times in the reference contributes min(c_h, c_r) / c_h at each of its
hypothesis positions.  Cost B x L^2 per order, no sorting and no n-gram ids
(so no overflow, whatever the vocabulary).
"""

from typing import Sequence

import torch
from torch import Tensor


def gleu_batch(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """GLEU of each hypothesis row against its reference row.

    hyp: B x Lh ids, the first ``hyp_lens[b]`` of row b count (the rest may
    be anything); ref: B x Lr ids and ``ref_lens`` likewise.  Returns B floats.
    """
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    device = hyp.device
    hyp, ref = hyp.long(), ref.long().to(device)
    hyp_lens, ref_lens = hyp_lens.to(device).long(), ref_lens.to(device).long()
    # token equality, hypothesis x hypothesis and hypothesis x reference (B x Lh x L)
    same_h1 = hyp.unsqueeze(2) == hyp.unsqueeze(1)
    same_r1 = hyp.unsqueeze(2) == ref.unsqueeze(1)
    same_h, same_r = same_h1, same_r1
    matches = torch.zeros(hyp.size(0), dtype=torch.float64, device=device)
    for n in range(1, max_order + 1):
        if n > 1:  # n-grams at (i, j) are equal iff the (n-1)-grams are and the n-th tokens are
            same_h = same_h[:, :-1, :-1] & same_h1[:, n - 1:, n - 1:]
            same_r = same_r[:, :-1, :-1] & same_r1[:, n - 1:, n - 1:]
        if same_h.size(1) == 0:
            break
        valid_h = torch.arange(same_h.size(1), device=device) + n <= hyp_lens.unsqueeze(1)  # B x (Lh - n + 1)
        valid_r = torch.arange(same_r.size(2), device=device) + n <= ref_lens.unsqueeze(1)
        in_hyp = (same_h & valid_h.unsqueeze(1)).sum(2)  # occurrences of hypothesis n-gram i in the hypothesis
        in_ref = (same_r & valid_r.unsqueeze(1)).sum(2)  # ... and in the reference
        # each distinct n-gram's clipped count min(in_hyp, in_ref), shared among its in_hyp occurrences
        share = torch.minimum(in_hyp, in_ref).double() / in_hyp.clamp(min=1)
        matches += (share * valid_h).sum(1)
    orders = torch.arange(1, max_order + 1, device=device)
    hyp_total = (hyp_lens.unsqueeze(1) - orders + 1).clamp(min=0).sum(1)
    ref_total = (ref_lens.unsqueeze(1) - orders + 1).clamp(min=0).sum(1)
    denom = torch.maximum(hyp_total, ref_total)
    return torch.where(denom > 0, matches.round() / denom.clamp(min=1), torch.zeros_like(matches)).float()


def gleu(hyp: Sequence, ref: Sequence, max_order: int = 4) -> float:
    """GLEU of one hypothesis against one reference (sequences of ints or
    strings, e.g. ``"a cat".split()``)."""
    vocab = {}
    as_ids = [[vocab.setdefault(tok, len(vocab)) for tok in seq] for seq in (hyp, ref)]
    tensors = [torch.tensor([seq], dtype=torch.long).view(1, len(seq)) for seq in as_ids]
    lens = [torch.tensor([len(seq)]) for seq in as_ids]
    return float(gleu_batch(tensors[0], lens[0], tensors[1], lens[1], max_order)[0])
