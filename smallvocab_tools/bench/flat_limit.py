"""The benchmark's REINFORCE criterion under ``--sample-limit flat``: every
sample exactly --max-sample-len tokens.

The flat limit is where the steps of two implementations, or of two versions
of this one, compare per sampled token.  An untrained model's samples reach
it only as long as the model has not learned to end them, and the timed
steps train it (SGD at learning rate 1.0): how soon the samples end then
depends on what those updates teach the model about eos.  The learned
baseline's start alone changes it: started at the first batch's mean reward
(not at 0.5), its advantages are small, the REINFORCE term's gradient with
them, and the CE term (the gold targets, each ending at its eos) takes a
real share of the clipped update; on synthetic batches of 32 sentences of
14 tokens (|V| 20,000, K 1000, the paper's LSTM) the mean sample of a limit
of 99 falls from 95.7 tokens to 63.9 over six steps (and stays at 96-99
without the CE term).  So under the flat limit the criterion asks the
engine for samples to the limit (``SampleRequest.to_limit``: no step draws
eos, in the samples and in the greedy decode), whatever the weights;
training's criterion never does.  Imported by the workers only (it imports
torch and fairseq)."""

import dataclasses

from fairseq.dataclass.utils import merge_with_parent
from omegaconf import DictConfig

from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceConfig, SmallVocabReinforceCriterion


class SamplesToTheLimit(SmallVocabReinforceCriterion):
    """``smallvocab_reinforce`` whose sample requests run every sample to its limit (eos never drawn)."""

    def sample_request(self, model, sample, plan):
        return dataclasses.replace(super().sample_request(model, sample, plan), to_limit=True)


def to_the_limit(task, config) -> SamplesToTheLimit:
    """``SamplesToTheLimit`` for ``config``: a ``SmallVocabReinforceConfig``, or the criterion's part of fairseq's
    config (merged with the criterion's defaults, as ``task.build_criterion`` merges it)."""
    if isinstance(config, DictConfig):
        config = merge_with_parent(SmallVocabReinforceConfig(), config)
    return SamplesToTheLimit(task, config)
