"""Sampling from any restricted fairseq encoder-decoder, and scoring the samples.

REINFORCE needs, per example b, a sequence y_b ~ p(. | x_b) drawn inside the
example's candidates c_b (or the whole vocabulary), and the differentiable
log-probabilities log p(y_bt | y_b<t, x_b) of the drawn tokens.  Both read the
same policy: the model in eval mode (every dropout and LayerDrop off), which
the caller arranges (``restricted_model``).

- ``sample``: step by step through the decoder's incremental state (for
  fairseq's Transformers and LSTMs and the plugin's, a state made once per
  batch, ``static_state``), without gradient; each step scores the rows of the batch's candidate union with one
  product (``UnionScorer``) and draws from the softmax over the row's K words
  (pad and bos excluded).  All examples advance together (no loop over
  examples); example b stops at its eos or after ``max_lens[b]`` tokens.
- ``score``: one teacher-forced pass over the samples with gradient, which
  gives log p(y_bt) for every step at once and the decoder states s_bt that a
  learned baseline reads.  Memory grows with T (one pass), not with T^2 as
  keeping every incremental step's graph would for a Transformer (whose step
  t attends over all t cached states).
- ``keep_probs=True``: the sampling loop, which makes each step's softmax
  anyway, keeps it (B x T x K) and the drawn words' log-probabilities;
  ``score`` then neither makes the B x T x K logits again nor differentiates
  through a softmax: the gradient of log p(y_t) with respect to the logits is
  onehot(y_t) - p_t, formed from the kept p_t (``CandidateLogProbs``).  The
  full softmax's REINFORCE step keeps its B x T x V probabilities this way
  and makes two B x T x V x d products instead of four (scoring's forward and
  the backward's recomputed logits are gone); above
  ``STORED_PROBS_MAX_ELEMENTS`` the logits are made again instead
  (measurements: docs/RESULTS.md, "A REINFORCE step at the flat 99-token
  limit (#19): profile and first speed-ups").
- ``keep_graph=True`` (recurrent decoders): the sampling steps keep their
  graph and ``score`` reads the log-probabilities from the kept states, with
  no second pass through the decoder; an RNN step's graph does not grow with
  t.  Both ways give the same log-probabilities (tested).  The kept steps'
  embedding lookups give their weight one gradient, not one per step
  (``output/gathered_grad.py``).
"""

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor

from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads
from fairseq_smallvocab.output.restricted import candidate_log_probs
from fairseq_smallvocab.output.union_scorer import UnionScorer
from fairseq_smallvocab.reinforce.static_state import static_state


@dataclass(frozen=True)
class SampleRequest:
    """What REINFORCE asks of the restricted model's forward besides its
    teacher-forced pass (``restricted_model``): ``num_samples`` sequences per
    example, each at most ``max_lens[b]`` tokens (B), drawn at
    ``temperature``, and with ``greedy_too`` each example's greedy decode."""

    max_lens: Tensor
    num_samples: int = 1
    greedy_too: bool = False
    temperature: float = 1.0


@dataclass
class Samples:
    """Sequences drawn by ``sample``, one per row: B x T tensors unless said
    otherwise.  ``score`` fills ``lprobs`` and replaces ``features``."""

    tokens: Tensor  # target ids, pad after the end
    positions: Tensor  # the chosen index in the row's candidates (the id for the full softmax); eos after the end
    mask: Tensor  # the steps that count, the eos included
    lengths: Tensor  # B: tokens before the eos
    is_greedy: Optional[Tensor] = None  # B, drawn samples only: every token was its step's argmax
    entropy: Optional[Tensor] = None  # B, drawn samples only: summed over the steps, of what was drawn from
    features: Optional[Tensor] = None  # B x T x d: the states that chose each token (kept graph; detached by score)
    probs: Optional[Tensor] = None  # B x T x K: each step's softmax (temperature 1), kept by the sampling loop
    chosen_lprobs: Optional[Tensor] = None  # B x T: log p of the drawn word, with ``probs``
    lprobs: Optional[Tensor] = None  # by score: log p(y_t), differentiable, 0 after the end


