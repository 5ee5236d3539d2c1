"""Criterion ``reinforce_gleu``: REINFORCE with sentence rewards (GLEU by
default), mixed with cross-entropy (the paper's section 2.2 / 4.2).

Per batch the model (one forward) computes the teacher-forced output for the
CE term and samples N sequences Y_b1 .. Y_bN per example (``--rl-samples``,
drawn in one batched pass) from its own distribution, inside the example's
candidates when the batch has them (full vocabulary otherwise), up to a
length limit.  Then, for sample j of example b,

    A_bjt = R(Y_bj, Y_b^gold) - b_bjt
    L_r   = - sum_b (1/N) sum_j sum_t A_bjt log p(y_bjt)   (steps after the sampled eos excluded)
    L     = lambda L_c + (1 - lambda) L_r                  (L_c: CE of the gold target)

(``--label-smoothing eps`` makes L_c fairseq's label-smoothed CE, as a model
trained with ``label_smoothed_cross_entropy`` was; the paper's is eps = 0.)

summed over the batch; the sample size is the number of sentences, so N
samples give the average of N single-sample gradients, not N times one.
With lambda = 1 (the CE control: CE continued with the same loss, optimizer
and budget) nothing is sampled, since L_r's weight is 0, and only the CE
numbers are logged.

Rewards (``--reward``, ``reinforce/rewards.py``): ``gleu`` (the paper's), sacrebleu's
sentence ``bleu`` and ``chrf``, and ``constant`` (1 for every sample: the
control); ``--reward-post-process`` scores post-processed words of subword
data.

Exploration (``--sample-temperature`` tau): the samples are drawn from
softmax(z / tau) (z the restricted logits), but the log-probabilities that
the gradient weighs are the model's own, log softmax(z): the policy being
trained is the model that decodes at test time, and tau only changes which
sequences it is shown (tau = 1, the default, is plain REINFORCE; tau != 1
trades the estimator's unbiasedness for exploration, as sampling-temperature
studies of RL for translation do).

Baselines (``--rl-baseline``, ``reinforce/baselines.py``): ``learned`` (default, the
paper's), ``loo`` (the mean reward of the other N - 1 samples of the same
input; Kool et al. 2019), ``self-critical`` and ``none``.  The learned
baseline's state (w, b and its Adam state) is saved in fairseq checkpoints
through the task (``add_checkpoint_state``, ``compat.train_checkpoints``) and
restored when training resumes; fine-tuning from another checkpoint starts a
fresh baseline.

How the step runs on the device (``--rl-capture``, ``--rl-compile``,
``--rl-graphed-pass``): each flag, where given, overrides its module's
setting (``reinforce.capture.CAPTURE`` and ``COMPILE``,
``reinforce.graphed_pass.MODE``) while the criterion runs a batch; unset,
the module's default holds (the sampling step captured on CUDA, nothing
compiled, the graphed pass off).  ``--rl-capture off`` is the escape hatch
for a GPU where capturing misbehaves; ``buckets`` runs the captured program
eagerly, on any device, for debugging.  None of them changes the loss: the
tests compare each against the eager loop.

Logged besides the loss: ``reward`` (mean over samples, x 100),
``reward_std`` (spread of the N rewards of one input, x 100; N >= 2),
``baseline``, ``greedy_frac`` (the fraction of samples that equal the greedy
decode: every token the argmax of its step), ``entropy`` (nats per sampled
step, of the distribution sampled from) and ``sample_len``.

The model is any encoder-decoder restricted by the plugin's tasks
(``restricted_model``): its forward with a ``policy`` request draws the samples in
eval mode without gradient and scores them with gradient (``reinforce.sampler``).

A batch whose reward or loss is not finite is skipped: its loss is replaced by
an exact zero (so nothing reaches the optimizer) and ``nonfinite`` counts it;
the logged averages (loss, ce, reward, baseline, ...) are over the batches
that produced them, so skipped batches do not pull them towards zero.  When
every batch was skipped the loss logs as inf (fairseq's placeholder -1 would
rank as the best validation score), and the task stops training before a
checkpoint is saved from such a stretch (``check_before_save``).
"""

import logging
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_smallvocab.reinforce import capture, graphed_pass
from fairseq_smallvocab.reinforce.baselines import BASELINES as BASELINE_CLASSES
from fairseq_smallvocab.reinforce.baselines import build_baseline
from fairseq_smallvocab.reinforce.rewards import REWARDS, build_reward
from fairseq_smallvocab.reinforce.sampler import SampleRequest

