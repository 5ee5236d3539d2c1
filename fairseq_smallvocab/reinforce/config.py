"""The ``reinforce_gleu`` criterion's options (``ReinforceGleuConfig``,
each with its type, default and help, in the groups of the algorithm: the
loss, sampling, the reward, the baseline, and how a step runs on the device)
and their checks (``check_config``: a bad one stops fairseq-train at
start-up, naming its flag)."""

import math
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_smallvocab.engine.settings import (
    CAPTURE_MODES,
    COMPILE_MODES,
    FULL_SOFTMAX_MODES,
    GRAPHED_PASS_MODES,
    EngineSettings,
)
from fairseq_smallvocab.reinforce.baselines import BASELINES as BASELINE_CLASSES
from fairseq_smallvocab.reinforce.rewards import REWARDS

BASELINES = ChoiceEnum(list(BASELINE_CLASSES))
CAPTURE_CHOICES = ChoiceEnum(list(CAPTURE_MODES))
COMPILE_CHOICES = ChoiceEnum(list(COMPILE_MODES))
GRAPHED_PASS_CHOICES = ChoiceEnum(list(GRAPHED_PASS_MODES))
FULL_SOFTMAX_CHOICES = ChoiceEnum(list(FULL_SOFTMAX_MODES))
ON_OFF = ChoiceEnum(["on", "off"])
OBJECTIVES = ChoiceEnum(["reinforce", "risk"])
RISK_CANDIDATES = ChoiceEnum(["sample", "beam"])
MAX_BASELINE_LR = 1.0  # the learned baseline's Adam: see check_config


