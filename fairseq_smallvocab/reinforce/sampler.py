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
from fairseq_smallvocab.reinforce import capture
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
                       probs_out: Optional[Tensor] = None, uniform: Optional[Tensor] = None):
    """One draw per row from softmax(logits) (B x N -> B x 1), by inverse
    transform sampling: the index where a uniform draw, scaled to the row's
    total weight, falls in the cumulative weights.  The distribution of
    ``torch.multinomial(softmax(logits), 1)``, drawn faster on the CPU
    (measurements: docs/RESULTS.md, "The team's bar: a REINFORCE step on
    Multi30k with every target word (|V| = 18,726), K = 1000"); words with
    weight 0 (-inf logits) are never chosen.  ``uniform`` (B, in [0, 1)):
    the draws to use, drawn here when not given.  With ``with_entropy`` also
    the entropy of each row's distribution (B, nats), from the same weights:
    with z = logits - max, w = exp(z), Z = sum w, H = log Z - sum(w z) / Z.
    With ``with_probs`` (and ``with_entropy``) also softmax(logits) itself,
    w / Z, made in place of the weights (B x N), in ``probs_out`` when given
    (the sampler's kept buffer: no copy)."""
    shifted = logits - logits.max(-1, keepdim=True).values
    weights = torch.exp(shifted, out=probs_out) if probs_out is not None else torch.exp(shifted)
    cdf = weights.cumsum(-1)
    total = cdf[:, -1:]
    if uniform is None:
        uniform = torch.rand(logits.size(0), dtype=cdf.dtype, device=cdf.device)
    draw = uniform.view(-1, 1).to(cdf.dtype) * total
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


def _column(buffer: Tensor, t) -> Tensor:
    """buffer[:, t], for a Python int t or a 0-d device tensor (read on the device: no value baked in)."""
    return buffer[:, t] if not isinstance(t, Tensor) else buffer.index_select(1, t.view(1)).squeeze(1)


def _write(buffer: Tensor, t, value: Tensor):
    """buffer[:, t] = value, for a Python int t or a 0-d device tensor."""
    if isinstance(t, Tensor):
        buffer.index_copy_(1, t.view(1), value.unsqueeze(1))
    else:
        buffer[:, t] = value


class _IncrementalState:
    """fairseq's own incremental decoding, for decoders without a static state: step t feeds the prefix."""

    def __init__(self, decoder, encoder_out, tokens: Tensor, keep_graph: bool):
        self.decoder, self.encoder_out, self.tokens, self.keep_graph = decoder, encoder_out, tokens, keep_graph
        self.state: Dict[str, Dict[str, Optional[Tensor]]] = {}

    def step(self, _, t: int) -> Tensor:
        # a kept graph may hold the input ids (an embedding's backward does): not a view of ``tokens``, which
        # the next steps write into
        prefix = self.tokens[:, : t + 1]
        s, _ = self.decoder.extract_features(prefix.clone() if self.keep_graph else prefix, self.encoder_out,
                                             incremental_state=self.state)
        return s[:, -1]


