"""Criterion ``smallvocab_reinforce`` (also registered as ``reinforce_gleu``,
its first name, so that old commands run unchanged): REINFORCE (or
sequence-level risk) inside each input's candidates, mixed with
cross-entropy (the paper's 2.2 / 4.2; ``--reward`` is any sentence reward):

    L = w L_c + (1 - w) L_r      w: --ce-weight; L_c: (label-smoothed) CE of the gold target
    L_r = - sum_b (1/N) sum_j sum_t (R(Y_bj) - b_bjt) log p(y_bjt)    (REINFORCE)
    L_r = sum_b sum_{distinct j} q_bj (1 - R(Y_bj))                    (--rl-objective risk)

One step, file:function, top to bottom:

1. fairseq ``Trainer.train_step`` -> ``tasks/translation_smallvocab.py:train_step``
   -> ``SmallVocabReinforceCriterion.loss`` (below; w = 1, the CE control:
   ``ce_only``, nothing sampled).
2. ``sample_request`` (``engine/request.py:sample_limits``, ``check_memory``)
   -> ``models/restricted.py:RestrictedModel.forward(sample_request=...)``: the
   teacher-forced CE pass, then ``sample_and_score``
   -> ``engine/sampling.py:sample_and_score`` (``draw`` N samples per input in
   one batched loop, ``score`` them with gradient); each pass runs as the
   model's plan says (``engine/passes.py:plan``, made once from the settings
   for the model and its device: the decoder's own calls unless a device mode
   is on).
3. ``rewards`` -> ``reinforce/rewards.py`` (``--reward``, or the user's:
   ``reinforce/user_reward.py``).
4. the sequence-level term -> ``reinforce/objective.py``: ``--rl-objective``'s
   ``PolicyGradient`` (the advantage over ``--rl-baseline``'s baseline,
   ``policy_gradient``) or ``ExpectedRisk`` (``distinct``, ``candidate_scores``,
   ``expected_risk``; no baseline).
5. the loss -> ``objective.mixed`` with the CE term, a batch whose reward or
   loss is not finite skipped (``skipped_loss``); the learned baseline learns.
6. the log -> ``reinforce/logs.py`` (``batch_log``, ``reduce``: sums that
   reduce across workers).

Options: ``reinforce/config.py``.  What each option and log means, and how to
read a run: docs/reinforce.md.
"""

import argparse
import logging
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion

from fairseq_smallvocab.candidates.space import candidate_positions
from fairseq_smallvocab.compat.registry import register_alias
from fairseq_smallvocab.criterions.reinforce_setup import add_former_flags, check_beam_width, check_task
from fairseq_smallvocab.engine.request import SampleRequest, check_memory, sample_limits
from fairseq_smallvocab.models.generation import BeamRequest
from fairseq_smallvocab.models.restricted import restricted_module
from fairseq_smallvocab.output.chunked_ce import full_cross_entropy
from fairseq_smallvocab.reinforce import logs, objective
from fairseq_smallvocab.reinforce.config import SmallVocabReinforceConfig, check_config
from fairseq_smallvocab.reinforce.rewards import ConstantReward, without_ids
from fairseq_smallvocab.reinforce.user_reward import build_reward

logger = logging.getLogger(__name__)

__all__ = ["SmallVocabReinforceConfig", "SmallVocabReinforceCriterion"]

# the key of a learned baseline's weights in a checkpoint's task state: the criterion's first name, kept so that
# every checkpoint written since (and the runs resumed from them) restores its baseline
BASELINE_STATE = "reinforce_gleu.baseline"


