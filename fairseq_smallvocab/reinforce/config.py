"""The ``smallvocab_reinforce`` criterion's options (``SmallVocabReinforceConfig``,
each with its type, default and help, in the groups of the algorithm: the
loss, sampling, the reward, the baseline, and how a step runs on the device)
and their checks (``check_config``: a bad one stops fairseq-train at
start-up, naming its flag)."""

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Type, cast

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_smallvocab.engine.settings import FULL_SOFTMAX_MODES, EngineSettings, keys_help
from fairseq_smallvocab.reinforce import objective
from fairseq_smallvocab.reinforce.rewards import REWARDS

# the baseline classes by name (the same dict: objective.BASELINES is not annotated, and mypy reads it as a dict of
# plain ``type``, its classes' __init__s differing)
BASELINE_CLASSES = cast(Dict[str, Type[objective.Baseline]], objective.BASELINES)
BASELINES = ChoiceEnum(list(BASELINE_CLASSES))
FULL_SOFTMAX_CHOICES = ChoiceEnum(list(FULL_SOFTMAX_MODES))
OBJECTIVES = ChoiceEnum(["reinforce", "risk"])
RISK_CANDIDATES = ChoiceEnum(["sample", "beam"])
MAX_BASELINE_LR = 1.0  # the learned baseline's Adam: see check_config
# The largest --risk-sharpness alpha: a candidate's score is alpha times its mean log-probability per step
# (objective.candidate_scores), and the gradient reaching each log-probability is alpha * q (c - E[c]) / |y|, up
# to alpha.  The lowest log-probability of a word a float32 softmax can draw is log(2^-149) = -103.3 (the smallest
# float32 above 0; a word below it has probability 0 and is never drawn), so a mean log-probability is at least
# that, and alpha <= 65504 / 103.3 = 634 (65504: float16's largest value) keeps every score and that gradient
# finite even in half precision, the narrowest dtype fairseq trains in (--fp16: its decoder states carry the
# gradient back), float32's range (3.4e38) far above.  At alpha = 1e38 the scores of ordinary candidates were -inf
# in float32 already, every batch was skipped as not finite, and the run's stop blamed --lr.  Little is lost
# above the bound: at it, candidates 0.01 apart in mean log-probability already weigh 566 to 1.
MAX_RISK_SHARPNESS = math.floor(torch.finfo(torch.float16).max / (149 * math.log(2.0)))


