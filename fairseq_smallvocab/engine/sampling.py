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
  its step.  This module is the eager plan (``EagerPlan``): the device plan
  (``device_modes.DevicePlan``, where ``passes.plan`` turns a mode on) may run that step per shape bucket
  instead, or the teacher-forced passes on its own programs.
- ``sample_and_score``: what REINFORCE asks of the model (``SampleRequest``): the
  greedy decode where asked, N samples per example drawn in one batched
  loop, and their scores; how each part runs is the request's plan.
- ``score``: one teacher-forced pass over the samples with gradient, which
  gives log p(y_bt) for every step at once and the decoder states s_bt that a
  learned baseline reads.  Memory grows with T (one pass), not with T^2 as
  keeping every incremental step's graph would for a Transformer (whose step
  t attends over all t cached states).  The pass is the request's plan's
  (``EagerPlan.features``: the decoder's own).
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

from dataclasses import dataclass, replace
from typing import Dict, Optional

import torch
from torch import Tensor

from fairseq_smallvocab.engine.loop import Samples, excluded_ids
from fairseq_smallvocab.engine.request import SampleRequest
from fairseq_smallvocab.engine.settings import DEFAULT
from fairseq_smallvocab.output.restricted import candidate_log_probs

__all__ = ["DEFAULT", "SampleRequest", "sample_and_score", "sample", "score", "draw"]


def sample(model, encoder_out, candidates: Optional[Tensor], request: SampleRequest, *, greedy: bool = False,
           keep_graph: bool = False, keep_probs: bool = False) -> Samples:
    """A sequence per row of ``request.max_lens`` from the restricted ``model``'s decoder (multinomial from
    softmax(logits / ``request.temperature``), or argmax with ``greedy``), as ``Samples``: unless ``greedy``
    with ``is_greedy`` and ``entropy``; with ``keep_graph`` with ``features``, the states that chose each
    token, with their graph; with ``keep_probs`` (not greedy, and at most the settings'
    ``stored_probs_max_elements`` entries) with ``probs`` and ``chosen_lprobs``, which ``score`` then uses
    instead of making the logits again.  The request's ``first`` and ``to_limit`` apply (``SampleRequest``);
    its ``num_samples`` and ``greedy_too`` are ``draw``'s, which repeats the rows.  The request's plan runs
    the loop (the eager one, or the device plan's on a shape bucket)."""
    return request.plan.sample(model, encoder_out, candidates, request, greedy, keep_graph, keep_probs)


def score(model, encoder_out, candidates: Optional[Tensor], samples: Samples, request: SampleRequest) -> Samples:
    """Fills ``samples.lprobs`` (log p(y_t) under the restrictions of sampling, the request's ``to_limit``
    included, 0 after the end), differentiable, and sets ``features`` to the decoder states that scored each
    step, detached: from the states ``sample`` kept or from one teacher-forced pass over the samples (the
    request's plan's)."""
    decoder, (weight, bias) = model.decoder, model.output_weights()
    mask, tokens = samples.mask, samples.tokens
    d = decoder.dictionary
    if samples.features is not None:
        s = samples.features
    elif tokens.size(1) == 0:
        s = weight.new_zeros(tokens.size(0), 0, weight.size(1))
    else:
        prev = torch.cat([tokens.new_full((tokens.size(0), 1), d.eos()), tokens[:, :-1]], dim=1)
        s, _ = request.plan.features(decoder, prev, encoder_out)
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
    steps may keep their graph (unless the plan samples on shape buckets).  The caller
    puts the model in eval mode.  (A request for a beam's candidates, ``models.generation.BeamRequest``,
    the restricted model answers with ``models.generation.beam_candidates`` and ``score``.)"""
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
    max_lens, n, first = request.max_lens, request.num_samples, request.first
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
    # a sampling step on a shape bucket keeps no graph: its samples are scored by a teacher-forced pass
    keep_graph = keep_graph and not request.plan.on_buckets(request)
    samples = sample(model, encoder_out, candidates, request, keep_graph=keep_graph,
                     keep_probs=torch.is_grad_enabled())
    return Drawn(out, samples, encoder_out, candidates, request)