@register_criterion("smallvocab_reinforce", dataclass=SmallVocabReinforceConfig)
class SmallVocabReinforceCriterion(FairseqCriterion):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # the CE weight's first spelling, kept so that old commands run unchanged
        parser.add_argument("--rl-lambda", dest="ce_weight", type=float, default=argparse.SUPPRESS,
                            help="the former name of --ce-weight")
        add_former_flags(parser)  # the device flags --rl-engine replaced: refused naming their keys

    def __init__(self, task, cfg: SmallVocabReinforceConfig):
        super().__init__(task)
        check_task(task)
        self.settings = check_config(cfg)
        self.cfg = cfg
        check_beam_width(task, cfg)
        self.reward = build_reward(str(cfg.reward), task.target_dictionary, cfg.reward_post_process,
                                   cfg.gleu_max_order)
        risk = str(cfg.rl_objective) == "risk"
        # risk centres each cost on the candidates' expected cost itself: no baseline (--rl-baseline unused)
        self.baseline = objective.build_baseline("none" if risk else str(cfg.rl_baseline), cfg.baseline_lr)
        # the sequence-level term: REINFORCE's policy gradient, or the expected risk
        self.objective = objective.ExpectedRisk(cfg.risk_sharpness, warn=not isinstance(self.reward, ConstantReward)) \
            if risk else objective.PolicyGradient(self.baseline)
        if risk:
            logger.info(f"--rl-objective risk: the expected cost over each input's distinct samples "
                        f"(--rl-samples {cfg.rl_samples}, --risk-sharpness {cfg.risk_sharpness:g}); no baseline, "
                        f"--rl-baseline is not used")
        elif str(cfg.rl_baseline) == "learned" and hasattr(task, "add_checkpoint_state"):  # a bare test task has none
            task.add_checkpoint_state(BASELINE_STATE, self.baseline)
        logger.info(f"smallvocab_reinforce: the step runs with {self.settings.describe()}")
        self._capped_to_positions = False  # whether the log has said that the decoder's positions cap samples
        self.languages = logs.target_languages(task)  # a multilingual task's: each logs its reward

    def forward(self, model, sample, reduce=True):
        return self.loss(model, sample)

    def loss(self, model, sample):
        """One batch: plan -> sample -> reward -> baseline -> loss -> log."""
        plan = self.plan(model, sample["target"].device)
        if self.cfg.ce_weight == 1.0 and model.training:  # RL's weight is 0: samples would change nothing but time
            return self.ce_only(model, sample)
        # (in validation the CE control samples too, without gradient: its log then has the reward, len_ratio and
        # the rest that REINFORCE's has, to compare on; its loss is the CE term's all the same, 1 * ce + 0 * rl)
        n = self.cfg.rl_samples
        # sample: inside the model's forward (models.restricted: draw, then score with gradient), so that
        # fairseq's distributed wrappers see one forward for the CE term and the policy alike
        from_features = self.chunked_ce(model, sample)
        request = self.sample_request(model, sample, plan)
        net_output = model(**sample["net_input"], sample_request=request,
                           **({"features_only": True} if from_features else {}))
        samples = net_output[1]["samples"]  # B * N rows, the N samples of example b in rows b * N ... b * N + N - 1
        self.check_temperature(samples)
        mask = samples.mask
        extra = {}
        # each row's target language, where the task tells it (a multilingual task): its reward's and its log's
        row_langs = self.task.target_languages(sample) if hasattr(self.task, "target_languages") else None
        with torch.no_grad():
            # reward (of the samples and, for the self-critical baseline, of the greedy decodes: one call)
            reward, greedy_reward, (words, ref_words) = self.rewards(sample, samples, net_output[1].get("greedy"),
                                                                     n, row_langs)
            if greedy_reward is not None:
                extra["greedy_reward"] = greedy_reward.sum().item()
                greedy_reward = greedy_reward.repeat_interleave(n, 0)
            if self.languages:
                extra.update(logs.language_sums(self.languages, row_langs, reward, n))
            if n > 1:
                extra["reward_std"] = reward.double().view(-1, n).std(1).sum().item()
        # loss: the CE term and the sequence-level term (REINFORCE's over its baseline, or the risk), mixed
        ce = self.ce_term(model, sample, net_output, from_features)
        chosen = mask  # the steps that chose: a forced first token is no action (it leaves the policy gradient)
        if request.first is not None and mask.size(1):
            chosen = mask.clone()
            chosen[:, 0] &= request.first.lt(0).repeat_interleave(n)
        rl, logged = self.objective.term(reward, greedy_reward, samples, chosen, n, model.training)
        extra.update(logged)
        loss = objective.mixed(ce, rl, self.cfg.ce_weight)
        finite = objective.is_finite(reward, loss)
        if not finite:
            loss = objective.skipped_loss(model)
        if model.training:  # a skipped batch does not teach the baseline either (its keys log 0)
            learned = self.baseline.learn(samples.features, mask, reward) if finite \
                else dict.fromkeys(self.baseline.log_keys, 0.0)
            extra.update({key: value * sample["target"].size(0) for key, value in learned.items()})
        # log
        return loss, sample["target"].size(0), self.logging_output(
            sample, finite, loss=loss.data, ce=ce.data, rl=rl.data, finite_samples=reward.numel(),
            reward=reward.sum().item(), steps=mask.sum().item(),
            sample_words=words.sum().item(), ref_words=ref_words.sum().item(),
            sample_len=samples.lengths.sum().item(), **self.drawn_logs(samples), **extra)

    def ce_only(self, model, sample):
        """--ce-weight 1 (the CE control) in training: the CE term alone, normalized as the mixed loss is (by
        sentences), with nothing sampled."""
        from_features = self.chunked_ce(model, sample)
        given = {"features_only": True} if from_features else {}
        loss = self.ce_term(model, sample, model(**sample["net_input"], **given), from_features)
        finite = objective.is_finite(loss)
        if not finite:
            loss = objective.skipped_loss(model)
        return loss, sample["target"].size(0), self.logging_output(sample, finite, loss=loss.data, ce=loss.data,
                                                                   rl=0.0, finite_samples=0)

    # -- the steps of ``loss`` ------------------------------------------------------------------------

    def sample_request(self, model, sample, plan) -> SampleRequest:
        """What the model's forward samples: N per example, each within its length limit, at the
        temperature, with the greedy decode where the baseline needs it, as the model's ``plan`` says; the batch
        is refused first if its samples cannot fit in memory."""
        net_input, nsentences = sample["net_input"], sample["target"].size(0)
        max_positions = getattr(model, "max_decoder_positions", None)
        max_positions = max_positions() if max_positions else None
        limits = sample_limits(net_input, nsentences, self.cfg.max_sample_len, self.cfg.sample_len_ratio,
                               max_positions)
        if max_positions is not None and self.cfg.max_sample_len > max_positions and not self._capped_to_positions:
            logger.info(f"samples are cut at {max_positions} tokens, the decoder's positions "
                        f"(max_decoder_positions(), e.g. --max-target-positions), below --max-sample-len "
                        f"{self.cfg.max_sample_len}")
            self._capped_to_positions = True
        candidates = net_input.get("candidates")
        vocab = candidates.size(1) if candidates is not None else len(self.task.target_dictionary)
        if not (candidates is None and self.settings.full_softmax == "chunked"):  # (which holds no rows x T x |V|)
            check_memory(sample, limits, vocab, self.cfg.rl_samples)
        kind = BeamRequest if str(self.cfg.risk_candidates) == "beam" else SampleRequest
        return kind(limits, num_samples=self.cfg.rl_samples, greedy_too=self.baseline.needs_greedy,
                    temperature=self.cfg.sample_temperature, plan=plan, first=self.forced_first(sample))

    def forced_first(self, sample) -> Optional[torch.Tensor]:
        """Each example's forced first token where the task forces one (a multilingual task's target language
        token, as its decoding forces it), as the sampling loop takes it: its index in the row's candidates."""
        first = getattr(self.task, "first_tokens", None)
        first = first(sample) if first is not None else None
        candidates = sample["net_input"].get("candidates")
        if first is None or candidates is None:
            return first
        return candidate_positions(candidates, first.view(-1, 1).to(candidates), self.task.target_dictionary.unk()
                                   ).view(-1)

    @staticmethod
    def drawn_logs(samples):
        """What only drawn samples log (a beam's candidates have neither): greedy ones, entropy."""
        if samples.is_greedy is None:
            return {}
        return {"greedy_samples": samples.is_greedy.sum().item(), "entropy": samples.entropy.sum().item()}

    def check_temperature(self, samples):
        """The model's own distribution finite and the one divided by the temperature not: refused."""
        if self.cfg.sample_temperature != 1.0 and not torch.isfinite(samples.entropy).all() \
                and torch.isfinite(samples.lprobs).all():
            raise ValueError(f"--sample-temperature {self.cfg.sample_temperature} makes the logits divided by it "
                             "overflow (not finite), so every sample would be one word repeated: use a larger "
                             "temperature (e.g. >= 0.05)")

    def rewards(self, sample, samples, greedy, n: int, row_langs=None):
        """The reward of each of the B * N samples and, with ``greedy`` (B decodes), of each greedy decode,
        against its gold target (eos and pad left out), in one call of the reward: (B * N, B or None), and the
        tokens (pieces on subword data) of each sample and of its reference (B * N each: language tokens, eos
        and pad left out); a reward of the user's is told each row's target language, ``row_langs`` (None where the
        task has none)."""
        d = self.task.target_dictionary
        parts = [(samples, n)] + ([(greedy, 1)] if greedy is not None else [])
        width = max(part.tokens.size(1) for part, _ in parts)
        tokens = torch.cat([F.pad(part.tokens, (0, width - part.tokens.size(1)), value=d.pad()) for part, _ in parts])
        lengths = torch.cat([part.lengths for part, _ in parts])
        target = torch.cat([sample["target"].repeat_interleave(k, 0) for _, k in parts])
        not_words = getattr(self.task, "symbols_to_strip", None)  # a multilingual task's language tokens
        if not_words is not None:
            not_words = not_words()
            tokens, lengths = without_ids(tokens, not_words, d.pad(), lengths)
            target, _ = without_ids(target, not_words, d.pad())
        ref_lens = (target.ne(d.pad()) & target.ne(d.eos())).sum(1)
        given = {}
        if self.reward.wants_sources:
            sources = self.source_texts(sample)
            given["sources"] = None if sources is None else [text for _, k in parts for text in sources
                                                               for _ in range(k)]
            if row_langs is not None:
                given["target_lang"] = [lang for _, k in parts for lang in row_langs for _ in range(k)]
        values = self.reward(tokens, lengths, target, ref_lens, **given)
        rows = samples.tokens.size(0)
        return values[:rows], (values[rows:] if greedy is not None else None), (lengths[:rows], ref_lens[:rows])

    def source_texts(self, sample):
        """Each example's source sentence as text (the reward's post-processing; pad and eos left out), or None
        where the task has none (captioning)."""
        src, src_dict = sample["net_input"].get("src_tokens"), getattr(self.task, "source_dictionary", None)
        if src is None or src_dict is None or src.dtype not in (torch.long, torch.int):
            return None
        strip = getattr(self.task, "symbols_to_strip", None)  # a multilingual task's language tokens
        strip = strip() if strip is not None else None
        return [src_dict.string(row[row.ne(src_dict.pad())], self.cfg.reward_post_process,
                                extra_symbols_to_ignore=strip) for row in src.cpu()]

    def chunked_ce(self, model, sample) -> bool:
        """Whether the CE term is made from the decoder's states chunk by chunk (``output.chunked_ce``): the
        settings' full_softmax "chunked", a batch without candidates, a model the plugin restricted."""
        return (self.settings.full_softmax == "chunked" and sample["net_input"].get("candidates") is None
                and restricted_module(model) is not None)

    def ce_term(self, model, sample, net_output, from_features: bool = False):
        """L_c over the model's teacher-forced output (``objective.cross_entropy``), or ``from_features``,
        the decoder's states, by the chunked full softmax (the same loss)."""
        if from_features:
            weight, bias = model.output_weights()
            return full_cross_entropy(net_output[0], weight, bias, sample["target"], self.cfg.label_smoothing,
                                      self.padding_idx)
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        return objective.cross_entropy(lprobs, model.get_targets(sample, net_output), self.cfg.label_smoothing,
                                       self.padding_idx)

    logging_output = staticmethod(logs.batch_log)

    def plan(self, model, device):
        """The plan ``model`` runs this batch on ``device`` with the criterion's settings
        (``RestrictedModel.plan_on``: made once, when the model first meets the device with them, and kept on the
        model, so that its CE term, validation and decoding run it too); a new one is said in the log (what runs,
        and why a mode is off), with a warning for a CUDA-graph mode asked for where graphs cannot be captured.
        A mode not yet tested on a GPU is refused there.  None for a model no plugin task restricted."""
        restricted = restricted_module(model)
        if restricted is None:
            return None
        before = restricted.engine_plan
        plan = restricted.plan_on(device, self.settings)
        if plan is not before:
            logger.info(f"smallvocab_reinforce: on {device}, {plan.describe()}")
            for warning in plan.warnings:
                logger.warning(warning)
        return plan

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        logs.reduce(logging_outputs)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


# the criterion's first name (the reward is a flag; the recommended one is gleu_bp): old commands run unchanged
register_alias("criterion", "reinforce_gleu", "smallvocab_reinforce")
