"""What REINFORCE asks of the engine (``SampleRequest``), apart from the engine's modules so that the
sampler and its device modes read it without importing each other."""

from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from fairseq_smallvocab.engine.settings import EngineSettings

DEFAULT = EngineSettings()


@dataclass(frozen=True)
class SampleRequest:
    """What REINFORCE asks of the restricted model's forward besides its
    teacher-forced pass (``models.restricted``): ``num_samples`` sequences per
    example, each at most ``max_lens[b]`` tokens (B), drawn at
    ``temperature``, and with ``greedy_too`` each example's greedy decode;
    ``first``: each example's forced first token (B, its index in the row's
    candidates, or its id for the full softmax; -1: drawn), as fairseq's
    multilingual decoding forces the target language token;
    ``settings``: how the step runs on the device (the criterion's);
    ``to_limit``: no step draws eos, so that every sequence (the greedy decode
    too) is exactly ``max_lens[b]`` tokens, and the log-probabilities are
    those of the policy drawn from (eos excluded): ``benchmark.py
    --sample-limit flat``, where steps compare per sampled token whatever the
    weights have learned of eos; training never asks for it; ``beam``: the
    ``num_samples`` sequences are instead the best of a beam search of that
    width (``models.generation.beam_candidates``: sequence-level risk's candidates), scored as
    samples are."""

    max_lens: Tensor
    num_samples: int = 1
    greedy_too: bool = False
    temperature: float = 1.0
    settings: EngineSettings = DEFAULT
    first: Optional[Tensor] = None
    to_limit: bool = False
    beam: bool = False