@dataclass
class ReinforceGleuConfig(FairseqDataclass):
    rl_objective: OBJECTIVES = field(
        default="reinforce", metadata={"help": "the sequence-level term: reinforce (the policy gradient, with "
                                               "--rl-baseline; the paper's) or risk (the expected cost, 1 - reward, "
                                               "under the softmax of each source's distinct samples' "
                                               "length-normalised log-probabilities times --risk-sharpness; needs "
                                               "--rl-samples >= 2, uses no baseline: Edunov et al. 2018's risk)"})
    risk_sharpness: float = field(
        default=1.0, metadata={"help": "risk: alpha, the factor of the length-normalised log-probabilities whose "
                                       "softmax over a source's distinct samples weighs their costs (larger: the "
                                       "likeliest samples weigh more)"})
    risk_candidates: RISK_CANDIDATES = field(
        default="sample", metadata={"help": "risk's N candidates per input: sample (--rl-samples samples, a repeat "
                                            "counted once) or beam (the --rl-samples best of a beam search of that "
                                            "width inside the candidates, as Edunov et al.'s)"})
    rl_lambda: float = field(default=0.005, metadata={"help": "lambda: weight of the CE term, 1 - lambda: RL's"})
    label_smoothing: float = field(
        default=0.0, metadata={"help": "eps: label smoothing of the CE term, as label_smoothed_cross_entropy's "
                                       "(over the candidates under a small vocabulary); 0: the paper's plain CE"})
    rl_baseline: BASELINES = field(default="learned",
                                   metadata={"help": "reward baseline (loo: needs --rl-samples >= 2)"})
    rl_samples: int = field(default=1, metadata={"help": "samples per input, each rewarded against the reference"})
    reward: str = field(default="gleu", metadata={
        "help": f"sentence reward: {', '.join(REWARDS)} (constant: the control), or python:MODULE.FUNCTION, a "
                "function of your own called once per batch as FUNCTION(hypotheses, references, sources, "
                "target_lang) with detokenized strings, returning one float per hypothesis "
                "(fairseq_smallvocab/reinforce/user_reward.py)"})
    sample_temperature: float = field(
        default=1.0, metadata={"help": "draw samples from softmax(logits / T); the gradient weighs the model's "
                                       "own log-probabilities"})
    baseline_lr: float = field(default=1e-3, metadata={"help": "Adam learning rate of the learned baseline, in "
                                                               "(0, 1]; it starts at the first batch's mean reward"})
    max_sample_len: int = field(default=100, metadata={"help": "longest sampled sequence (tokens, eos included)"})
    sample_len_ratio: float = field(
        default=0.0, metadata={"help": "if > 0, also limit each sample to ceil(ratio * source length) + 5 tokens"})
    gleu_max_order: int = field(default=4, metadata={"help": "GLEU's longest n-gram"})
    reward_post_process: Optional[str] = field(
        default=None, metadata={"help": "score the reward on words after this post-processing of subword tokens "
                                        "(e.g. sentencepiece, subword_nmt: as fairseq-generate's --post-process)"})
    # how the step runs on the device: ``engine.settings.EngineSettings`` (None: its default)
    rl_capture: Optional[CAPTURE_CHOICES] = field(
        default=None, metadata={"help": "the sampling step: cuda-graphs (captured per shape bucket and replayed per "
                                        "token on CUDA, eager elsewhere; not yet passed its GPU tests: see "
                                        "--rl-untested-cuda-modes), buckets (the same step run eagerly, any "
                                        "device), off (the eager loop; the default)"})
    rl_compile: Optional[COMPILE_CHOICES] = field(
        default=None, metadata={"help": "torch.compile the bucketed sampling step: off (the default), fuse "
                                        "(inductor's kernels, captured as --rl-capture says), reduce-overhead "
                                        "(inductor's own graphs)"})
    rl_graphed_pass: Optional[GRAPHED_PASS_CHOICES] = field(
        default=None, metadata={"help": "a recurrent decoder's teacher-forced passes with gradient: cuda-graphs "
                                        "(replayed with their backward on CUDA), buckets (the same, eagerly), off "
                                        "(the decoder's own pass; the default)"})
    rl_full_softmax: Optional[FULL_SOFTMAX_CHOICES] = field(
        default=None, metadata={"help": "without candidates (the full softmax): plain (the default: the targets' "
                                        "tokens x |V| logits and log-softmax, the sampled steps' probabilities "
                                        "kept) or chunked (no tokens x |V| tensor: chunks of rows made again in "
                                        "the backward, as fused linear cross-entropy does); the same loss"})
    rl_merged_pass: Optional[ON_OFF] = field(
        default=None, metadata={"help": "on: the CE term's and the samples' teacher-forced passes (and the "
                                        "encoder's two) run as one over the rows of both, dropout on the gold rows "
                                        "only (the same loss; fewer launches and sequential steps); off (the "
                                        "default) runs them apart"})
    rl_static_state: Optional[ON_OFF] = field(
        default=None, metadata={"help": "sample on a decoding state made once per batch (on, the default) or on "
                                        "fairseq's incremental state (off)"})
    rl_stop_check_every: Optional[int] = field(
        default=None, metadata={"help": "the sampling loop asks whether any sample is still going every this "
                                        "many steps (a host sync on a GPU; default 1)"})
    rl_stored_probs_max_elements: Optional[int] = field(
        default=None, metadata={"help": "the most step probabilities (rows x steps x K) the sampling loop keeps "
                                        "for the gradient; above it the logits are made again (default 2^28)"})
    rl_transposed_min_rows: Optional[int] = field(
        default=None, metadata={"help": "the fewest sampling rows for which the candidate union's scores are "
                                        "made transposed on the CPU (default 32; the criterion's passes)"})
    rl_union_max_ratio: Optional[float] = field(
        default=None, metadata={"help": "the teacher-forced output layer scores the batch's candidate union with "
                                        "one product when it has at most this many words per candidate row "
                                        "(default 2.0; the criterion's passes)"})
    rl_capture_max_buckets: Optional[int] = field(
        default=None, metadata={"help": "captured sampling steps kept per decoder (default 16)"})
    rl_capture_max_mib: Optional[int] = field(
        default=None, metadata={"help": "the most memory (MiB) the captured sampling steps may hold (default 2048)"})
    rl_graphed_pass_max_buckets: Optional[int] = field(
        default=None, metadata={"help": "graphed teacher-forced passes kept per decoder (default 32)"})
    rl_graphed_pass_max_mib: Optional[int] = field(
        default=None, metadata={"help": "the most memory (MiB) the graphed passes may hold (default 4096)"})
    rl_untested_cuda_modes: Optional[ON_OFF] = field(
        default=None, metadata={"help": "on: run on a GPU a device mode that has not yet passed its tests there "
                                        "(--rl-capture cuda-graphs, --rl-compile fuse or reduce-overhead, "
                                        "--rl-graphed-pass cuda-graphs), its results unchecked; off (the default) "
                                        "refuses them at the first batch on a CUDA device"})