def sample_categorical(logits: Tensor, with_entropy: bool = False, with_probs: bool = False,
                       probs_out: Optional[Tensor] = None):
    """One draw per row from softmax(logits) (B x N -> B x 1), by inverse
    transform sampling: the index where a uniform draw, scaled to the row's
    total weight, falls in the cumulative weights.  The distribution of
    ``torch.multinomial(softmax(logits), 1)``, drawn faster on the CPU
    (measurements: docs/RESULTS.md, "The team's bar: a REINFORCE step on
    Multi30k with every target word (|V| = 18,726), K = 1000"); words with
    weight 0 (-inf logits) are never chosen.  With ``with_entropy`` also the
    entropy of each row's distribution (B, nats), from the same weights: with
    z = logits - max, w = exp(z), Z = sum w, H = log Z - sum(w z) / Z.  With
    ``with_probs`` (and ``with_entropy``) also softmax(logits) itself, w / Z,
    made in place of the weights (B x N), in ``probs_out`` when given (the
    sampler's kept buffer: no copy)."""
    shifted = logits - logits.max(-1, keepdim=True).values
    weights = torch.exp(shifted, out=probs_out) if probs_out is not None else torch.exp(shifted)
    cdf = weights.cumsum(-1)
    total = cdf[:, -1:]
    draw = torch.rand(logits.size(0), 1, dtype=cdf.dtype, device=cdf.device) * total
    choice = torch.searchsorted(cdf, draw, right=True).clamp_(max=logits.size(-1) - 1)
    if not with_entropy:
        return choice
    # -inf logits have weight 0: clamped so that 0 * z stays 0 (a batched dot product, no B x N temporary)
    weighted = torch.bmm(weights.unsqueeze(1), shifted.clamp_(min=-1e4).unsqueeze(2)).view(-1, 1)
    entropy = (total.log() - weighted / total).squeeze(1)
    return (choice, entropy, weights.div_(total)) if with_probs else (choice, entropy)


def _excluded(dictionary):
    return [dictionary.pad(), dictionary.bos()]  # candidate-space ids equal dictionary ids for specials


# the most step distributions ``sample(keep_probs=True)`` stores (B x T x K float32 entries: 1 GiB)
STORED_PROBS_MAX_ELEMENTS = 2 ** 28

# the loop asks whether any row is still going every this many steps: on a GPU each question is a host sync
# (the steps run in between write only masked entries, and the result is trimmed to the last live step)
STOP_CHECK_EVERY = 1

# decoders that have one (``static_state``) sample on a state made once per batch and written in place,
# instead of fairseq's incremental state; False: fairseq's everywhere (for debugging, and ``--ab``)
STATIC_STATE = True