# fairseq takes a choice field's choices from its type, a ChoiceEnum, which to mypy is a value and not a type
# (hence the fields' type: ignore)
@dataclass
class SmallVocabReinforceConfig(FairseqDataclass):
    rl_objective: OBJECTIVES = field(  # type: ignore[valid-type]  # a ChoiceEnum: see above
        default="reinforce", metadata={"help": "the sequence-level term: reinforce (the policy gradient, with "
                                               "--rl-baseline; the paper's) or risk (the expected cost, 1 - reward, "
                                               "under the softmax of each source's distinct samples' "
                                               "length-normalised log-probabilities times --risk-sharpness; needs "
                                               "--rl-samples >= 2, uses no baseline: Edunov et al. 2018's risk)"})
    risk_sharpness: float = field(
        default=1.0, metadata={"help": "risk: alpha, the factor of the length-normalised log-probabilities whose "
                                       "softmax over a source's distinct samples weighs their costs (larger: the "
                                       "likeliest samples weigh more; at most 634, where the scores would overflow "
                                       "half precision)"})
    risk_candidates: RISK_CANDIDATES = field(  # type: ignore[valid-type]  # a ChoiceEnum: see above
        default="sample", metadata={"help": "risk's N candidates per input: sample (--rl-samples samples, a repeat "
                                            "counted once) or beam (the --rl-samples best of a beam search of that "
                                            "width inside the candidates, as Edunov et al.'s)"})
    ce_weight: float = field(default=0.005, metadata={
        "help": "w: the weight of the CE term, 1 - w the sequence-level term's (1: CE alone, nothing sampled; "
                "formerly --rl-lambda, which still works)"})
    label_smoothing: float = field(
        default=0.0, metadata={"help": "eps: label smoothing of the CE term, as label_smoothed_cross_entropy's "
                                       "(over the candidates under a small vocabulary); 0: the paper's plain CE"})
    rl_baseline: BASELINES = field(default="learned",  # type: ignore[valid-type]  # a ChoiceEnum: see above
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
    rl_engine: Optional[str] = field(
        default=None, metadata={"help": "how the step runs on the device, as KEY=VALUE,... (e.g. "
                                        "capture=buckets,stop_check_every=4; none: the defaults, the sampling step "
                                        "and a recurrent decoder's passes captured as CUDA graphs on a GPU, eager "
                                        "elsewhere). Keys: "
                                        + keys_help() + "; compile is refused on a GPU until its benchmark "
                                        "step has run there, unless untested_cuda_modes=on "
                                        "(fairseq_smallvocab/engine/settings.py says what each does)"})
    rl_full_softmax: Optional[FULL_SOFTMAX_CHOICES] = field(  # type: ignore[valid-type]  # a ChoiceEnum: see above
        default=None, metadata={"help": "without candidates (the full softmax): plain (the default: the targets' "
                                        "tokens x |V| logits and log-softmax, the sampled steps' probabilities "
                                        "kept) or chunked (no tokens x |V| tensor: chunks of rows made again in "
                                        "the backward, as fused linear cross-entropy does); the same loss"})

    @classmethod
    def former_option(cls, name: str, value=None, hydra: bool = False) -> Optional[str]:
        """The refusal of ``name``, a former option of the criterion (``FORMER_ENGINE_OPTIONS``' config field,
        e.g. ``rl_capture``) set to ``value``, naming what replaced it, as a command line (``hydra``: a hydra
        config's) says it; None where ``name`` is no former option."""
        return former_option(name, value, hydra)


# the device options that --rl-engine replaced: each was the flag --rl-KEY (config field rl_KEY) and is now the key
# KEY of --rl-engine; given, they are refused naming it (on the command line: the criterion's add_args; in a
# hydra config: compat/former_options.py), rather than as an unknown argument or key
FORMER_ENGINE_OPTIONS = ("capture", "compile", "graphed_pass", "merged_pass", "static_state", "stop_check_every",
                         "stored_probs_max_elements", "transposed_min_rows", "union_max_ratio", "capture_max_buckets",
                         "capture_max_mib", "graphed_pass_max_buckets", "graphed_pass_max_mib", "untested_cuda_modes")


def former_option(name: str, value=None, hydra: bool = False) -> Optional[str]:
    """``SmallVocabReinforceConfig.former_option``."""
    key = name[len("rl_"):] if name.startswith("rl_") else None
    if key not in FORMER_ENGINE_OPTIONS:
        return None
    setting = f"{key}={'VALUE' if value is None else value}"
    if hydra:
        return (f"criterion.{name} was replaced by criterion.rl_engine, --rl-engine's comma-separated KEY=VALUE "
                f"settings: give +criterion.rl_engine='{setting}' (quoted) on the command line, or "
                f"rl_engine: {setting} under criterion: in the YAML file")
    return (f"--{name.replace('_', '-')} was replaced by --rl-engine, which takes the device settings as one "
            f"comma-separated KEY=VALUE list (e.g. --rl-engine capture=off,stop_check_every=4): use --rl-engine "
            f"{setting}")


def check_config(cfg: SmallVocabReinforceConfig) -> EngineSettings:
    """Every setting of the criterion, checked in one place before anything
    is built: a bad one stops fairseq-train at start-up, naming its flag
    (the reward's name and its post-processing, which is checked against the
    dictionary, are checked where the reward is built: ``user_reward.build_reward``).
    Every bad setting is named, all in one error.  Returns the settings of how a step runs on the device."""
    problems = []
    if cfg.rl_samples < 1:
        problems.append(f"--rl-samples must be >= 1 (samples per input), got {cfg.rl_samples}")
    if not 0 < cfg.sample_temperature < math.inf:
        problems.append(f"--sample-temperature must be a finite number > 0, got {cfg.sample_temperature}: for "
                        "greedy sequences use --rl-baseline self-critical, whose baseline is the greedy decode")
    if str(cfg.rl_objective) not in ("reinforce", "risk"):
        problems.append(f"unknown objective '{cfg.rl_objective}': --rl-objective must be reinforce or risk")
    if not 0 < cfg.risk_sharpness <= MAX_RISK_SHARPNESS:
        problems.append(f"--risk-sharpness must be a finite number in (0, {MAX_RISK_SHARPNESS}], got "
                        f"{cfg.risk_sharpness:g}: a candidate's score is the sharpness times its mean "
                        "log-probability (as low as -103 per token), and above the bound the scores and their "
                        "gradients can leave half precision's range (--fp16; at 1e38 every score is -inf even in "
                        "float32, and every batch would be skipped as not finite). Values near the bound already "
                        "put almost all the weight on the likeliest candidate; the default is 1")
    if str(cfg.risk_candidates) not in ("sample", "beam"):
        problems.append(f"unknown --risk-candidates '{cfg.risk_candidates}': sample or beam")
    if str(cfg.risk_candidates) == "beam" and str(cfg.rl_objective) != "risk":
        problems.append("--risk-candidates beam is risk's (--rl-objective risk): REINFORCE's gradient needs "
                        "samples drawn from the model")
    if str(cfg.risk_candidates) == "beam" and cfg.sample_temperature != 1.0:
        problems.append("--sample-temperature does not apply to --risk-candidates beam (a beam search draws "
                        "nothing): leave it at 1")
    if str(cfg.rl_objective) == "risk" and 1 <= cfg.rl_samples < 2:
        problems.append(f"--rl-objective risk needs --rl-samples >= 2 (the softmax over one sample is 1 whatever "
                        f"its cost, so it would learn nothing), got {cfg.rl_samples}")
    if not 0.0 <= cfg.ce_weight <= 1.0:
        problems.append(f"--ce-weight must be in [0, 1], got {cfg.ce_weight}")
    if not 0.0 <= cfg.label_smoothing < 1.0:
        problems.append(f"--label-smoothing must be in [0, 1) (the CE term's), got {cfg.label_smoothing}")
    if cfg.max_sample_len < 1:
        problems.append(f"--max-sample-len must be >= 1, got {cfg.max_sample_len}")
    if not 0 <= cfg.sample_len_ratio < math.inf:  # (nan fails too: it would be ignored, as 0 is)
        problems.append(f"--sample-len-ratio must be a finite number >= 0 (0: no limit from the source's "
                        f"length), got {cfg.sample_len_ratio}")
    if not 0 < cfg.baseline_lr <= MAX_BASELINE_LR:
        problems.append(f"--baseline-lr must be in (0, {MAX_BASELINE_LR:g}], got {cfg.baseline_lr:g}: Adam moves "
                        "each of the learned baseline's weights by about the learning rate every step, so a larger "
                        "one saturates its sigmoid (it then reads 0 or 1 whatever the reward) or overflows it")
    if cfg.gleu_max_order < 1:
        problems.append(f"--gleu-max-order must be >= 1, got {cfg.gleu_max_order}")
    if str(cfg.rl_baseline) not in BASELINE_CLASSES:
        problems.append(f"unknown baseline '{cfg.rl_baseline}': --rl-baseline must be one of "
                        f"{', '.join(BASELINE_CLASSES)}")
    needed = BASELINE_CLASSES[str(cfg.rl_baseline)].min_samples if str(cfg.rl_baseline) in BASELINE_CLASSES else 1
    if str(cfg.rl_objective) == "reinforce" and 1 <= cfg.rl_samples < needed:
        problems.append(f"--rl-baseline {cfg.rl_baseline} needs --rl-samples >= {needed} (the other samples of "
                        f"the same input make the baseline), got {cfg.rl_samples}")
    try:
        settings = EngineSettings.from_config(cfg)  # (which checks the engine's settings, naming their flags)
    except ValueError as bad:
        problems.append(str(bad))
        settings = None
    if str(cfg.risk_candidates) == "beam" and settings is not None and settings.merged_pass:
        problems.append("--rl-engine merged_pass=on merges the CE pass with drawing samples, which "
                        "--risk-candidates beam does not draw: use one or the other")
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError(f"{len(problems)} of the criterion's settings need fixing:\n  " + "\n  ".join(problems))
    assert settings is not None  # (None only where making them failed: a problem, raised above)
    return settings
