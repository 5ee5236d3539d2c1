"""What REINFORCE asks of the engine, per batch (``SampleRequest``), apart from the engine's modules so that
the sampler and its device modes read it without importing each other: how long each sample may grow
(``sample_limits``), and whether the batch's samples fit in memory before any is drawn (``check_memory``)."""

import os
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from fairseq_smallvocab.engine.eager import EAGER, EagerPlan
from fairseq_smallvocab.engine.settings import EngineSettings


@dataclass(frozen=True)
class SampleRequest:
    """What REINFORCE asks of the restricted model's forward besides its
    teacher-forced pass (``models.restricted``): ``num_samples`` sequences per
    example, each at most ``max_lens[b]`` tokens (B), drawn at
    ``temperature``, and with ``greedy_too`` each example's greedy decode;
    ``first``: each example's forced first token (B, its index in the row's
    candidates, or its id for the full softmax; -1: drawn), as fairseq's
    multilingual decoding forces the target language token;
    ``plan``: how the step runs on the device (``engine.passes.plan``; the criterion's is its model's),
    whose resolved ``settings`` the passes read;
    ``to_limit``: no step draws eos, so that every sequence (the greedy decode
    too) is exactly ``max_lens[b]`` tokens, and the log-probabilities are
    those of the policy drawn from (eos excluded): ``benchmark.py
    --sample-limit flat``, where steps compare per sampled token whatever the
    weights have learned of eos; training never asks for it.  (Sequence-level
    risk's request for a beam's best instead, ``models.generation.BeamRequest``,
    is served where beams are.)"""

    max_lens: Tensor
    num_samples: int = 1
    greedy_too: bool = False
    temperature: float = 1.0
    plan: EagerPlan = EAGER  # (the default settings' eager plan, "auto" as off, where the maker gives none)
    first: Optional[Tensor] = None
    to_limit: bool = False

    @property
    def settings(self) -> EngineSettings:
        """How the step runs: its plan's settings (resolved: no "auto")."""
        return self.plan.settings


def sample_limits(net_input, bsz: int, max_sample_len: int, sample_len_ratio: float,
                  max_positions: Optional[int] = None) -> Tensor:
    """The longest sample of each example (B): ``max_sample_len``, with
    ``sample_len_ratio`` > 0 at most ceil(ratio * source length) + 5, and at
    most the decoder's ``max_positions`` (a learned positional embedding has
    no row beyond it)."""
    src_lengths = net_input.get("src_lengths")
    if src_lengths is None:  # image features: no source length
        if sample_len_ratio > 0:
            raise ValueError("--sample-len-ratio needs source sentences; these inputs (image features) have "
                             "no length: limit the samples with --max-sample-len")
        limit = torch.full((bsz,), max_sample_len, dtype=torch.long, device=net_input["features"].device)
    else:
        limit = torch.full_like(src_lengths, max_sample_len)
    if sample_len_ratio > 0:
        limit = torch.minimum(limit, torch.ceil(src_lengths.float() * sample_len_ratio).long() + 5)
    if max_positions is not None and max_sample_len > max_positions:
        limit = limit.clamp(max=max_positions)
    return limit


def available_memory(device):
    """About the bytes that can still be allocated on ``device`` (None where unknown).  On CUDA: the device's
    free memory plus what torch's caching allocator holds unused (reserved by earlier, larger batches, and given
    to the next allocations before anything new is asked of the device).  An upper bound there: free blocks of
    the captured steps' private pools and pieces of partly used segments count too, so a batch just under it
    may still run out of memory (as a plain CUDA out-of-memory error); the check refuses the batches that
    cannot fit, early and with its reason."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):  # not Linux
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None


def check_memory(sample, limits: Tensor, vocab: int, rl_samples: int):
    """Refuse a batch whose samples would not fit in memory, before
    drawing them: the scoring pass alone makes a rows x T x |candidates|
    float32 tensor and its gradient (T taken as the batch's longest
    reference, a typical sample length; samples may grow to the limit)."""
    rows = sample["target"].size(0) * rl_samples  # the sampled sequences
    free = available_memory(limits.device)
    if free is None:
        return
    steps = min(int(sample["target"].size(1)), int(limits.max()))
    needed = 2 * 4 * rows * steps * vocab
    if needed > free:
        raise MemoryError(
            f"--rl-samples {rl_samples} with this batch of {sample['target'].size(0)} sentences makes "
            f"{rows:,} sampled sequences, whose scoring needs at least {needed / 2 ** 30:.1f} GiB "
            f"({rows:,} x {steps} steps x {vocab:,} words x 4 bytes, twice), more than the "
            f"{free / 2 ** 30:.1f} GiB available: lower --rl-samples, or --batch-size / --max-tokens")