def sample(decoder, encoder_out, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
           max_lens: Tensor, greedy: bool = False, keep_graph: bool = False,
           temperature: float = 1.0, keep_probs: bool = False) -> Samples:
    """A sequence per example from the decoder (multinomial from
    softmax(logits / temperature), or argmax with ``greedy``), as ``Samples``:
    unless ``greedy`` with ``is_greedy`` and ``entropy``; with ``keep_graph``
    with ``features``, the states that chose each token, with their graph;
    with ``keep_probs`` (not greedy, and at most ``STORED_PROBS_MAX_ELEMENTS``
    entries) with ``probs`` and ``chosen_lprobs``, which ``score`` then uses
    instead of making the logits again."""
    d = decoder.dictionary
    eos, pad = d.eos(), d.pad()
    scorer = UnionScorer(weight, bias, candidates)
    bsz = max_lens.size(0)
    steps = int(max_lens.max()) if bsz else 0
    tokens = max_lens.new_full((bsz, steps + 1), pad)
    tokens[:, 0] = eos  # fairseq's decoders start from eos
    positions = max_lens.new_full((bsz, steps), eos)
    mask = max_lens.new_zeros(bsz, steps, dtype=torch.bool)
    alive = max_lens > 0
    is_greedy = alive.clone()
    entropy = weight.new_zeros(bsz, dtype=torch.float)
    width = weight.size(0) if candidates is None else candidates.size(1)
    store_probs = keep_probs and not greedy and bsz * steps * width <= STORED_PROBS_MAX_ELEMENTS
    # pages of the buffer are touched only by the steps that run
    probs = weight.new_empty(bsz, steps, width, dtype=torch.float) if store_probs else None
    chosen = weight.new_zeros(bsz, steps, dtype=torch.float) if store_probs else None
    state: Dict[str, Dict[str, Optional[Tensor]]] = {}
    kept = keep_graph and torch.is_grad_enabled()
    static = None
    if STATIC_STATE:
        with torch.set_grad_enabled(kept):  # the encoder's keys and values: in the graph only if the steps are
            static = static_state(decoder, encoder_out, steps, keep_graph=keep_graph)
    states = []
    excluded = max_lens.new_tensor(_excluded(d))  # on the device once, not a list indexed every step
    # the kept graph's embedding lookups gather their weight gradient into one tensor (see the module)
    with gathered_embedding_grads(decoder) if kept else nullcontext():
        for t in range(steps):
            with torch.set_grad_enabled(kept):
                # a kept graph may hold the input ids (an embedding's backward does): not a view of ``tokens``,
                # which the next steps write into
                if static is not None:
                    s = static.step(tokens[:, t].clone() if keep_graph else tokens[:, t], t)
                else:
                    prefix = tokens[:, : t + 1]
                    s, _ = decoder.extract_features(prefix.clone() if keep_graph else prefix, encoder_out,
                                                    incremental_state=state)
                    s = s[:, -1]
            if keep_graph:
                states.append(s)
            with torch.no_grad():
                logits = scorer(s).float()
                logits.index_fill_(1, excluded, float("-inf"))
                if greedy:
                    choice = logits.argmax(-1)
                else:
                    # at temperature 1 the draw's own weights, normalized, are the model's distribution
                    reuse = store_probs and temperature == 1.0
                    drawn = sample_categorical(logits if temperature == 1.0 else logits / temperature,
                                               with_entropy=True, with_probs=reuse,
                                               probs_out=probs[:, t] if reuse else None)
                    choice, step_entropy = drawn[0].squeeze(1), drawn[1]
                    entropy += step_entropy.masked_fill(~alive, 0.0)
                    is_greedy &= choice.eq(logits.argmax(-1)) | ~alive
                    if store_probs:  # the model's own distribution (temperature 1), for the gradient
                        p = drawn[2] if reuse else logits.softmax(-1)
                        if not reuse:  # reused: already written in place
                            probs[:, t] = p
                        # a drawn word has weight > 0, so its log-probability is finite
                        chosen[:, t] = p.gather(1, choice.unsqueeze(1)).squeeze(1).log()
            ids = choice if candidates is None else candidates.gather(1, choice.unsqueeze(1)).squeeze(1)
            positions[:, t] = choice
            mask[:, t] = alive
            tokens[:, t + 1] = ids.masked_fill(~alive, pad)
            alive = alive & ids.ne(eos) & (max_lens > t + 1)
            if (t + 1) % STOP_CHECK_EVERY == 0 and not alive.any():
                break
    done = int(mask.any(0).sum())  # the steps with a live row: a prefix (rows that end stay ended)
    out = tokens[:, 1: done + 1]
    result = Samples(tokens=out, positions=positions[:, :done].masked_fill(~mask[:, :done], eos),
                     mask=mask[:, :done], lengths=(mask[:, :done] & out.ne(eos)).sum(1))
    if not greedy:
        result.is_greedy, result.entropy = is_greedy, entropy
    if keep_graph:
        result.features = torch.stack(states[:done], 1) if done else weight.new_zeros(bsz, 0, weight.size(1))
    if store_probs:
        result.probs, result.chosen_lprobs = probs[:, :done], chosen[:, :done]
    return result


def score(decoder, encoder_out, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
          samples: Samples) -> Samples:
    """Fills ``samples.lprobs`` (log p(y_t) under the restrictions of
    sampling, 0 after the end), differentiable, and sets ``features`` to the
    decoder states that scored each step, detached: from the states
    ``sample`` kept or from one teacher-forced pass over the samples."""
    mask, tokens = samples.mask, samples.tokens
    d = decoder.dictionary
    if samples.features is not None:
        s = samples.features
    elif tokens.size(1) == 0:
        s = weight.new_zeros(tokens.size(0), 0, weight.size(1))
    else:
        prev = torch.cat([tokens.new_full((tokens.size(0), 1), d.eos()), tokens[:, :-1]], dim=1)
        s, _ = decoder.extract_features(prev, encoder_out)
    lprobs = candidate_log_probs(s, weight, bias, candidates, samples.positions, _excluded(d),
                                 probs=samples.probs, chosen=samples.chosen_lprobs)
    samples.lprobs, samples.features = lprobs.masked_fill(~mask, 0.0), s.detach()
    return samples
