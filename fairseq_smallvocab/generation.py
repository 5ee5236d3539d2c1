"""Decoding inside each input's candidate vocabulary with fairseq's own
``SequenceGenerator`` (greedy, beam search, sampling).

A small-vocabulary model scores only the K candidates of each example, so the
generator works in *candidate space*: a hypothesis token is a position
0..K-1 in the example's candidate row.  Two small changes make fairseq's
generator do that:

- the decoder is fed target ids: before each decoder call, the positions
  generated so far are looked up in the (beam-reordered) candidate rows that
  travel in ``encoder_out["candidates"]``;
- finished hypotheses are mapped back to target-dictionary ids, so callers
  (fairseq-generate, ``--eval-bleu``, fairseq-interactive, scorers) see
  ordinary token ids.

Special symbols sit at their own ids in every candidate row (positions 0..3 =
bos, pad, eos, unk), so the generator's eos / pad / unk handling, min and max
length, unk penalty, length normalization and n-gram blocking (positions map
one-to-one to ids within an example) are unchanged.  Without candidates the
classes behave exactly like fairseq's.
"""

from typing import Dict, List, Optional

from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
from torch import Tensor


def _candidates(encoder_out) -> Optional[Tensor]:
    if encoder_out is None:
        return None
    found = encoder_out.get("candidates") if isinstance(encoder_out, dict) else None
    return found[0] if found else None


class CandidateEnsembleModel(EnsembleModel):
    """fairseq's ``EnsembleModel`` whose decoder input is given as candidate
    positions and translated to target ids before the decoder sees it."""

    def forward_decoder(self, tokens, encoder_outs: List[Dict[str, List[Tensor]]],
                        incremental_states, temperature: float = 1.0):
        candidates = _candidates(encoder_outs[0]) if encoder_outs else None
        if candidates is not None:
            tokens = candidates.gather(1, tokens)
        return super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)


class SmallVocabSequenceGenerator(SequenceGenerator):
    """``SequenceGenerator`` that decodes inside ``net_input["candidates"]``
    (B x K target ids per example) when the batch has them, and returns
    target-dictionary ids either way."""

    def __init__(self, models, tgt_dict, **kwargs):
        if not isinstance(models, EnsembleModel):
            models = CandidateEnsembleModel(models)
        super().__init__(models, tgt_dict, **kwargs)

    def _generate(self, sample, prefix_tokens: Optional[Tensor] = None, constraints: Optional[Tensor] = None,
                  bos_token: Optional[int] = None):
        candidates = sample["net_input"].get("candidates")
        if candidates is None:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        nspecial = self.tgt_dict.nspecial
        unsupported = [name for name, used in [
            ("lexical constraints", constraints is not None),
            ("a language model (--lm-path)", self.lm_model is not None),
            ("--tokens-to-suppress", self.token_indices_to_suppress is not None),
            (f"a non-special bos token ({bos_token})", bos_token is not None and bos_token >= nspecial),
        ] if used]
        if unsupported:
            raise ValueError(f"decoding inside a small vocabulary does not support {', '.join(unsupported)}; "
                             "decode with the full softmax (--small-vocab-size 0)")
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
        from fairseq_smallvocab.models.lstm_smallvocab import candidate_positions

        positions = candidate_positions(candidates, prefix_tokens, self.unk)
        outside = candidates.gather(1, positions).ne(prefix_tokens)
        if outside.any():
            row, col = (int(i) for i in outside.nonzero()[0])
            word = self.tgt_dict[int(prefix_tokens[row, col])]
            raise ValueError(f"prefix token '{word}' (example {row} of the batch, position {col}) is not among "
                             "the example's candidates; raise --small-vocab-size or decode with the full softmax")
        return positions