class Loop:
    """The sampling loop's state for ``rows`` sequences of at most ``steps``
    tokens: what is drawn (tokens, positions, the steps that count), each
    row's alive flag, greedy flag and summed entropy, and with
    ``store_probs`` each step's softmax over the row's ``width`` words.
    ``step`` advances every row by one token; with t a 0-d device tensor it
    reads and writes only fixed addresses (a captured step, ``capture.py``,
    which makes one Loop per shape bucket and ``load``s each batch)."""

    def __init__(self, dictionary, rows: int, steps: int, width: int, device, greedy: bool, temperature: float,
                 store_probs: bool, small: bool, k: int = 0):
        self.eos, self.pad = dictionary.eos(), dictionary.pad()
        self.greedy, self.temperature, self.store_probs = greedy, temperature, store_probs
        long = dict(dtype=torch.long, device=device)
        self.tokens = torch.empty(rows, steps + 1, **long)
        self.positions = torch.empty(rows, steps, **long)
        self.mask = torch.empty(rows, steps, dtype=torch.bool, device=device)
        self.max_lens = torch.empty(rows, **long)
        self.alive = torch.empty(rows, dtype=torch.bool, device=device)
        self.is_greedy = torch.empty_like(self.alive)
        self.entropy = torch.empty(rows, dtype=torch.float, device=device)
        self.ids = torch.empty(rows, k, **long) if small else None  # each row's candidates
        self.uniforms = None if greedy else torch.empty(rows, steps, dtype=torch.float, device=device)
        # pages of the buffer are touched only by the steps that run
        self.probs = torch.empty(rows, steps, width, dtype=torch.float, device=device) if store_probs else None
        self.chosen = torch.zeros(rows, steps, dtype=torch.float, device=device) if store_probs else None
        self.excluded = torch.tensor(_excluded(dictionary), **long)  # on the device once, not a list per step

    def load(self, max_lens: Tensor, candidates: Optional[Tensor], uniforms: Optional[Tensor]):
        """A batch of ``max_lens.size(0)`` rows (at most ``rows``; the rest padded: length 0, never alive),
        with its candidates and its uniform draws (rows x steps)."""
        bsz = max_lens.size(0)
        self.tokens.fill_(self.pad)
        self.tokens[:, 0] = self.eos  # fairseq's decoders start from eos
        self.positions.fill_(self.eos)
        self.mask.zero_()
        self.max_lens.zero_()
        self.max_lens[:bsz] = max_lens
        torch.gt(self.max_lens, 0, out=self.alive)
        self.is_greedy.copy_(self.alive)
        self.entropy.zero_()
        if self.ids is not None:
            self.ids.zero_()
            self.ids[:bsz] = candidates
        if self.uniforms is not None:
            self.uniforms.fill_(0.5)
            self.uniforms[:bsz, : uniforms.size(1)] = uniforms

    def step(self, state, scorer, t, keep_graph: bool = False) -> Tensor:
        """Draw token t of every row (t: a Python int, or a 0-d device tensor); returns the decoder states
        that chose them (rows x d, with their graph under ``keep_graph``)."""
        tokens = _column(self.tokens, t)
        # a kept graph may hold the input ids (an embedding's backward does): not a view of ``tokens``
        s = state.step(tokens.clone() if keep_graph else tokens, t)
        alive = self.alive
        with torch.no_grad():
            logits = scorer(s).float()
            logits.index_fill_(1, self.excluded, float("-inf"))
            if self.greedy:
                choice = logits.argmax(-1)
            else:
                # at temperature 1 the draw's own weights, normalized, are the model's distribution
                reuse = self.store_probs and self.temperature == 1.0
                in_place = reuse and not isinstance(t, Tensor)  # written straight into the kept buffer
                drawn = sample_categorical(logits if self.temperature == 1.0 else logits / self.temperature,
                                           with_entropy=True, with_probs=reuse,
                                           probs_out=self.probs[:, t] if in_place else None,
                                           uniform=_column(self.uniforms, t))
                choice, step_entropy = drawn[0].squeeze(1), drawn[1]
                self.entropy += step_entropy.masked_fill(~alive, 0.0)
                self.is_greedy &= choice.eq(logits.argmax(-1)) | ~alive
                if self.store_probs:  # the model's own distribution (temperature 1), for the gradient
                    p = drawn[2] if reuse else logits.softmax(-1)
                    if not in_place:
                        _write(self.probs, t, p)
                    # a drawn word has weight > 0, so its log-probability is finite
                    _write(self.chosen, t, p.gather(1, choice.unsqueeze(1)).squeeze(1).log())
            ids = choice if self.ids is None else self.ids.gather(1, choice.unsqueeze(1)).squeeze(1)
            _write(self.positions, t, choice)
            _write(self.mask, t, alive)
            _write(self.tokens, t + 1, ids.masked_fill(~alive, self.pad))
            alive &= ids.ne(self.eos) & (self.max_lens > t + 1)  # in place: a captured step's fixed address
        return s

    def samples(self, bsz: int, states=None, copy: bool = False) -> Samples:
        """The first ``bsz`` rows' samples, trimmed to the steps with a live row (``copy``: not views of the
        loop's buffers, which the next batch overwrites)."""
        mask = self.mask[:bsz]
        done = int(mask.any(0).sum())  # the steps with a live row: a prefix (rows that end stay ended)
        mask = mask[:, :done]
        out = self.tokens[:bsz, 1: done + 1]
        take = (lambda x: x.clone()) if copy else (lambda x: x)
        result = Samples(tokens=take(out), positions=self.positions[:bsz, :done].masked_fill(~mask, self.eos),
                         mask=take(mask), lengths=(mask & out.ne(self.eos)).sum(1))
        if not self.greedy:
            result.is_greedy, result.entropy = take(self.is_greedy[:bsz]), take(self.entropy[:bsz])
        if states is not None:
            result.features = torch.stack(states[:done], 1) if done else None
        if self.store_probs:
            result.probs, result.chosen_lprobs = take(self.probs[:bsz, :done]), take(self.chosen[:bsz, :done])
        return result


