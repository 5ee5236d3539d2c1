"""REINFORCE's sentence rewards: GLEU (the paper's), sentence BLEU and chrF
(sacrebleu's), and a constant control.

Every reward scores B sampled sentences against their references and gives
B floats in [0, 1] (``SentenceReward``; ``named_reward`` by name):

- ``gleu`` (default): sentence-level GLEU (Wu et al. 2016, GNMT section 7),
  below, exact and vectorized over the batch;
- ``gleu_bp``: GLEU times BLEU's sentence brevity penalty,
  min(1, exp(1 - r / h)) for a sample of h words against a reference of r.
  GLEU is min(precision, recall): once a sample's precision exceeds its
  recall, a dropped word costs it nothing, and REINFORCE drifts to short
  outputs that corpus BLEU's brevity penalty then punishes; the penalty
  makes every word short of the reference cost the reward, as it costs BLEU;
- ``bleu``: sentence BLEU / 100 as sacrebleu's ``sentence_bleu`` scores it
  (``effective_order``, its default ``exp`` smoothing, ``tokenize="none"``:
  the n-grams are the words as the dictionary (and the post-processing)
  give them, the words GLEU sees), computed like GLEU on the whole batch at
  once (``bleu_batch``; equal to sacrebleu's, tested);
- ``chrf``: sacrebleu's sentence chrF / 100 (character 6-grams, beta 2);
- ``constant``: 1 for every sample (Choshen et al. 2020's control: whatever
  it changes is not learning from the reward).  It ignores the sample
  altogether, empty ones included, so that it stays a control (with the
  leave-one-out baseline its advantage is exactly 0).

An empty sample or reference scores 0 with gleu, bleu and chrf.  With a
post-processing (``post_process``: sentencepiece, subword_nmt, ... as
fairseq-generate's ``--post-process``) the rewards read the post-processed
words, not the subword tokens.

Sentence-level GLEU:

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

import logging
from typing import Dict, Hashable, List, Optional, Sequence

import torch
from torch import Tensor

from fairseq_smallvocab.data.subwords import POST_PROCESSING_MARKS, subword_scheme

logger = logging.getLogger(__name__)

REWARDS = ("gleu", "gleu_bp", "bleu", "chrf", "constant")



def check_post_process(post_process: Optional[str], dictionary, flag: str = "--reward-post-process"):
    """Refuse a post-processing fairseq does not know (it would fail at the
    first batch); warn when no token of ``dictionary`` carries its mark: a
    word-level dictionary post-processed as subwords glues each sentence
    into one word, and the reward then scores almost nothing."""
    if post_process is None:
        _warn_if_subwords(dictionary, flag)
        return
    if post_process not in POST_PROCESSING_MARKS:
        raise ValueError(f"{flag} {post_process!r} is not a fairseq post-processing; choose one of "
                         f"{', '.join(repr(k) for k in POST_PROCESSING_MARKS)} (as fairseq-generate's --post-process), "
                         "or leave the flag out for word-level data")
    mark = POST_PROCESSING_MARKS[post_process]
    if mark is not None and not any(mark in dictionary[i] for i in range(dictionary.nspecial, len(dictionary))):
        logger.warning(f"{flag} {post_process}: no token of the target dictionary ({len(dictionary)} entries) holds "
                       f"{mark!r}, the mark of {post_process} pieces, so these look like whole words; "
                       f"post-processing them as {post_process} joins each sentence into one word and the reward "
                       "scores almost nothing: leave the flag out for word-level data")


def _warn_if_subwords(dictionary, flag):
    """Warn when a dictionary looks like subword pieces but no
    post-processing was asked for: the reward would then score pieces, not
    words (GLEU several times higher than on the words, and not what
    fairseq-generate's BLEU measures)."""
    found = subword_scheme(dictionary)
    if found:
        name, mark, share, words = found
        logger.warning(f"{100 * share:.0f}% of the target dictionary's {words} tokens hold {mark!r}, the "
                       f"mark of {name} pieces, and no {flag} was given, so the reward scores pieces, not "
                       f"words: give {flag} {name} (as fairseq-generate's --post-process) for subword data")


def ngram_matches(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """The clipped n-gram matches of each hypothesis row against its reference
    row, per order: B x ``max_order`` (float64, whole numbers).

    hyp: B x Lh ids, the first ``hyp_lens[b]`` of row b count (the rest may
    be anything); ref: B x Lr ids and ``ref_lens`` likewise.
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
    matches = torch.zeros(hyp.size(0), max_order, dtype=torch.float64, device=device)
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
        matches[:, n - 1] = (share * valid_h).sum(1)
    return matches.round()


def _ngram_totals(lens: Tensor, max_order: int) -> Tensor:
    """B x max_order: the number of n-grams of each order in sentences of these lengths."""
    orders = torch.arange(1, max_order + 1, device=lens.device)
    return (lens.long().unsqueeze(1) - orders + 1).clamp(min=0)


def gleu_batch(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """GLEU of each hypothesis row against its reference row (as
    ``ngram_matches`` takes them).  Returns B floats."""
    matches = ngram_matches(hyp, hyp_lens, ref, ref_lens, max_order).sum(1)
    hyp_total = _ngram_totals(hyp_lens.to(matches.device), max_order).sum(1)
    ref_total = _ngram_totals(ref_lens.to(matches.device), max_order).sum(1)
    denom = torch.maximum(hyp_total, ref_total)
    return torch.where(denom > 0, matches / denom.clamp(min=1), torch.zeros_like(matches)).float()


def brevity_penalty(hyp_lens: Tensor, ref_lens: Tensor) -> Tensor:
    """BLEU's brevity penalty of each sentence, min(1, exp(1 - r / h)) for h
    hypothesis and r reference words (float64; 0 for an empty hypothesis)."""
    h, r = hyp_lens.double(), ref_lens.to(hyp_lens.device).double()
    return torch.where(h < r, torch.exp(1 - r / h.clamp(min=1)) * (h > 0), torch.ones_like(h))


def gleu_bp_batch(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """GLEU times BLEU's sentence brevity penalty, of each hypothesis row
    against its reference row (as ``gleu_batch`` takes them)."""
    score = gleu_batch(hyp, hyp_lens, ref, ref_lens, max_order).double()
    return (score * brevity_penalty(hyp_lens.to(score.device), ref_lens.to(score.device))).float()


def bleu_batch(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor, max_order: int = 4) -> Tensor:
    """Sentence BLEU / 100 of each hypothesis row against its reference row,
    exactly as sacrebleu's ``sentence_bleu`` (``effective_order``, ``exp``
    smoothing) computes it on the same words, without its Python loop: the
    orders with n-grams in the hypothesis count (effective order); a matched
    order's precision is m_n / t_n, the k-th order without a match gets
    1 / (2^k t_n) (mteval's smoothing); BLEU = BP exp(mean log p_n),
    BP = min(1, exp(1 - r / h)); 0 without any match."""
    matches = ngram_matches(hyp, hyp_lens, ref, ref_lens, max_order)
    device = matches.device
    h, r = hyp_lens.to(device).double(), ref_lens.to(device).double()
    totals = _ngram_totals(hyp_lens.to(device), max_order).double()
    counted = totals > 0
    unmatched = (matches == 0) & counted
    smoothing = torch.pow(2.0, unmatched.double().cumsum(1))  # 2^k for the k-th order without a match
    precision = torch.where(unmatched, 1.0 / (smoothing * totals.clamp(min=1)), matches / totals.clamp(min=1))
    log_p = torch.where(counted, precision.clamp(min=1e-300).log(), torch.zeros_like(precision))
    log_mean = log_p.sum(1) / counted.sum(1).clamp(min=1)
    score = brevity_penalty(h, r) * torch.exp(log_mean)
    return torch.where((matches.sum(1) > 0) & (h > 0), score, torch.zeros_like(score)).float()


def gleu(hyp: Sequence, ref: Sequence, max_order: int = 4) -> float:
    """GLEU of one hypothesis against one reference (sequences of ints or
    strings, e.g. ``"a cat".split()``)."""
    vocab: Dict[Hashable, int] = {}
    as_ids = [[vocab.setdefault(tok, len(vocab)) for tok in seq] for seq in (hyp, ref)]
    tensors = [torch.tensor([seq], dtype=torch.long).view(1, len(seq)) for seq in as_ids]
    lens = [torch.tensor([len(seq)]) for seq in as_ids]
    return float(gleu_batch(tensors[0], lens[0], tensors[1], lens[1], max_order)[0])


def without_ids(tokens: Tensor, ids, pad: int, lengths: Optional[Tensor] = None):
    """Rows with every token in ``ids`` taken out (a multilingual model's
    language tokens: not words of the sentence), the rest moved left in
    order and padded with ``pad``; with ``lengths`` (the first
    ``lengths[b]`` tokens of row b count), the new lengths."""
    drop = torch.isin(tokens, torch.as_tensor(sorted(ids), dtype=tokens.dtype, device=tokens.device))
    if lengths is not None:
        counted = torch.arange(tokens.size(1), device=tokens.device) < lengths.view(-1, 1)
        lengths = lengths - (drop & counted).sum(1).to(lengths.dtype)
    order = torch.argsort(drop.int(), dim=1, stable=True)
    return tokens.gather(1, order).masked_fill(drop.gather(1, order), pad), lengths


class SentenceReward:
    """``reward(tokens, lengths, target, ref_lens)``: B floats in [0, 1] for
    B x T sampled ids (the first ``lengths[b]`` of row b count) against B x L
    gold ids (the first ``ref_lens[b]``), on the samples' device.  A reward
    that ``wants_sources`` also takes each row's source sentence
    (``user_reward.UserReward``)."""

    wants_sources = False

    def __init__(self, dictionary, post_process: Optional[str] = None):
        self.dictionary, self.post_process = dictionary, post_process

    def words(self, ids: Tensor, lengths: Tensor) -> List[str]:
        """Each row as text: its first ``lengths[b]`` ids, post-processed."""
        return [self.dictionary.string(row[: int(n)], self.post_process)
                for row, n in zip(ids.cpu(), lengths.cpu())]

    def __call__(self, tokens: Tensor, lengths: Tensor, target: Tensor, ref_lens: Tensor) -> Tensor:
        raise NotImplementedError


class NgramReward(SentenceReward):
    """GLEU or BLEU, vectorized over the batch on word ids."""

    def __init__(self, dictionary, post_process=None, max_order: int = 4, metric=gleu_batch):
        super().__init__(dictionary, post_process)  # max_order: checked by the criterion and by ngram_matches
        self.max_order, self.metric = max_order, metric

    def __call__(self, tokens, lengths, target, ref_lens):
        if self.post_process is None:  # the ids are the words: no detour through strings
            return self.metric(tokens, lengths, target, ref_lens, self.max_order)
        vocab = {}
        hyps = [[vocab.setdefault(w, len(vocab)) for w in text.split()] for text in self.words(tokens, lengths)]
        refs = [[vocab.setdefault(w, len(vocab)) for w in text.split()] for text in self.words(target, ref_lens)]
        (h, hl), (r, rl) = _pack(hyps), _pack(refs)
        return self.metric(h, hl, r, rl, self.max_order).to(tokens.device)


class ChrfReward(SentenceReward):
    """sacrebleu's sentence chrF, divided by 100 (one sentence at a time)."""

    def __init__(self, dictionary, post_process=None):
        super().__init__(dictionary, post_process)
        from sacrebleu.metrics import CHRF
        self.metric = CHRF()

    def __call__(self, tokens, lengths, target, ref_lens):
        scores = [self.metric.sentence_score(hyp, [ref]).score / 100.0 if hyp.strip() and ref.strip() else 0.0
                  for hyp, ref in zip(self.words(tokens, lengths), self.words(target, ref_lens))]
        return torch.tensor(scores, dtype=torch.float).to(tokens.device)


class ConstantReward(SentenceReward):
    def __call__(self, tokens, lengths, target, ref_lens):
        return torch.ones(tokens.size(0), dtype=torch.float, device=tokens.device)


def named_reward(name: str, dictionary, post_process: Optional[str] = None, max_order: int = 4) -> SentenceReward:
    """A built-in reward of ``REWARDS`` by name (``user_reward.build_reward``, the factory of rewards, also takes
    ``python:MODULE.FUNCTION``)."""
    check_post_process(post_process, dictionary)
    if name == "gleu":
        return NgramReward(dictionary, post_process, max_order, gleu_batch)
    if name == "gleu_bp":
        return NgramReward(dictionary, post_process, max_order, gleu_bp_batch)
    if name == "bleu":  # BLEU's own four orders
        return NgramReward(dictionary, post_process, 4, bleu_batch)
    if name == "chrf":
        return ChrfReward(dictionary, post_process)
    if name == "constant":
        return ConstantReward(dictionary, post_process)
    raise ValueError(f"unknown reward '{name}': --reward must be one of {', '.join(REWARDS)}, or "
                     "python:MODULE.FUNCTION for a reward of your own")


def _pack(seqs):
    """Lists of ids -> a padded B x L tensor and the lengths."""
    out = torch.zeros(len(seqs), max([len(s) for s in seqs] + [1]), dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out, torch.tensor([len(s) for s in seqs])