logger = logging.getLogger(__name__)

BASELINES = ChoiceEnum(list(BASELINE_CLASSES))
MAX_BASELINE_LR = 1.0  # the learned baseline's Adam: see check_config


def _available_memory(device):
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


def skipped_loss(model):
    """A skipped batch's loss: an exact zero that still touches every parameter (distributed wrappers expect
    each to get a gradient)."""
    return sum(p.reshape(-1)[:1].sum() * 0.0 for p in model.parameters() if p.requires_grad)


REWARD_NAMES = ChoiceEnum(list(REWARDS))
CAPTURE_MODES = ChoiceEnum(list(capture.MODES))
COMPILE_MODES = ChoiceEnum(list(capture.COMPILE_MODES))
GRAPHED_PASS_MODES = ChoiceEnum(list(graphed_pass.MODES))

# the flags that choose how a step runs on the device, each with the module setting it overrides (None: not
# given, the module's own holds; a benchmark's ``--set`` changes those)
RUN_SETTINGS = (("rl_capture", capture, "CAPTURE"), ("rl_compile", capture, "COMPILE"),
                ("rl_graphed_pass", graphed_pass, "MODE"))


@contextmanager
def run_settings(cfg):
    """The modules' settings as ``cfg``'s --rl-capture, --rl-compile and --rl-graphed-pass say, while the
    block runs (restored after it, so that one criterion's flags do not outlive its batch)."""
    before = [(module, name, getattr(module, name)) for _, module, name in RUN_SETTINGS]
    try:
        for flag, module, name in RUN_SETTINGS:
            if getattr(cfg, flag, None) is not None:
                setattr(module, name, str(getattr(cfg, flag)))
        yield
    finally:
        for module, name, value in before:
            setattr(module, name, value)


@dataclass
class ReinforceGleuConfig(FairseqDataclass):
    rl_lambda: float = field(default=0.005, metadata={"help": "lambda: weight of the CE term, 1 - lambda: RL's"})
    label_smoothing: float = field(
        default=0.0, metadata={"help": "eps: label smoothing of the CE term, as label_smoothed_cross_entropy's "
                                       "(over the candidates under a small vocabulary); 0: the paper's plain CE"})
    rl_baseline: BASELINES = field(default="learned",
                                   metadata={"help": "reward baseline (loo: needs --rl-samples >= 2)"})
    rl_samples: int = field(default=1, metadata={"help": "samples per input, each rewarded against the reference"})
    reward: REWARD_NAMES = field(default="gleu", metadata={"help": "sentence reward (constant: the control)"})
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
    rl_capture: Optional[CAPTURE_MODES] = field(
        default=None, metadata={"help": "the sampling step: cuda-graphs (captured per shape bucket and replayed per "
                                        "token on CUDA, eager elsewhere), buckets (the same step run eagerly, any "
                                        "device), off (the eager loop); default: reinforce.capture.CAPTURE "
                                        "(cuda-graphs)"})
    rl_compile: Optional[COMPILE_MODES] = field(
        default=None, metadata={"help": "torch.compile the bucketed sampling step: off, fuse (inductor's kernels, "
                                        "captured as --rl-capture says), reduce-overhead (inductor's own graphs); "
                                        "default: reinforce.capture.COMPILE (off)"})
    rl_graphed_pass: Optional[GRAPHED_PASS_MODES] = field(
        default=None, metadata={"help": "a recurrent decoder's teacher-forced passes with gradient: cuda-graphs "
                                        "(replayed with their backward on CUDA), buckets (the same, eagerly), off "
                                        "(the decoder's own pass); default: reinforce.graphed_pass.MODE (off)"})


def check_config(cfg: ReinforceGleuConfig) -> None:
    """Every setting of the criterion, checked in one place before anything
    is built: a bad one stops fairseq-train at start-up, naming its flag
    (the reward's name and its post-processing, which is checked against the
    dictionary, are checked where the reward is built: ``build_reward``)."""
    if cfg.rl_samples < 1:
        raise ValueError(f"--rl-samples must be >= 1 (samples per input), got {cfg.rl_samples}")
    if not 0 < cfg.sample_temperature < math.inf:
        raise ValueError(f"--sample-temperature must be a finite number > 0, got {cfg.sample_temperature}: for "
                         "greedy sequences use --rl-baseline self-critical, whose baseline is the greedy decode")
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
    if cfg.rl_samples < needed:
        raise ValueError(f"--rl-baseline {cfg.rl_baseline} needs --rl-samples >= {needed} (the other samples of "
                         f"the same input make the baseline), got {cfg.rl_samples}")


