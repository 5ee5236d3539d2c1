"""The engine's call (``sample_and_score``): sampling from any restricted fairseq
encoder-decoder, and scoring the samples.

REINFORCE needs, per example b, a sequence y_b ~ p(. | x_b) drawn inside the
example's candidates c_b (or the whole vocabulary), and the differentiable
log-probabilities log p(y_bt | y_b<t, x_b) of the drawn tokens.  Both read the
same policy: the model in eval mode (every dropout and LayerDrop off), which
the caller arranges (``models.restricted``).

- ``sample``: step by step through the decoder's incremental state (for
  fairseq's Transformers and LSTMs and the plugin's, a state made once per
  batch by the decoder's family, ``families.static_state``), without
  gradient; each step scores the rows of the batch's candidate union with one
  product (``UnionScorer``) and draws from the softmax over the row's K words
  (pad and bos excluded), with uniforms drawn for every step at once.  All
  examples advance together (no loop over examples); example b stops at its
  eos or after ``max_lens[b]`` tokens.  ``Loop`` holds the loop's tensors and
  its step; the device modes' ``capture`` may run that step per shape bucket
  instead (``passes``).
- ``sample_and_score``: what REINFORCE asks of the model (``SampleRequest``): the
  greedy decode where asked, N samples per example drawn in one batched
  loop, and their scores; how each part runs is the request's
  ``EngineSettings``.
- ``score``: one teacher-forced pass over the samples with gradient, which
  gives log p(y_bt) for every step at once and the decoder states s_bt that a
  learned baseline reads.  Memory grows with T (one pass), not with T^2 as
  keeping every incremental step's graph would for a Transformer (whose step
  t attends over all t cached states).  A recurrent decoder's pass may
  run as the settings' passes say (``passes.Passes.features``).
- ``keep_probs=True``: the sampling loop, which makes each step's softmax
  anyway, keeps it (B x T x K) and the drawn words' log-probabilities;
  ``score`` then neither makes the B x T x K logits again nor differentiates
  through a softmax: the gradient of log p(y_t) with respect to the logits is
  onehot(y_t) - p_t, formed from the kept p_t (``CandidateLogProbs``).  The
  full softmax's REINFORCE step keeps its B x T x V probabilities this way
  and makes two B x T x V x d products instead of four (scoring's forward and
  the backward's recomputed logits are gone); above the settings'
  ``stored_probs_max_elements``, or with the settings' ``full_softmax``
  "chunked", the logits are made again instead.
- ``keep_graph=True`` (recurrent decoders): the sampling steps keep their
  graph and ``score`` reads the log-probabilities from the kept states, with
  no second pass through the decoder; an RNN step's graph does not grow with
  t.  Both ways give the same log-probabilities (tested).  The kept steps'
  embedding lookups give their weight one gradient, not one per step
  (``output/gathered_grad.py``).
"""

from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Dict, Optional

import torch
from torch import Tensor

from fairseq_smallvocab.engine import passes
from fairseq_smallvocab.engine.families import static_state
from fairseq_smallvocab.engine.loop import Loop, Samples, excluded_ids
from fairseq_smallvocab.engine.request import DEFAULT, SampleRequest
from fairseq_smallvocab.engine.settings import EngineSettings
from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads
from fairseq_smallvocab.output.restricted import candidate_log_probs
from fairseq_smallvocab.output.union_scorer import UnionScorer

__all__ = ["DEFAULT", "SampleRequest", "sample_and_score", "sample", "score", "draw", "captures"]


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


def captures(decoder, encoder_out, device, settings: EngineSettings = DEFAULT, first: Optional[Tensor] = None
             ) -> bool:
    """Whether ``sample`` runs the settings' passes' bucketed step (``passes.Passes.sample_on_bucket``; the
    device modes' capture, a CUDA graph on a GPU), which keeps no step graph: a recurrent decoder's samples
    are then scored by a teacher-forced pass.  Not with a forced first token (``first``): that runs the eager
    loop."""
    return first is None and settings.static_state and passes.of(settings).samples_on_buckets(
        decoder, encoder_out, device, settings)


def sample(model, encoder_out, candidates: Optional[Tensor], request: SampleRequest, *, greedy: bool = False,
           keep_graph: bool = False, keep_probs: bool = False) -> Samples:
    """A sequence per row of ``request.max_lens`` from the restricted ``model``'s decoder (multinomial from
    softmax(logits / ``request.temperature``), or argmax with ``greedy``), as ``Samples``: unless ``greedy``
    with ``is_greedy`` and ``entropy``; with ``keep_graph`` with ``features``, the states that chose each
    token, with their graph; with ``keep_probs`` (not greedy, and at most the settings'
    ``stored_probs_max_elements`` entries) with ``probs`` and ``chosen_lprobs``, which ``score`` then uses
    instead of making the logits again.  The request's ``first`` and ``to_limit`` apply (``SampleRequest``);
    its ``num_samples`` and ``greedy_too`` are ``draw``'s, which repeats the rows.  Where the settings'
    passes sample on buckets (``captures``), their loop runs instead."""
    decoder, (weight, bias) = model.decoder, model.output_weights()
    max_lens, settings, first = request.max_lens, request.settings, request.first
    bsz = max_lens.size(0)
    steps = int(max_lens.max()) if bsz else 0
    # the uniform draws of every step at once: the same draws whatever the loop's shape (tested: a bucket's
    # padding changes no example's sample)
    uniforms = None if greedy else torch.rand(bsz, steps, device=max_lens.device)
    width = weight.size(0) if candidates is None else candidates.size(1)
    # (the chunked full softmax keeps no B x T x |V| probabilities: its scoring makes them chunk by chunk)
    store_probs = keep_probs and not greedy and bsz * steps * width <= settings.stored_probs_max_elements \
        and not (candidates is None and settings.full_softmax == "chunked")
    if not keep_graph and captures(decoder, encoder_out, max_lens.device, settings, first):
        return passes.of(settings).sample_on_bucket(model, encoder_out, candidates, request, steps, uniforms,
                                                    greedy, store_probs)
    loop = Loop(decoder.dictionary, bsz, steps, width, max_lens.device, greedy, request.temperature, store_probs,
                k=0 if candidates is None else candidates.size(1), forced=first is not None,
                to_limit=request.to_limit)
    loop.load(max_lens, candidates, uniforms, first)
    scorer = UnionScorer(weight, bias, candidates, settings.transposed_min_rows)
    kept = keep_graph and torch.is_grad_enabled()
    static = None
    if settings.static_state:
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
            if (t + 1) % settings.stop_check_every == 0 and not loop.alive.any():
                break
    result = loop.samples(bsz, states if keep_graph else None)
    if keep_graph and result.features is None:
        result.features = weight.new_zeros(bsz, 0, weight.size(1))
    return result


