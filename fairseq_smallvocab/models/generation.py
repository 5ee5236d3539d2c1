"""Decoding inside each input's candidate vocabulary with fairseq's own
``SequenceGenerator`` (greedy, beam search, sampling), for any restricted
model (``models.restricted``).

A small-vocabulary model scores only the K candidates of each example, so the
generator works in *candidate space*: a hypothesis token is a position
0..K-1 in the example's candidate row.  Three small changes make fairseq's
generator do that:

- ``CandidateEnsembleModel.forward_encoder`` takes the batch's candidates out
  of ``net_input`` (stock encoders do not take them) and prepares, once per
  batch and model, the rows of the output layer for the batch's candidate
  union (``UnionScorer``) and a decoding-row -> sentence map, which
  ``reorder_encoder_out`` moves with the generator's ``new_order`` (beams,
  finished sentences dropped): the beam layout is never guessed;
- before each decoder call, the positions generated so far are looked up in
  the rows' candidates, so the decoder is fed target ids, and its states are
  scored inside each row's K candidates;
- finished hypotheses are mapped back to target-dictionary ids, so callers
  (fairseq-generate, ``--eval-bleu``, fairseq-interactive, scorers) see
  ordinary token ids.

Special symbols sit at their own ids in every candidate row (positions 0..3 =
bos, pad, eos, unk), so the generator's eos / pad / unk handling, min and max
length, unk penalty, length normalization and n-gram blocking (positions map
one-to-one to ids within an example) are unchanged.  Without candidates the
classes behave exactly like fairseq's, except that the generator refuses, when
it is built, what it could not do inside candidates (constraints, a prefix
function, a language model, suppressed tokens): the task builds it only for
a small vocabulary, and a refusal at start beats one at the first batch.
"""

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq import search
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
from torch import Tensor

from fairseq_smallvocab.candidates.space import candidate_positions
from fairseq_smallvocab.engine.loop import Samples
from fairseq_smallvocab.engine.request import SampleRequest
from fairseq_smallvocab.output.union_scorer import TRANSPOSED_MIN_ROWS, UnionScorer
from fairseq_smallvocab.output.weights import find_output_weights


def _output_weights(model):
    if hasattr(model, "output_weights"):  # restricted by a plugin task
        return model.output_weights()
    return find_output_weights(model.decoder, type(model).__name__).get(model.decoder)


def _transposed_min_rows(model) -> int:
    """The fewest decoding rows for which the union's scores are made transposed (the model's plan's)."""
    plan = getattr(model, "engine_plan", None)
    return TRANSPOSED_MIN_ROWS if plan is None else plan.settings.transposed_min_rows


class CandidateEnsembleModel(EnsembleModel):
    """fairseq's ``EnsembleModel`` that decodes inside each row's candidates
    when ``net_input`` has them."""

    def __init__(self, models):
        super().__init__(models)
        self._candidates: Optional[Tensor] = None
        self._scorers: List[UnionScorer] = []

    @torch.jit.unused
    def forward_encoder(self, net_input: Dict[str, Tensor]):
        candidates = net_input.get("candidates")
        self._candidates = candidates
        self._scorers = [] if candidates is None else [
            UnionScorer(*_output_weights(m), candidates, _transposed_min_rows(m)) for m in self.models]
        return super().forward_encoder({k: v for k, v in net_input.items() if k != "candidates"})

    @torch.jit.unused
    def reorder_encoder_out(self, encoder_outs, new_order):
        for scorer in self._scorers:
            scorer.reorder(new_order)
        return super().reorder_encoder_out(encoder_outs, new_order)

    @torch.jit.unused
    def forward_decoder(self, tokens, encoder_outs: List[Dict[str, List[Tensor]]],
                        incremental_states, temperature: float = 1.0):
        if self._candidates is None:
            return super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        rows = self._candidates.index_select(0, self._scorers[0].sent)
        ids = rows.gather(1, tokens)
        log_probs, avg_attn = [], None
        for i, model in enumerate(self.models):
            encoder_out = encoder_outs[i] if self.has_encoder() else None
            features, extra = model.decoder.extract_features(ids, encoder_out, incremental_state=incremental_states[i])
            attn = _last_attention(extra)
            logits = self._scorers[i](features[:, -1]).float().div_(temperature)
            probs = F.log_softmax(logits, dim=-1)
            if self.models_size == 1:
                return probs, attn
            log_probs.append(probs)
            if attn is not None:
                avg_attn = attn if avg_attn is None else avg_attn.add_(attn)
        avg_probs = torch.logsumexp(torch.stack(log_probs, dim=0), dim=0) - math.log(self.models_size)
        if avg_attn is not None:
            avg_attn.div_(self.models_size)
        return avg_probs, avg_attn