@register_criterion("reinforce_gleu", dataclass=ReinforceGleuConfig)
class ReinforceGleuCriterion(FairseqCriterion):
    def __init__(self, task, cfg: ReinforceGleuConfig):
        super().__init__(task)
        check_config(cfg)
        self.cfg = cfg
        self.reward = build_reward(str(cfg.reward), task.target_dictionary, cfg.reward_post_process,
                                   cfg.gleu_max_order)
        self.baseline = build_baseline(str(cfg.rl_baseline), cfg.baseline_lr)
        if str(cfg.rl_baseline) == "learned" and hasattr(task, "add_checkpoint_state"):  # a bare test task has none
            task.add_checkpoint_state("reinforce_gleu.baseline", self.baseline)
        self._capped_to_positions = False  # whether the log has said that the decoder's positions cap samples
        self._said_what_runs = False  # whether the log has said what a CUDA-only mode runs as here

    # -- rewards ------------------------------------------------------------------------------------

    def sample_limits(self, net_input, bsz, max_positions=None):
        """The longest sample of each example: --max-sample-len, with
        --sample-len-ratio at most ceil(ratio * source length) + 5, and at
        most the decoder's ``max_positions`` (a learned positional embedding
        has no row beyond it)."""
        src_lengths = net_input.get("src_lengths")
        if src_lengths is None:  # image features: no source length
            if self.cfg.sample_len_ratio > 0:
                raise ValueError("--sample-len-ratio needs source sentences; these inputs (image features) have "
                                 "no length: limit the samples with --max-sample-len")
            limit = torch.full((bsz,), self.cfg.max_sample_len, dtype=torch.long, device=net_input["features"].device)
        else:
            limit = torch.full_like(src_lengths, self.cfg.max_sample_len)
        if self.cfg.sample_len_ratio > 0:
            limit = torch.minimum(limit, torch.ceil(src_lengths.float() * self.cfg.sample_len_ratio).long() + 5)
        if max_positions is not None and self.cfg.max_sample_len > max_positions:
            if not self._capped_to_positions:
                logger.info(f"samples are cut at {max_positions} tokens, the decoder's positions "
                            f"(max_decoder_positions(), e.g. --max-target-positions), below --max-sample-len "
                            f"{self.cfg.max_sample_len}")
                self._capped_to_positions = True
            limit = limit.clamp(max=max_positions)
        return limit

    def check_memory(self, sample, rows, limits, vocab):
        """Refuse a batch whose samples would not fit in memory, before
        drawing them: the scoring pass alone makes a rows x T x |candidates|
        float32 tensor and its gradient (T taken as the batch's longest
        reference, a typical sample length; samples may grow to the limit)."""
        available = _available_memory(limits.device)
        if available is None:
            return
        steps = min(int(sample["target"].size(1)), int(limits.max()))
        needed = 2 * 4 * rows * steps * vocab
        if needed > available:
            raise MemoryError(
                f"--rl-samples {self.cfg.rl_samples} with this batch of {sample['target'].size(0)} sentences makes "
                f"{rows:,} sampled sequences, whose scoring needs at least {needed / 2 ** 30:.1f} GiB "
                f"({rows:,} x {steps} steps x {vocab:,} words x 4 bytes, twice), more than the "
                f"{available / 2 ** 30:.1f} GiB available: lower --rl-samples, or --batch-size / --max-tokens")

    def rewards(self, tokens, lengths, target):
        """The reward of each sample against its gold target (eos and pad left out)."""
        d = self.task.target_dictionary
        ref_lens = (target.ne(d.pad()) & target.ne(d.eos())).sum(1)
        return self.reward(tokens, lengths, target, ref_lens)

    # -- the loss -----------------------------------------------------------------------------------

    def forward(self, model, sample, reduce=True):
        with run_settings(self.cfg):
            return self.loss(model, sample)

    def say_what_runs(self, device):
        """Once: a CUDA-only mode asked for (--rl-capture / --rl-graphed-pass
        cuda-graphs) where it cannot run (no CUDA device, or under autocast)
        runs as off; the log says so rather than leave the user believing
        the step is captured."""
        if self._said_what_runs:
            return
        self._said_what_runs = True
        if device.type == "cuda" and not capture.autocast_on(device):
            return
        where = f"under autocast on {device}" if device.type == "cuda" else f"on {device}, not a CUDA device"
        for flag, what, instead in (("rl_capture", "the sampling step", "the eager sampling loop"),
                                    ("rl_graphed_pass", "the teacher-forced passes", "the decoder's own passes")):
            if str(getattr(self.cfg, flag, None)) == "cuda-graphs":
                logger.warning(f"--{flag.replace('_', '-')} cuda-graphs: CUDA graphs cannot be captured {where}, "
                               f"so {what} runs as --{flag.replace('_', '-')} off ({instead}); 'buckets' runs the "
                               "bucketed program eagerly on any device")

    def loss(self, model, sample):
        """``forward``'s work, under the run's settings."""
        self.say_what_runs(sample["target"].device)
        if self.cfg.rl_lambda == 1.0:  # RL's weight is 0: its samples would change nothing but the time
            return self.ce_only(model, sample)
        net_input = sample["net_input"]
        nsentences, n = sample["target"].size(0), self.cfg.rl_samples
        max_positions = getattr(model, "max_decoder_positions", None)
        limits = self.sample_limits(net_input, nsentences, max_positions() if max_positions else None)
        candidates = net_input.get("candidates")
        self.check_memory(sample, nsentences * n, limits,
                          candidates.size(1) if candidates is not None else len(self.task.target_dictionary))
        # Sampling happens inside the model's forward (restricted_model.sample_and_score: draw, then score with
        # gradient), so that fairseq's distributed wrappers see one forward for the CE term and the policy alike.
        policy = SampleRequest(limits, num_samples=n, greedy_too=self.baseline.needs_greedy,
                               temperature=self.cfg.sample_temperature)
        net_output = model(**net_input, policy=policy)
        samples = net_output[1]["samples"]  # B * N rows, the N samples of example b in rows b * N ... b * N + N - 1
        if self.cfg.sample_temperature != 1.0 and not torch.isfinite(samples.entropy).all() \
                and torch.isfinite(samples.lprobs).all():
            # the model's own distribution is finite, the one divided by the temperature is not
            raise ValueError(f"--sample-temperature {self.cfg.sample_temperature} makes the logits divided by it "
                             "overflow (not finite), so every sample would be one word repeated: use a larger "
                             "temperature (e.g. >= 0.05)")

        ce = self.ce_term(model, sample, net_output)

        mask = samples.mask
        gold = sample["target"].repeat_interleave(n, 0) if n > 1 else sample["target"]
        with torch.no_grad():
            reward = self.rewards(samples.tokens, samples.lengths, gold)
            greedy_reward = None
            logs = {}
            if self.baseline.needs_greedy:
                greedy = net_output[1]["greedy"]
                greedy_reward = self.rewards(greedy.tokens, greedy.lengths, sample["target"])
                logs["greedy_reward"] = greedy_reward.sum().item()
                greedy_reward = greedy_reward.repeat_interleave(n, 0)
            base = self.baseline.values(samples.features, mask, reward, greedy_reward, n) * mask
            if n > 1:
                logs["reward_std"] = reward.double().view(-1, n).std(1).sum().item()
        advantage = (reward.unsqueeze(1) - base) * mask
        rl = -(advantage * samples.lprobs * mask).sum() / n
        loss = self.cfg.rl_lambda * ce + (1.0 - self.cfg.rl_lambda) * rl

        finite = bool(torch.isfinite(reward).all() and torch.isfinite(loss))
        if not finite:
            loss = skipped_loss(model)
        if model.training:  # a skipped batch does not teach the baseline either (its keys log 0)
            learned = self.baseline.learn(samples.features, mask, reward) if finite \
                else dict.fromkeys(self.baseline.log_keys, 0.0)
            logs.update({key: value * nsentences for key, value in learned.items()})

        # The same keys for every batch (fairseq sums logging outputs key by key, across workers
        # too); a skipped batch adds zeros and no finite_* count, so it does not move the averages.
        def kept(value):  # a non-finite batch's numbers may be NaN: replaced, not multiplied by 0
            return value if finite else 0.0

        logging_output = {
            "loss": kept(loss.data), "ce": kept(ce.data), "rl": kept(rl.data), "ntokens": sample["ntokens"],
            "nsentences": nsentences, "sample_size": nsentences, "nonfinite": 0 if finite else 1,
            "finite_sentences": kept(nsentences), "finite_tokens": kept(sample["ntokens"]),
            "finite_samples": kept(reward.numel()),
            "reward": kept(reward.sum().item()), "baseline": kept(base.sum().item()),
            "steps": kept(mask.sum().item()), "sample_len": kept(samples.lengths.sum().item()),
            "greedy_samples": kept(samples.is_greedy.sum().item()),
            "entropy": kept(samples.entropy.sum().item()),
            **{key: kept(value) for key, value in logs.items()}}
        return loss, nsentences, logging_output

    def ce_term(self, model, sample, net_output):
        """L_c: the gold target's CE, summed over its tokens (pad excluded); with --label-smoothing eps,
        fairseq's label-smoothed CE (what label_smoothed_cross_entropy sums), so that a model trained with
        it goes on with the same CE objective instead of a sharper one."""
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        lprobs, target = lprobs.view(-1, lprobs.size(-1)), target.reshape(-1)
        if self.cfg.label_smoothing > 0:
            return label_smoothed_nll_loss(lprobs, target, self.cfg.label_smoothing, ignore_index=self.padding_idx,
                                           reduce=True)[0]
        return F.nll_loss(lprobs, target, ignore_index=self.padding_idx, reduction="sum")

    def ce_only(self, model, sample):
        """lambda = 1 (the CE control): the CE term alone, normalized as the
        mixed loss is (by sentences), with nothing sampled."""
        loss = self.ce_term(model, sample, model(**sample["net_input"]))
        nsentences = sample["target"].size(0)
        finite = bool(torch.isfinite(loss))
        if not finite:
            loss = skipped_loss(model)
        kept = (lambda value: value) if finite else (lambda value: 0.0)
        return loss, nsentences, {
            "loss": kept(loss.data), "ce": kept(loss.data), "rl": 0.0, "ntokens": sample["ntokens"],
            "nsentences": nsentences, "sample_size": nsentences, "nonfinite": 0 if finite else 1,
            "finite_sentences": kept(nsentences), "finite_tokens": kept(sample["ntokens"]), "finite_samples": 0}

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Each average is over the batches that produced its numbers:
        batches skipped as non-finite only add to ``nonfinite``."""
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        metrics.log_scalar_sum("nonfinite", total("nonfinite"))
        sentences, tokens, steps = total("finite_sentences"), total("finite_tokens"), total("steps")
        if not sentences:  # every batch skipped: nothing to average, and no loss to rank a checkpoint by
            if total("nonfinite"):
                metrics.log_scalar("loss", math.inf, 1, round=3)
            return
        samples = total("finite_samples")
        metrics.log_scalar("loss", total("loss") / sentences, sentences, round=3)
        metrics.log_scalar("ce", total("ce") / max(tokens, 1) / math.log(2), tokens, round=3)
        metrics.log_scalar("rl_loss", total("rl") / sentences, sentences, round=3)
        if not samples:  # lambda = 1: nothing sampled
            return
        metrics.log_scalar("reward", 100.0 * total("reward") / samples, samples, round=2)
        metrics.log_scalar("baseline", 100.0 * total("baseline") / max(steps, 1), steps, round=2)
        metrics.log_scalar("sample_len", total("sample_len") / samples, samples, round=2)
        if any("greedy_samples" in log for log in logging_outputs):
            metrics.log_scalar("greedy_frac", total("greedy_samples") / samples, samples, round=3)
            metrics.log_scalar("entropy", total("entropy") / max(steps, 1), steps, round=3)
        if any("reward_std" in log for log in logging_outputs):
            metrics.log_scalar("reward_std", 100.0 * total("reward_std") / sentences, sentences, round=2)
        if any("baseline_mse" in log for log in logging_outputs):
            metrics.log_scalar("baseline_mse", total("baseline_mse") / sentences, sentences, round=4)
        if any("greedy_reward" in log for log in logging_outputs):
            metrics.log_scalar("greedy_reward", 100.0 * total("greedy_reward") / sentences, sentences, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