def sample(decoder, encoder_out, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
           max_lens: Tensor, greedy: bool = False, keep_graph: bool = False,
           temperature: float = 1.0, keep_probs: bool = False) -> Samples:
    """A sequence per example from the decoder (multinomial from
    softmax(logits / temperature), or argmax with ``greedy``), as ``Samples``:
    unless ``greedy`` with ``is_greedy`` and ``entropy``; with ``keep_graph``
    with ``features``, the states that chose each token, with their graph;
    with ``keep_probs`` (not greedy, and at most ``STORED_PROBS_MAX_ELEMENTS``
    entries) with ``probs`` and ``chosen_lprobs``, which ``score`` then uses
    instead of making the logits again.  On CUDA, where ``capture`` applies,
    the steps replay a captured graph."""
    bsz = max_lens.size(0)
    steps = int(max_lens.max()) if bsz else 0
    # the uniform draws of every step at once: the same draws whatever the loop's shape (tested: a bucket's
    # padding changes no example's sample)
    uniforms = None if greedy else torch.rand(bsz, steps, device=max_lens.device)
    width = weight.size(0) if candidates is None else candidates.size(1)
    store_probs = keep_probs and not greedy and bsz * steps * width <= STORED_PROBS_MAX_ELEMENTS
    if not keep_graph and capture.applies(decoder, encoder_out, max_lens.device):
        return capture.sample(decoder, encoder_out, weight, bias, candidates, max_lens, uniforms, greedy,
                              temperature, store_probs)
    loop = Loop(decoder.dictionary, bsz, steps, width, max_lens.device, greedy, temperature, store_probs,
                small=candidates is not None, k=0 if candidates is None else candidates.size(1))
    loop.load(max_lens, candidates, uniforms)
    scorer = UnionScorer(weight, bias, candidates)
    kept = keep_graph and torch.is_grad_enabled()
    static = None
    if STATIC_STATE:
        with torch.set_grad_enabled(kept):  # the encoder's keys and values: in the graph only if the steps are
            static = static_state(decoder, encoder_out, steps, keep_graph=keep_graph)
    state = static if static is not None else _IncrementalState(decoder, encoder_out, loop.tokens, keep_graph)
    states = []
    # the kept graph's embedding lookups gather their weight gradient into one tensor (see the module)
    with gathered_embedding_grads(decoder) if kept else nullcontext():
        for t in range(steps):
            with torch.set_grad_enabled(kept):
                s = loop.step(state, scorer, t, keep_graph=keep_graph and static is not None)
            if keep_graph:
                states.append(s)
            if (t + 1) % STOP_CHECK_EVERY == 0 and not loop.alive.any():
                break
    result = loop.samples(bsz, states if keep_graph else None)
    if keep_graph and result.features is None:
        result.features = weight.new_zeros(bsz, 0, weight.size(1))
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
