"""Any fairseq encoder-decoder, restricted to each example's candidates.

``restrict(model, arch)`` is what the plugin's tasks do to the model fairseq
builds (``transformer``, fairseq's ``lstm``, the plugin's LSTMs, ...): it
finds the decoder's linear output layer (``output.weights``), and
gives the model instance the ``RestrictedModel`` behaviour below by making it
an instance of a subclass of its own class (``RestrictedTransformerModel`` for
a ``TransformerModel``).  No parameter, buffer or
submodule is added, so the state-dict keys stay the stock ones (a checkpoint
of the stock ``translation`` task loads strictly, and a checkpoint written
with the plugin decodes with stock fairseq) and the arch name in checkpoints
is unchanged.

The model then takes ``candidates`` (B x K target ids, ``candidates.space``)
beside its usual ``net_input``: they travel beside ``encoder_out``, not
inside it, so stock encoders need no change.  Its forward is the stock one
split in two, encoder -> ``decoder.extract_features`` (the states s_t) ->
the restricted output layer (B x T x K logits), and ``get_targets`` maps gold
ids to candidate positions, so fairseq's ``cross_entropy`` and
``label_smoothed_cross_entropy`` work unchanged (label smoothing then spreads
its mass over the K candidates, not over V).  ``candidates=None`` is the full
softmax through the same code.

With a ``sample_request`` (``engine.sampling.SampleRequest``) the same
forward also samples N sequences per example for REINFORCE and scores them
(``sample_and_score``), with the whole model in eval mode (every dropout and
LayerDrop off; each module's flag restored afterwards): one forward, so that
REINFORCE works through fairseq's distributed wrappers.  How it samples is the
engine's (``engine.sampling.sample_and_score``), and each pass runs as the
model's plan says (``engine.passes``: the decoder's own calls unless a
device mode is on).
"""

import inspect
from contextlib import nullcontext
from typing import Dict, Optional

import torch
from fairseq.models import FairseqEncoderDecoderModel
from torch import Tensor

from fairseq_smallvocab.candidates.space import candidate_positions
from fairseq_smallvocab.engine import passes, sampling
from fairseq_smallvocab.engine.eager import EagerPlan
from fairseq_smallvocab.engine.families import is_recurrent
from fairseq_smallvocab.engine.sampling import SampleRequest, Samples
from fairseq_smallvocab.engine.settings import DEFAULT, EngineSettings
from fairseq_smallvocab.models.generation import BeamRequest, beam_candidates
from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads
from fairseq_smallvocab.output.weights import OutputWeights, RestrictionError, eval_mode, find_output_weights


def _extra_dict(extra) -> Dict:
    """A decoder's second output as a dict (fairseq's ``lstm`` returns the attention tensor)."""
    if isinstance(extra, dict):
        return dict(extra)
    return {"attn": [extra]}