def _last_attention(extra) -> Optional[Tensor]:
    """The last step's attention from a decoder's extra output, as fairseq's EnsembleModel reads it."""
    attn = None
    if isinstance(extra, Tensor):
        attn = extra
    elif isinstance(extra, dict):
        holder = extra.get("attn")
        attn = holder if isinstance(holder, Tensor) else (holder[0] if holder else None)
    return None if attn is None else attn[:, -1, :]


MIN_TEMPERATURE = 1e-3  # decoding's --temperature: logits x 1000 stay far inside float32


def check_decoding_args(args):
    """Refuse decoding flags that cannot work (fairseq would fail later, or decode nothing)."""
    if getattr(args, "max_len_a", 0) <= 0 and getattr(args, "max_len_b", 200) < 1:
        raise ValueError(f"--max-len-a {getattr(args, 'max_len_a', 0)} with --max-len-b "
                         f"{getattr(args, 'max_len_b', 200)} leaves no room for a single output token: pass "
                         "--max-len-b N (the longest output, e.g. 200), or --max-len-a R for R x the source "
                         "length + --max-len-b")
    beam, temperature = getattr(args, "beam", 5), getattr(args, "temperature", 1.0)
    if beam < 1:
        raise ValueError(f"--beam must be >= 1 (hypotheses kept per input; 1: greedy), got {beam}")
    if not MIN_TEMPERATURE <= temperature < math.inf:
        raise ValueError(f"--temperature must be a finite number >= {MIN_TEMPERATURE:g}, got {temperature:g}: "
                         "the logits are divided by it, and below that they can overflow (every score nan); "
                         "for the most likely words decode with --beam 1 and without --sampling")


def refuse_outside_candidates(args):
    """Refuse the flags that decode outside the candidates (fairseq would build another generator)."""
    # these two would make fairseq build another class than ours; the generator refuses the rest
    unsupported = [flag for flag, used in [
        ("--score-reference", getattr(args, "score_reference", False)),
        ("--print-alignment", getattr(args, "print_alignment", False)),
    ] if used]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)} not supported inside a small vocabulary; "
                         "use --small-vocab-size 0 (full softmax)")


def _unsupported(what: str) -> ValueError:
    return ValueError(f"decoding inside a small vocabulary does not support {what}; decode with the full softmax "
                      "(--small-vocab-size 0)")


class SmallVocabSequenceGenerator(SequenceGenerator):
    """``SequenceGenerator`` that decodes inside ``net_input["candidates"]``
    (B x K target ids per example) when the batch has them, and returns
    target-dictionary ids either way."""

    def __init__(self, models, tgt_dict, **kwargs):
        if not isinstance(models, EnsembleModel):
            models = CandidateEnsembleModel(models)
        super().__init__(models, tgt_dict, **kwargs)
        # the one refusal of what the generator's parts would do over the full vocabulary: fairseq turns
        # --constraints and a prefix function into a search strategy, --lm-path into a second model
        unsupported = [name for name, used in [
            ("--constraints", isinstance(self.search, search.LexicallyConstrainedBeamSearch)),
            ("prefix_allowed_tokens_fn", isinstance(self.search, search.PrefixConstrainedBeamSearch)),
            ("a language model (--lm-path)", self.lm_model is not None),
            ("--tokens-to-suppress", getattr(self, "token_indices_to_suppress", None) is not None),
        ] if used]
        if unsupported:
            raise _unsupported(", ".join(unsupported))

    def _generate(self, sample, prefix_tokens: Optional[Tensor] = None, constraints: Optional[Tensor] = None,
                  bos_token: Optional[int] = None):
        candidates = sample["net_input"].get("candidates")
        if candidates is None:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        if bos_token is not None and bos_token >= self.tgt_dict.nspecial:  # a word: not at its id in every row
            raise _unsupported(f"a non-special bos token ({bos_token})")
        topk = getattr(self.search, "sampling_topk", -1)
        if topk > candidates.size(1):
            raise ValueError(f"--sampling-topk {topk} is larger than the small vocabulary of each input (K = "
                             f"{candidates.size(1)}, --small-vocab-size): pass --sampling-topk {candidates.size(1)} "
                             "or less, or decode with the full softmax (--small-vocab-size 0)")
        if self.beam_size >= candidates.size(1):  # over the full vocabulary fairseq caps it at |V| - 1 (pad)
            raise ValueError(f"--beam {self.beam_size} is not below the small vocabulary of each input (K = "
                             f"{candidates.size(1)}, --small-vocab-size), and a beam keeps at most K - 1 "
                             f"hypotheses (pad is never chosen): pass --beam {candidates.size(1) - 1} or less, or "
                             "raise --small-vocab-size")
        if prefix_tokens is not None:
            prefix_tokens = self._prefix_positions(candidates, prefix_tokens)
        vocab_size, self.vocab_size = self.vocab_size, candidates.size(1)  # the search's view of lprobs
        try:
            finalized = super()._generate(sample, prefix_tokens, constraints, bos_token)
        finally:
            self.vocab_size = vocab_size
        for row, hypos in zip(candidates, finalized):
            for hypo in hypos:
                hypo["tokens"] = row[hypo["tokens"]]
        return finalized

    def _prefix_positions(self, candidates: Tensor, prefix_tokens: Tensor) -> Tensor:
        positions = candidate_positions(candidates, prefix_tokens, self.unk)
        outside = candidates.gather(1, positions).ne(prefix_tokens)
        if outside.any():
            row, col = (int(i) for i in outside.nonzero()[0])
            word = self.tgt_dict[int(prefix_tokens[row, col])]
            raise ValueError(f"prefix token '{word}' (example {row} of the batch, position {col}) is not among "
                             "the example's candidates; raise --small-vocab-size or decode with the full softmax")
        return positions