def score(model, encoder_out, candidates: Optional[Tensor], samples: Samples, request: SampleRequest) -> Samples:
    """Fills ``samples.lprobs`` (log p(y_t) under the restrictions of sampling, the request's ``to_limit``
    included, 0 after the end), differentiable, and sets ``features`` to the decoder states that scored each
    step, detached: from the states ``sample`` kept or from one teacher-forced pass over the samples (run as
    the request's settings say)."""
    decoder, (weight, bias) = model.decoder, model.output_weights()
    mask, tokens = samples.mask, samples.tokens
    d = decoder.dictionary
    if samples.features is not None:
        s = samples.features
    elif tokens.size(1) == 0:
        s = weight.new_zeros(tokens.size(0), 0, weight.size(1))
    else:
        prev = torch.cat([tokens.new_full((tokens.size(0), 1), d.eos()), tokens[:, :-1]], dim=1)
        s, _ = passes.of(request.settings).features(decoder, prev, encoder_out, request.settings)
    lprobs = candidate_log_probs(s, weight, bias, candidates, samples.positions, excluded_ids(d, request.to_limit),
                                 probs=samples.probs, chosen=samples.chosen_lprobs)
    samples.lprobs, samples.features = lprobs.masked_fill(~mask, 0.0), s.detach()
    return samples


def sample_and_score(model, net_input: Dict, candidates: Optional[Tensor], request: SampleRequest,
                     keep_graph: bool) -> Dict[str, Samples]:
    """REINFORCE's policy, the engine's one call: with ``request.greedy_too``
    the greedy decode (``"greedy"``, B rows, no gradient), and ``"samples"``:
    N = ``request.num_samples`` samples per example from one encoder pass
    (repeated N times by the encoder's own ``reorder_encoder_out``, as beam
    search repeats it for its beams, so all B * N are drawn in one batched
    loop; example b's in rows b * N ... b * N + N - 1), scored with
    gradient.  ``keep_graph``: the decoder is recurrent and its sampling
    steps may keep their graph (unless the step is captured).  The caller
    puts the model in eval mode.  A device mode not yet tested on a GPU is refused on one
    (``EngineSettings.check_device``).  (A request for a beam's candidates, ``request.beam``, the restricted
    model answers with ``models.generation.beam_candidates`` and ``score``.)"""
    drawn = draw(model, model.encoder(**net_input), candidates, request, keep_graph)
    drawn.out["samples"] = score(model, drawn.encoder_out, drawn.candidates, drawn.samples, drawn.request)
    return drawn.out


@dataclass
class Drawn:
    """What ``draw`` gives: ``out`` (``"greedy"`` where asked), the unscored ``samples``, and the encoder
    output, candidates and request repeated to their rows (what ``score`` reads)."""

    out: Dict[str, Samples]
    samples: Samples
    encoder_out: object
    candidates: Optional[Tensor]
    request: SampleRequest


def draw(model, encoder_out, candidates: Optional[Tensor], request: SampleRequest, keep_graph: bool) -> Drawn:
    """``sample_and_score`` from the encoder's output (eval mode's) up to the samples drawn, unscored."""
    max_lens, n, settings, first = request.max_lens, request.num_samples, request.settings, request.first
    settings.check_device(max_lens.device)
    out = {}
    if request.greedy_too:
        with torch.no_grad():
            out["greedy"] = sample(model, encoder_out, candidates, request, greedy=True)
    if n > 1:
        order = torch.arange(max_lens.size(0), device=max_lens.device).repeat_interleave(n)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
        candidates = None if candidates is None else candidates.index_select(0, order)
        first = None if first is None else first.index_select(0, order)
        request = replace(request, max_lens=max_lens.index_select(0, order), first=first)
    # a captured sampling step keeps no graph: its samples are scored by a teacher-forced pass
    keep_graph = keep_graph and not captures(model.decoder, encoder_out, max_lens.device, settings, first)
    samples = sample(model, encoder_out, candidates, request, keep_graph=keep_graph,
                     keep_probs=torch.is_grad_enabled())
    return Drawn(out, samples, encoder_out, candidates, request)