class RestrictedModel:
    """The behaviour ``restrict`` gives a model (listed first in its class's bases)."""

    _output_weights: OutputWeights
    sample_keeps_graph: bool
    # how the model's passes run on its device (``plan_on``: made from the criterion's settings
    # at its first batch, else from the defaults at the first forward), REINFORCE's request's too: the
    # output layer's union_max_ratio, a recurrent decoder's graphed pass, the generator's transposed_min_rows
    engine_plan: Optional[EagerPlan] = None

    def output_weights(self):
        """(W, b) of the decoder's output layer (b may be None)."""
        return self._output_weights.get(self.decoder)

    def _net_input(self, args, kwargs) -> Dict:
        names = _positional_names(type(self))
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}.forward takes {len(names)} positional inputs ({names})")
        return {**dict(zip(names, args)), **kwargs}

    def forward(self, *args, candidates: Optional[Tensor] = None, sample_request: Optional[SampleRequest] = None,
                features_only: bool = False, **kwargs):
        """Teacher-forced decoder output (B x T x K logits inside ``candidates``,
        B x T x V without) and its extra dict, with ``"candidates"``; with a
        ``sample_request`` (REINFORCE's) also ``"samples"`` (``Samples`` of
        ``sample_and_score``: B * N rows, example b's N
        samples in rows b * N ... b * N + N - 1) and, with its
        ``greedy_too``, ``"greedy"`` (B greedy decodes, without gradient)."""
        net_input = self._net_input(args, kwargs)
        prev_output_tokens = net_input.pop("prev_output_tokens")
        if hasattr(self.decoder, "set_beam_size"):  # a generator may have left beam_size > 1 in attention
            self.decoder.set_beam_size(1)
        # REINFORCE uses the embeddings and the output layer several times (the CE pass and the policy): their
        # weight gradients are gathered into one tensor per weight (see output/gathered_grad.py)
        request = sample_request
        gathered = request is not None and torch.is_grad_enabled()
        # how the passes run: the REINFORCE request's plan (the model's, which the criterion asked for), else the
        # model's own on this device (engine/passes.py)
        plan = request.plan if request is not None else self.plan_on(prev_output_tokens.device)
        with gathered_embedding_grads(self) if gathered else nullcontext():
            out, extra, drawn = plan.forward(self, net_input, prev_output_tokens, candidates, request, features_only)
        extra = _extra_dict(extra)
        extra["candidates"] = [] if candidates is None else [candidates]
        extra.update(drawn)
        return out, extra

    def plan_on(self, device, settings: Optional[EngineSettings] = None) -> EagerPlan:
        """The plan the model's passes run on ``device`` with ``settings`` (None: those it was last planned
        with, else the defaults): its own (``engine_plan``) where that was made for them, the device and the
        autocast now on, else a new one (``engine.passes.plan``), which it keeps."""
        device = torch.device(device)
        current = self.engine_plan
        if settings is None:
            settings = DEFAULT if current is None else current.given
        autocast = device.type == "cuda" and torch.is_autocast_enabled("cuda")
        if current is None or current.given != settings or current.device != device or current.autocast != autocast:
            self.engine_plan = passes.plan(settings, device, self, autocast)
        return self.engine_plan

    def sample_and_score(self, net_input, candidates, request: SampleRequest) -> Dict[str, Samples]:
        """REINFORCE's samples and greedy decode, drawn and scored (``engine.sampling.sample_and_score``),
        with the whole model in eval mode; for a request of a beam's candidates (``BeamRequest``), those
        (``models.generation.beam_candidates``), scored by the engine's ``score``."""
        with eval_mode(self):
            if isinstance(request, BeamRequest):  # a beam's N best, scored as samples are
                samples, encoder_out, rows, request = beam_candidates(self, net_input, candidates, request)
                return {"samples": sampling.score(self, encoder_out, rows, samples, request)}
            return sampling.sample_and_score(self, net_input, candidates, request, keep_graph=self.sample_keeps_graph)

    def get_targets(self, sample, net_output):
        """Gold ids as positions in the example's candidates (unchanged for the
        full softmax).  A gold word outside the candidates (possible on
        validation, never in training, whose candidates include the gold
        words) maps to the position of <unk>."""
        target = sample["target"]
        extra = net_output[1] if len(net_output) > 1 else None
        candidates = extra.get("candidates") if isinstance(extra, dict) else None
        if not candidates:
            return target
        return candidate_positions(candidates[0], target, self.decoder.dictionary.unk())


_POSITIONAL = {}
_RESTRICTED = {}


def _positional_names(cls):
    """The stock forward's positional inputs (e.g. src_tokens, src_lengths, prev_output_tokens)."""
    if cls not in _POSITIONAL:
        stock = next(c for c in cls.__mro__[1:] if "forward" in c.__dict__ and c is not RestrictedModel)
        params = list(inspect.signature(stock.forward).parameters.values())[1:]
        _POSITIONAL[cls] = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    return _POSITIONAL[cls]


def _restricted_class(cls):
    """``Restricted<Stock>``: one subclass per stock class, named as what it is (logs and errors say a
    restricted model is restricted); ``isinstance`` of the stock class still holds."""
    if cls not in _RESTRICTED:
        name = f"Restricted{cls.__name__}"
        _RESTRICTED[cls] = type(name, (RestrictedModel, cls), {
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"fairseq's {cls.__qualname__}, restricted to each example's candidates (``restrict``)."})
    return _RESTRICTED[cls]


def restricted_module(model) -> Optional[RestrictedModel]:
    """The model the plugin's tasks restricted inside ``model`` (itself, or the module of fairseq's distributed
    wrappers around it), or None: a model no plugin task restricted."""
    while not isinstance(model, RestrictedModel):
        model = getattr(model, "module", None)
        if model is None:
            return None
    return model


def restrict(model, arch: Optional[str] = None):
    """Give ``model`` (in place) the ``RestrictedModel`` behaviour; returns it.
    Refuses, naming the arch and the reason, a model that cannot be restricted."""
    if isinstance(model, RestrictedModel):
        return model
    arch = arch or type(model).__name__
    if not isinstance(model, FairseqEncoderDecoderModel):
        raise RestrictionError(f"arch '{arch}' ({type(model).__name__}) is not a fairseq encoder-decoder model "
                               "(FairseqEncoderDecoderModel): a small vocabulary restricts the output of an "
                               "encoder-decoder's decoder")
    spec = find_output_weights(model.decoder, arch)
    model.__class__ = _restricted_class(type(model))
    model._output_weights = spec
    model.sample_keeps_graph = bool(is_recurrent(model.decoder))
    model.engine_plan = None
    return model
