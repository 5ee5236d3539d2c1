"""The eager plan (``EagerPlan``): how a step runs where no device mode is on (``engine.passes.plan`` makes
it): every teacher-forced pass the decoder's own call, the sampling loop step by step (``Loop``, in the
decoder's static state where its family has one, else fairseq's incremental state), and the restricted
model's forward as two passes (the CE term's, then the samples').  The device plan
(``device_modes.DevicePlan``) is this plan with the modes that apply; the call that uses either is
``sampling`` (``sample_and_score``: draw, then score).
"""

from contextlib import nullcontext
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_smallvocab.engine.families import DecoderFamily, follower, state_of
from fairseq_smallvocab.engine.loop import Loop, Samples
from fairseq_smallvocab.engine.settings import EngineSettings
from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads
from fairseq_smallvocab.output.restricted import restricted_logits
from fairseq_smallvocab.output.union_scorer import UnionScorer


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


class EagerPlan:
    """The eager plan (``passes.plan`` makes it where no device mode is on): every pass the decoder's own
    calls, the sampling loop step by step (``sample``), the CE term's and the samples' teacher-forced passes two
    passes.  ``settings``: the settings as they run (no "auto": ``passes``); ``given``: as the user gave them;
    ``notes``: {mode: why it is off}, for the log (``describe``); ``autocast``: whether it was made for steps
    under autocast; ``warnings``: what the log should warn of once (a CUDA-graph mode asked for where graphs
    cannot be captured).  The device plan (``device_modes.DevicePlan``) is this plan with the modes that apply."""

    name = "eager"

    def __init__(self, settings: EngineSettings, device, given: EngineSettings, notes: Dict[str, str],
                 autocast: bool, warnings: Sequence[str] = (), family: Optional[DecoderFamily] = None,
                 for_model: bool = True):
        self.settings, self.device, self.given, self.notes = settings, device, given, notes
        self.autocast, self.warnings = autocast, tuple(warnings)
        self.family, self.for_model = family, for_model

    def static_state(self, decoder, encoder_out, steps: int, keep_graph: bool = False, slots=None):
        """The batch's static decoding state, or None (fairseq's incremental state): the family the plan found
        to follow the model's decoder (``family``: None where none does, or ``static_state`` is off), where it
        takes this batch (``DecoderFamily.takes``).  A plan made for no model (``EAGER``) asks the decoder's."""
        family = self.family if self.for_model else follower(decoder)[0] if self.settings.static_state else None
        return state_of(family, decoder, encoder_out, steps, keep_graph, slots)

    def on_buckets(self, request) -> bool:
        """Whether ``sample`` runs the request's sampling loop on a shape bucket (and so keeps no step graph:
        a recurrent decoder's samples are then scored by a teacher-forced pass)."""
        return False

    def features(self, decoder, prev_output_tokens: Tensor, encoder_out):
        """``decoder.extract_features`` over ``prev_output_tokens``: (states, the decoder's extra output)."""
        return decoder.extract_features(prev_output_tokens, encoder_out)

    def sample(self, model, encoder_out, candidates: Optional[Tensor], request, greedy: bool,
               keep_graph: bool, keep_probs: bool) -> Samples:
        """``sample`` (the module's) in the eager loop."""
        drawn_with = draws(model, candidates, request, greedy, keep_probs)
        return _eager_loop(model, encoder_out, candidates, request, drawn_with, greedy, keep_graph)

    def forward(self, model, net_input: Dict, prev_output_tokens: Tensor, candidates: Optional[Tensor],
                request, features_only: bool):
        """The restricted model's forward: (the gold rows' logits inside ``candidates``, or with
        ``features_only`` their decoder states; the decoder's extra output; with a ``request`` the policy's
        ``greedy`` and scored ``samples``, ``model.sample_and_score``'s), in two passes: the teacher-forced
        one, then the samples'."""
        encoder_out = model.encoder(**net_input)
        features, extra = self.features(model.decoder, prev_output_tokens, encoder_out)
        weight, bias = model.output_weights()
        out = features if features_only else restricted_logits(features, weight, bias, candidates,
                                                               self.settings.union_max_ratio)
        drawn = {} if request is None else model.sample_and_score(net_input, candidates, request)
        return out, extra, drawn

    def describe(self) -> str:
        """What runs, as one line for the log: each device mode's value, and why one is off where it was asked
        for (or "auto" on a CUDA device); static_state=off where no static state follows the decoder, and why."""
        s = self.settings
        values = {"capture": s.capture, "graphed_pass": s.graphed_pass,
                  "merged_pass": "on" if s.merged_pass else "off", "compile": s.compile,
                  **({"static_state": "off"} if "static_state" in self.notes else {})}
        return ", ".join(f"{name}={value}" + (f" ({self.notes[name]})" if name in self.notes else "")
                         for name, value in values.items())