def check_config(cfg: ReinforceGleuConfig) -> EngineSettings:
    """Every setting of the criterion, checked in one place before anything
    is built: a bad one stops fairseq-train at start-up, naming its flag
    (the reward's name and its post-processing, which is checked against the
    dictionary, are checked where the reward is built: ``build_reward``).
    Returns the settings of how a step runs on the device."""
    if cfg.rl_samples < 1:
        raise ValueError(f"--rl-samples must be >= 1 (samples per input), got {cfg.rl_samples}")
    if not 0 < cfg.sample_temperature < math.inf:
        raise ValueError(f"--sample-temperature must be a finite number > 0, got {cfg.sample_temperature}: for "
                         "greedy sequences use --rl-baseline self-critical, whose baseline is the greedy decode")
    if str(cfg.rl_objective) not in ("reinforce", "risk"):
        raise ValueError(f"unknown objective '{cfg.rl_objective}': --rl-objective must be reinforce or risk")
    if not 0 < cfg.risk_sharpness < math.inf:
        raise ValueError(f"--risk-sharpness must be a finite number > 0, got {cfg.risk_sharpness}")
    if str(cfg.risk_candidates) not in ("sample", "beam"):
        raise ValueError(f"unknown --risk-candidates '{cfg.risk_candidates}': sample or beam")
    if str(cfg.risk_candidates) == "beam" and str(cfg.rl_objective) != "risk":
        raise ValueError("--risk-candidates beam is risk's (--rl-objective risk): REINFORCE's gradient needs "
                         "samples drawn from the model")
    if str(cfg.risk_candidates) == "beam" and cfg.sample_temperature != 1.0:
        raise ValueError("--sample-temperature does not apply to --risk-candidates beam (a beam search draws "
                         "nothing): leave it at 1")
    if str(cfg.rl_objective) == "risk" and cfg.rl_samples < 2:
        raise ValueError(f"--rl-objective risk needs --rl-samples >= 2 (the softmax over one sample is 1 whatever "
                         f"its cost, so it would learn nothing), got {cfg.rl_samples}")
    if not 0.0 <= cfg.rl_lambda <= 1.0:
        raise ValueError(f"--rl-lambda must be in [0, 1], got {cfg.rl_lambda}")
    if not 0.0 <= cfg.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing must be in [0, 1) (the CE term's), got {cfg.label_smoothing}")
    if cfg.max_sample_len < 1:
        raise ValueError(f"--max-sample-len must be >= 1, got {cfg.max_sample_len}")
    if not 0 <= cfg.sample_len_ratio < math.inf:  # (nan fails too: it would be ignored, as 0 is)
        raise ValueError(f"--sample-len-ratio must be a finite number >= 0 (0: no limit from the source's "
                         f"length), got {cfg.sample_len_ratio}")
    if not 0 < cfg.baseline_lr <= MAX_BASELINE_LR:
        raise ValueError(f"--baseline-lr must be in (0, {MAX_BASELINE_LR:g}], got {cfg.baseline_lr:g}: Adam moves "
                         "each of the learned baseline's weights by about the learning rate every step, so a larger "
                         "one saturates its sigmoid (it then reads 0 or 1 whatever the reward) or overflows it")
    if cfg.gleu_max_order < 1:
        raise ValueError(f"--gleu-max-order must be >= 1, got {cfg.gleu_max_order}")
    if str(cfg.rl_baseline) not in BASELINE_CLASSES:
        raise ValueError(f"unknown baseline '{cfg.rl_baseline}': --rl-baseline must be one of "
                         f"{', '.join(BASELINE_CLASSES)}")
    needed = BASELINE_CLASSES[str(cfg.rl_baseline)].min_samples
    if str(cfg.rl_objective) == "reinforce" and cfg.rl_samples < needed:
        raise ValueError(f"--rl-baseline {cfg.rl_baseline} needs --rl-samples >= {needed} (the other samples of "
                         f"the same input make the baseline), got {cfg.rl_samples}")
    settings = EngineSettings.from_config(cfg)  # (which checks the engine's settings, naming their flags)
    if str(cfg.risk_candidates) == "beam" and settings.merged_pass:
        raise ValueError("--rl-merged-pass on merges the CE pass with drawing samples, which --risk-candidates beam "
                         "does not draw: use one or the other")
    return settings
