"""What the plugin's translation tasks share (``translation_smallvocab``,
``captioning_smallvocab`` and ``translation_multi_smallvocab``): state saved
with checkpoints beside the model (smallvocab_reinforce's learned baseline), the
refusal to save after a run of non-finite batches, and the share of gold
target words outside the candidates in validation (``gold_outside_cands``)."""

import logging
import math

from fairseq import metrics

from fairseq_smallvocab import compat
from fairseq_smallvocab.candidates.space import gold_outside_candidates

logger = logging.getLogger(__name__)


class SmallVocabTaskState:
    """Mixin of a fairseq task (before it in the bases); ``__init__`` of the
    task calls ``init_state()``."""

    def init_state(self):
        if not compat.installed("task_state"):  # nothing calls the methods below around fairseq's saving
            logger.warning(f"{compat.ENV} leaves out task_state: this task's own state (smallvocab_reinforce's "
                           "learned baseline) is not saved with the checkpoints, so a resumed run starts a fresh one, "
                           "and a stretch of non-finite batches no longer stops the run before it saves. Leave "
                           "task_state in to keep both.")
        self._checkpoint_parts = {}  # name -> module whose state_dict travels with checkpoints
        self._finite_count = [0, 0]  # training batches skipped as non-finite, finite ones (check_before_save)
        # --eval-bleu's output and reference lengths since the last validation, and its outputs' words that match a
        # reference word (sacrebleu's unigram counts) out of their words
        self._bleu_lens = [0.0, 0.0, 0.0, 0.0]

    # -- state saved with checkpoints ------------------------------------------------------------

    def add_checkpoint_state(self, name, module):
        """Save ``module.state_dict()`` in every checkpoint and restore it when
        training resumes from one (``compat.train_checkpoints``'s task_state: in
        ``extra_state[TaskClass]``, on every fairseq 0.12): for state that is
        neither the model's nor a parameter of the criterion (smallvocab_reinforce's
        learned baseline).  Fine-tuning from another checkpoint
        (--finetune-from-model, --reset-dataloader) starts it afresh, as
        fairseq does.  Where ``SMALLVOCAB_COMPAT`` leaves the ``task_state`` patch out, nothing saves it
        (``init_state`` says so)."""
        self._checkpoint_parts[name] = module

    def checkpoint_state(self):
        return {name: m.state_dict() for name, m in self._checkpoint_parts.items()}

    def restore_checkpoint_state(self, state):
        for name, module in self._checkpoint_parts.items():
            if name in state:
                module.load_state_dict(state[name])
                logger.info(f"restored {name} from the checkpoint")
            else:
                logger.info(f"the checkpoint holds no {name}; starting a fresh one")
        for name in state:
            if name not in self._checkpoint_parts:  # e.g. a learned baseline's run resumed with --rl-baseline loo
                logger.warning(f"the checkpoint holds {name}, which this run does not use (its settings differ "
                               "from the run that saved it): not restored, and the next checkpoint will not hold it")

    def check_before_save(self):
        """Refuse to save when every training batch since the last checkpoint
        was skipped as non-finite (``smallvocab_reinforce`` counts them): the model
        learned nothing, its weights may be NaN, and saving would replace good
        checkpoints (fairseq would even take the placeholder loss -1 of an
        epoch without a loss as the best score)."""
        skipped, finite = self._finite_count
        self._finite_count = [0, 0]
        if skipped and not finite:
            raise FloatingPointError(
                f"every training batch since the last checkpoint ({skipped:g}) was skipped because its reward or "
                "loss was not finite (the log's 'nonfinite' count), so training stops without saving: the "
                "checkpoints in --save-dir keep the last good state. Resume from them with a smaller --lr (or "
                "--clip-norm), and check the data and the model's weights.")

    # -- metrics ---------------------------------------------------------------------------------

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        candidates = sample["net_input"].get("candidates")
        if candidates is not None:
            tokens, outside = gold_outside_candidates(candidates, sample["target"], self.target_dictionary)
            logging_output["cand_tokens"], logging_output["cand_outside"] = tokens, outside
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if getattr(criterion, "training", False) and logging_outputs and "nonfinite" in logging_outputs[0]:
            # the workers' summed logs: every worker counts alike
            self._finite_count[0] += float(sum(log["nonfinite"] for log in logging_outputs))
            self._finite_count[1] += float(sum(log.get("finite_sentences", 0) for log in logging_outputs))
        # float(): in distributed runs fairseq hands over the workers' sums as tensors, which round() refuses
        tokens = float(sum(log.get("cand_tokens", 0) for log in logging_outputs))
        if tokens:
            metrics.log_scalar_sum("_cand_tokens", tokens)
            metrics.log_scalar_sum("_cand_outside", float(sum(log.get("cand_outside", 0) for log in logging_outputs)))
            # the share (%) of gold target tokens outside the example's candidates
            metrics.log_derived("gold_outside_cands", lambda m: round(
                100.0 * m["_cand_outside"].sum / m["_cand_tokens"].sum, 3))
        if getattr(getattr(self, "cfg", None), "eval_bleu", False) and \
                float(sum(log.get("_bleu_ref_len", 0) for log in logging_outputs)):
            # the length ratio behind --eval-bleu's BLEU (its decodes' words over the references'): below 1 the
            # brevity penalty takes BLEU down, the first sign of a model that has learned to write short
            metrics.log_derived("bleu_len_ratio", _bleu_len_ratio)
            for i, key in enumerate(("_bleu_sys_len", "_bleu_ref_len", "_bleu_counts_0", "_bleu_totals_0")):
                self._bleu_lens[i] += float(sum(log.get(key, 0) for log in logging_outputs))

    def report_validation(self):
        """After a validation (fairseq saves, or would, right after one): warn when --eval-bleu's outputs were
        far shorter or longer than the references over the whole validation set, which its BLEU alone hides; not
        while most of their words match no reference word (a model not yet trained, as at a CE run's first
        validations: its length is no habit a length penalty or reward would fix)."""
        (out, ref, matched, words), self._bleu_lens = self._bleu_lens, [0.0, 0.0, 0.0, 0.0]
        untrained = words > 0 and matched / words < UNTRAINED
        if ref and not untrained and (warning := length_warning(out / ref)):
            logger.warning(warning)