def draws(model, candidates: Optional[Tensor], request, greedy: bool, keep_probs: bool,
          loop_shape: Optional[Callable[[int, int], Tuple[int, int]]] = None):
    """What every sampling loop draws with: (the steps, the uniform draws of every step at once, whether the
    step probabilities are kept: asked for, and the loop's rows x steps x width at most the settings'
    ``stored_probs_max_elements``; the loop's rows and steps are the batch's, or ``loop_shape(rows, steps)``'s,
    a shape bucket's padded ones)."""
    max_lens, settings = request.max_lens, request.settings
    weight = model.output_weights()[0]
    bsz = max_lens.size(0)
    steps = int(max_lens.max()) if bsz else 0
    # the uniform draws of every step at once: the same draws whatever the loop's shape (tested: a bucket's
    # padding changes no example's sample)
    uniforms = None if greedy else torch.rand(bsz, steps, device=max_lens.device)
    width = weight.size(0) if candidates is None else candidates.size(1)
    # (the chunked full softmax keeps no B x T x |V| probabilities: its scoring makes them chunk by chunk)
    loop_rows, loop_steps = (bsz, steps) if loop_shape is None else loop_shape(bsz, steps)
    store_probs = keep_probs and not greedy and loop_rows * loop_steps * width <= settings.stored_probs_max_elements \
        and not (candidates is None and settings.full_softmax == "chunked")
    return steps, uniforms, store_probs


def _eager_loop(model, encoder_out, candidates: Optional[Tensor], request, drawn_with, greedy: bool,
                keep_graph: bool) -> Samples:
    """The sampling loop step by step (``Loop``), in the decoder's static state where its family has one."""
    decoder, (weight, bias) = model.decoder, model.output_weights()
    max_lens, settings, first = request.max_lens, request.settings, request.first
    steps, uniforms, store_probs = drawn_with
    bsz = max_lens.size(0)
    width = weight.size(0) if candidates is None else candidates.size(1)
    loop = Loop(decoder.dictionary, bsz, steps, width, max_lens.device, greedy, request.temperature, store_probs,
                k=0 if candidates is None else candidates.size(1), forced=first is not None,
                to_limit=request.to_limit)
    loop.load(max_lens, candidates, uniforms, first)
    scorer = UnionScorer(weight, bias, candidates, settings.transposed_min_rows)
    kept = keep_graph and torch.is_grad_enabled()
    with torch.set_grad_enabled(kept):  # the encoder's keys and values: in the graph only if the steps are
        static = request.plan.static_state(decoder, encoder_out, steps, keep_graph)
    state = static if static is not None else _IncrementalState(decoder, encoder_out, loop.tokens, keep_graph)
    states = []

    def step(t: int):
        with torch.set_grad_enabled(kept):
            s = loop.step(state, scorer, t, keep_graph=keep_graph and static is not None)
        if keep_graph:
            states.append(s)

    # the kept graph's embedding lookups gather their weight gradient into one tensor (see the module)
    with gathered_embedding_grads(decoder) if kept else nullcontext():
        loop.run(steps, settings.stop_check_every, step)
    result = loop.samples(bsz, states if keep_graph else None)
    if keep_graph and result.features is None:
        result.features = weight.new_zeros(bsz, 0, weight.size(1))
    return result


# the eager plan of the default settings, "auto" as off: a request's where its maker gives none
EAGER = EagerPlan(EngineSettings(capture="off", graphed_pass="off"), None, EngineSettings(), {}, False,
                  for_model=False)