def beam_too_wide(n: int, width: int, small: bool) -> str:
    """The refusal of --risk-candidates beam's width ``n`` (--rl-samples) at or above ``width`` (K, or |V| for
    the full softmax, ``small`` False): a beam keeps at most ``width`` - 1 hypotheses, pad never chosen."""
    vocabulary = (f"the small vocabulary of each input (K = {width}, --small-vocab-size)" if small
                  else f"the target vocabulary (|V| = {width} entries)")
    return (f"--rl-samples {n} (--risk-candidates beam's width) is not below {vocabulary}, and a beam keeps at "
            f"most {width - 1} hypotheses (pad is never chosen): pass --rl-samples {width - 1} or less"
            + (", or raise --small-vocab-size" if small else ""))


@dataclass(frozen=True)
class BeamRequest(SampleRequest):
    """Sequence-level risk's request (``--risk-candidates beam``): the ``num_samples`` sequences of each example
    are the best of a beam search of that width (``beam_candidates``), scored as samples are."""


def beam_candidates(model, net_input, rows: Optional[Tensor], request: SampleRequest):
    """Sequence-level risk's candidates by beam search (``BeamRequest``): each example's N best
    hypotheses of a beam of width N inside its candidates, as Edunov et al. 2018 generate theirs, without
    gradient, as ``Samples`` (B * N rows, example b's in rows b * N ... b * N + N - 1, best first), with the
    encoder output, candidates and request repeated to those rows: (samples, encoder output, candidates,
    request), for ``engine.sampling.score``.  ``rows``: the B x K candidates, or None for the full softmax.
    The hypotheses are limited by the batch's longest limit (``request.max_lens.max()`` tokens, eos included:
    the generator has one limit per batch), hold a word before eos (its ``min_len``), and are distinct; a
    forced first token (a multilingual task's language token) is not supported.  The model is in eval mode
    (the caller's)."""
    if request.first is not None:
        raise ValueError("candidates by beam search (--risk-candidates beam) cannot force a first token (a "
                         "multilingual task's language token): use --risk-candidates sample")
    n, d = request.num_samples, model.decoder.dictionary
    width = rows.size(1) if rows is not None else len(d)
    if n >= width:  # (the generator's own refusal names --beam; fairseq caps a full softmax's beam at |V| - 1)
        raise ValueError(beam_too_wide(n, width, rows is not None))
    limit = int(request.max_lens.max())
    generator = SmallVocabSequenceGenerator([model], d, beam_size=n, max_len_a=0, max_len_b=max(limit - 1, 1))
    given = dict(net_input) if rows is None else {**net_input, "candidates": rows}
    with torch.no_grad():
        hypotheses = generator.generate([model], {"net_input": given})
    if hasattr(model.decoder, "set_beam_size"):  # what the search left in the decoder's attention
        model.decoder.set_beam_size(1)
    found = [h["tokens"] for per_example in hypotheses for h in per_example[:n]]
    order = torch.arange(len(hypotheses), device=request.max_lens.device).repeat_interleave(n)
    steps = max(len(t) for t in found)
    tokens = request.max_lens.new_full((len(found), steps), d.pad())
    for row, t in enumerate(found):
        tokens[row, : len(t)] = t
    mask = tokens.ne(d.pad())
    repeated = None if rows is None else rows.index_select(0, order)
    positions = tokens if repeated is None else candidate_positions(repeated, tokens, d.unk())
    samples = Samples(tokens=tokens, positions=positions.masked_fill(~mask, d.eos()), mask=mask,
                      lengths=mask.sum(1) - 1)
    encoder_out = model.encoder.reorder_encoder_out(model.encoder(**net_input), order)
    return samples, encoder_out, repeated, replace(request, max_lens=request.max_lens.index_select(0, order))