def _bleu_len_ratio(meters) -> float:
    """--eval-bleu's hypothesis length over its reference length (fairseq's summed meters)."""
    if "_bleu_ref_len" not in meters or not meters["_bleu_ref_len"].sum:
        return 0.0
    return round(float(meters["_bleu_sys_len"].sum) / float(meters["_bleu_ref_len"].sum), 3)


# the --eval-bleu length ratios outside which the log warns: below, BLEU's brevity penalty takes 5% or more off
# (exp(1 - 1 / 0.95) = 0.949); above, outputs a tenth longer than the references
SHORT, LONG = 0.95, 1.1
UNTRAINED = 0.2  # below this share of output words matching a reference word, the length is not yet warned about


def length_warning(ratio: float):
    """The warning for a validation length ratio (outputs' words over the references'), or None."""
    if ratio < SHORT:
        return (f"validation: --eval-bleu's outputs are {ratio:.3f} times as long as the references (bleu_len_ratio),"
                f" so BLEU's brevity penalty takes {100 * (1 - math.exp(1 - 1 / max(ratio, 1e-9))):.0f}% off: the "
                "model writes short; decode with a length penalty chosen on dev (scripts/sweep_lenpen.py), or reward "
                "length (--reward gleu_bp)")
    if ratio > LONG:
        return (f"validation: --eval-bleu's outputs are {ratio:.3f} times as long as the references (bleu_len_ratio):"
                " the model writes long (repeated words, or no end of sentence before the length limit); look at "
                "them with --eval-bleu-print-samples, and check the reward's length (len_ratio) and max_len_a/b in "
                "--eval-bleu-args")
    return None
