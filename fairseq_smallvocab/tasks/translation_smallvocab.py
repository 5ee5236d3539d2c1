"""Task ``translation_smallvocab``: fairseq's ``translation`` with a small,
input-specific target vocabulary in every batch.

Each batch carries ``net_input["candidates"]``, a B x K matrix of target ids
per example, built from the vocabulary predictor's lists: fairseq's special
symbols first, at their own ids (positions 0..3 = bos, pad, eos, unk), then the
example's predicted words.  Training lists hold every gold word (the
predictor's top K plus the gold indicator; lists cut to a smaller K are
checked to keep them); valid/test lists are the predicted top K.
Any fairseq encoder-decoder with a linear output layer and an incremental
decoder (``transformer`` and its variants, fairseq's ``lstm``, the plugin's
``lstm_smallvocab``) is restricted at build time (``models.restricted``) and
then scores only those K words; its state-dict keys stay the stock ones, so
checkpoints of the stock ``translation`` task fine-tune here and checkpoints
written here decode with stock fairseq.  fairseq's ``cross_entropy`` /
``label_smoothed_cross_entropy`` work unchanged (the model maps gold ids into
candidate space; label smoothing then spreads over the K candidates).

Candidates come from ``--candidates-dir`` (lists exported by
``scripts/export_candidates.py``) or ``--vocab-predictor`` (computed once per
split and K and cached on disk in ``--candidates-dir``, by default the
predictor's folder/candidates, keyed by the predictor's SHA-256).  Either
way the lists must have been made from this very split: their file records a
digest of the split's content (``candidates.split_digest``), checked on load.
``--small-vocab-size 0`` (or K >= |V|) trains the same model with the full
softmax.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, DictConfig, open_dict

from fairseq_smallvocab.candidates.dataset import CandidateDataset
from fairseq_smallvocab.candidates.fit import log_fit, reference_outside
from fairseq_smallvocab.candidates.source import CandidateSource
from fairseq_smallvocab.candidates.space import default_small_vocab_size
from fairseq_smallvocab.compat.precision import check_training_precision
from fairseq_smallvocab.data.binarized import check_langpair
from fairseq_smallvocab.data.datasets import KeepLastBatchDataset, data_folder, dictionary_fingerprint, split_folder
from fairseq_smallvocab.data.subwords import eval_bleu_scores_pieces
from fairseq_smallvocab.models.generation import (
    SmallVocabSequenceGenerator,
    check_decoding_args,
    refuse_outside_candidates,
)
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.tasks.task_state import SmallVocabTaskState

logger = logging.getLogger(__name__)


@dataclass
class TranslationSmallVocabConfig(TranslationConfig):
    vocab_predictor: Optional[str] = field(
        default=None, metadata={"help": "vocab_predictor checkpoint whose predictions give each example's "
                                        "candidates (computed once per split and cached)"})
    candidates_dir: Optional[str] = field(
        default=None, metadata={"help": "folder of candidate lists ({split}.kK.npy from "
                                        "scripts/export_candidates.py); with --vocab-predictor, the cache folder"})
    small_vocab_size: Optional[int] = field(
        default=None, metadata={"help": "K, candidates per example including the special symbols (default: "
                                        "1000 when |V| > 10,000, else 500; 0: full softmax)"})
    allow_gold_candidates: bool = field(
        default=False, metadata={"help": "accept exported candidate lists with the gold words forced in "
                                         "(export_candidates.py --gold always) for evaluated splits: validation, "
                                         "test, any split a loaded model decodes; their scores are then optimistic "
                                         "(a warning says so)"})
    batch_splits: int = field(
        default=1, metadata={"help": "S: sort each training batch by length and run forward and backward on S "
                                     "chunks, accumulating the gradients before one update (less memory)"})
    # fairseq's own flags, read here to refuse them early where they cannot work (no help: no new option)
    fp16: bool = II("common.fp16")
    bf16: bool = II("common.bf16")


def split_batch(sample, splits: int, pad: int):
    """Yield ``splits`` sub-batches of a collated translation batch: examples
    sorted by target length, tensors indexed per example, and the columns that
    hold only padding trimmed (source padding may be on either side)."""
    target = sample["target"]
    order = target.ne(pad).sum(1).argsort(descending=True, stable=True)
    for idx in order.chunk(splits):
        net = sample["net_input"]
        part = {key: value[idx] if torch.is_tensor(value) and value.dim() and value.size(0) == len(order)
                else value for key, value in net.items()}
        src = part["src_tokens"]
        part["src_tokens"] = src[:, src.ne(pad).any(0)]
        tgt = target[idx]
        cols = tgt.ne(pad).any(0)
        if "prev_output_tokens" in part:
            part["prev_output_tokens"] = part["prev_output_tokens"][:, cols]
        tgt = tgt[:, cols]
        yield {"id": sample["id"][idx], "nsentences": len(idx), "ntokens": int(tgt.ne(pad).sum()),
               "net_input": part, "target": tgt}


TRAINED_K = "trained_small_vocab_size"  # the K a model was trained with, in its config (0: the full softmax)


@register_task("translation_smallvocab", dataclass=TranslationSmallVocabConfig)
class TranslationSmallVocabTask(SmallVocabTaskState, TranslationTask):
    cfg: TranslationSmallVocabConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        k = self._checked_k(cfg.small_vocab_size if cfg.small_vocab_size is not None
                            else default_small_vocab_size(len(tgt_dict)), given=cfg.small_vocab_size is not None)
        self.k = k
        if cfg.batch_splits < 1:
            raise ValueError(f"--batch-splits must be >= 1, got {cfg.batch_splits}")
        # where the candidates come from; the predictor reads source sentences here (one trained on image
        # features is refused)
        self.candidates = CandidateSource(cfg, k, tgt_dict, predictor_overrides={"source_features": None})
        self.init_state()

    def _checked_k(self, k: int, given: bool = True) -> int:
        """``k`` checked; a K of |V| or more is the full softmax (warned where --small-vocab-size gave it; the
        paper's rule's, which a checkpoint's trained K replaces when decoding, only logged)."""
        vocab, nspecial = len(self.tgt_dict), self.tgt_dict.nspecial
        if k < 0:
            raise ValueError(f"--small-vocab-size must be >= 0, got {k}")
        if 0 < k <= nspecial:
            raise ValueError(f"--small-vocab-size {k} leaves no room for words beside the {nspecial} special symbols")
        if k >= vocab:
            if given:
                logger.warning(f"--small-vocab-size {k} >= the target vocabulary ({vocab}): using the full softmax")
            else:
                logger.info(f"no --small-vocab-size: the paper's rule's K = {k} is the target vocabulary ({vocab}) "
                            "or more, so the full softmax (decoding: unless the checkpoint was trained with a K)")
            k = 0
        return k

    def _decode_at_trained_k(self, model_cfg):
        """Decoding without --small-vocab-size: the K the checkpoint was trained with (recorded in its model
        config; checkpoints written before it was recorded keep the paper's rule)."""
        trained = getattr(model_cfg, TRAINED_K, None)  # (as check_dictionaries and loaded_model read theirs)
        if self.cfg.small_vocab_size is None and trained is not None and int(trained) != self.k:
            self.k = self.candidates.k = self._checked_k(int(trained))
            logger.info(f"K = {self.k}, the K the checkpoint was trained with (--small-vocab-size to decode at "
                        "another)")

    @property
    def small_vocab(self) -> bool:
        return self.k > 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        cfg = self.cfg
        check_langpair(split_folder(cfg.data, split, cfg.train_subset, epoch), split, cfg.source_lang, self.src_dict,
                       cfg.target_lang, self.tgt_dict, combine, cfg.dataset_impl)
        super().load_dataset(split, epoch, combine, **kwargs)
        dataset = self.datasets[split]
        if not self.small_vocab:
            self.datasets[split] = KeepLastBatchDataset(dataset)
            return
        rows = self.candidates.split_rows(split, dataset, len(dataset))
        if not self.candidates.trains_on(split) and getattr(dataset, "tgt", None) is not None:
            # K, |V|, the references it leaves out
            log_fit(split, self.k, len(self.tgt_dict), *reference_outside(rows, dataset.tgt, self.tgt_dict))
        self.datasets[split] = CandidateDataset(dataset, rows)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        data_folder(cfg.data)  # refuses a missing one
        return super().setup_task(cfg, **kwargs)

    def build_model(self, cfg, from_checkpoint=False):
        # a new model is built by fairseq-train; decoding builds from a checkpoint (and works in half precision
        # on the CPU), but fairseq's trainer fails where the flags cannot work: refuse before it does
        if not from_checkpoint:
            check_training_precision(self.cfg)
            if self.cfg.eval_bleu and (pieces := eval_bleu_scores_pieces(self.target_dictionary,
                                                                          self.cfg.eval_bleu_remove_bpe)):
                logger.warning(pieces)
        if from_checkpoint:  # decoding: the predictor behind the training candidates and its K, unless given
            self.check_dictionaries(cfg)
            self.candidates.loaded_model(cfg)
            self._decode_at_trained_k(cfg)
        else:  # training: record them and the dictionaries in the model's config (saved with every checkpoint)
            path = self.candidates.predictor_to_record()
            recorded = {"vocab_predictor": os.path.abspath(path) if path else None, TRAINED_K: self.k,
                        **{key: dictionary_fingerprint(d) if d is not None else None
                           for key, d in self._dictionaries()}}
            if isinstance(cfg, DictConfig):
                with open_dict(cfg):
                    for key, value in recorded.items():
                        cfg[key] = value
            else:  # the argparse Namespace of a legacy arch (transformer, lstm): saved with the checkpoint too
                for key, value in recorded.items():
                    setattr(cfg, key, value)
        model = super().build_model(cfg, from_checkpoint)
        if from_checkpoint:  # the source positions of the model that decodes (fairseq-interactive's long lines)
            positions = model.max_positions()
            positions = positions[0] if isinstance(positions, tuple) else positions
            self.decoding_source_positions = min(int(self.cfg.max_source_positions), int(positions or 1 << 62))
        # the same restricted model for the small vocabulary and the full softmax (candidates=None)
        return restrict(model, getattr(cfg, "_name", None) or getattr(cfg, "arch", None))

    def _dictionaries(self):
        """(model config field, dictionary) of the fingerprints recorded in what the plugin trains."""
        return (("source_dict_fingerprint", self.source_dictionary),
                ("target_dict_fingerprint", self.target_dictionary))

    def check_dictionaries(self, cfg):
        """Refuse to decode with dictionaries other than the model's (same
        size, other words or order: stock fairseq decodes garbage without a
        word).  Models trained before the fingerprints were recorded, or
        without the plugin, have none to check."""
        for key, dictionary in self._dictionaries():
            saved = getattr(cfg, key, None)
            if saved is None or dictionary is None or int(saved) == dictionary_fingerprint(dictionary):
                continue
            side = key.split("_")[0]
            lang = self.cfg.source_lang if side == "source" else self.cfg.target_lang
            path = os.path.join(data_folder(self.cfg.data), f"dict.{lang}.txt")
            raise ValueError(
                f"the model was trained with another {side} dictionary than {path} ({len(dictionary)} entries, "
                "other words or another order), so its word ids would be read as other words: decode with the "
                f"data folder the model was trained on, or binarize the data with fairseq-preprocess "
                f"--{'src' if side == 'source' else 'tgt'}dict pointing to the model's dictionary")

    # -- decoding --------------------------------------------------------------------------------

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive's lines as token ids; a line longer than the model's source positions (which
        ended the whole session, fairseq refusing the batch) is cut to its first tokens, said in the log."""
        tokens, lengths = super().get_interactive_tokens_and_lengths(lines, encode_fn)
        limit = getattr(self, "decoding_source_positions", None)  # (set when the model was built to decode)
        for i, line in enumerate(tokens if limit is not None else ()):
            if len(line) > limit:
                logger.warning(f"an input line of {len(line) - 1} tokens ({lines[i][:60]!r}...) is longer than the "
                               f"model's {limit} source positions: translating its first {limit - 1} tokens (split "
                               "longer lines into sentences before translating them)")
                tokens[i] = torch.cat([line[:limit - 1], line[-1:]])
                lengths[i] = limit
        return tokens, lengths

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """fairseq's generator, decoding inside each example's candidates
        (used by fairseq-generate, fairseq-interactive and --eval-bleu)."""
        check_decoding_args(args)
        if not self.small_vocab or seq_gen_cls is not None:
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                           prefix_allowed_tokens_fn)
        refuse_outside_candidates(args)
        return super().build_generator(models, args, seq_gen_cls=SmallVocabSequenceGenerator,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                       prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's decoding; a batch of raw input (fairseq-interactive, the
        hub interface) gets each line's candidates predicted here, because
        fairseq-interactive hands over only src_tokens and src_lengths of its
        batches (candidates attached to them would never reach the generator,
        which would then decode with the full softmax); an input without
        words (an empty line) gets an empty translation."""
        net = sample["net_input"]
        if self.small_vocab and "candidates" not in net and "src_tokens" in net:
            net["candidates"] = self.candidates.inference_rows(net["src_tokens"])
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        if "src_tokens" not in sample["net_input"]:  # image features
            return hypos
        src = sample["net_input"]["src_tokens"]
        words = (src.ne(self.src_dict.pad()) & src.ne(self.src_dict.eos())).sum(1)
        for i in words.eq(0).nonzero().view(-1).tolist():
            for hypo in hypos[i]:
                hypo["tokens"] = hypo["tokens"].new_tensor([self.tgt_dict.eos()])
                hypo["positional_scores"] = hypo["positional_scores"][-1:] * 0
                hypo["score"] = hypo["score"] * 0
                if hypo.get("attention") is not None:
                    hypo["attention"] = hypo["attention"][:, -1:]
                if hypo.get("alignment") is not None:
                    hypo["alignment"] = hypo["alignment"][:0]
        return hypos

    # -- training ----------------------------------------------------------------------------------

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """With --batch-splits S > 1: forward and backward on S length-sorted
        chunks; fairseq's criteria return summed losses, so the accumulated
        gradient equals the whole batch's (before the trainer normalizes it)."""
        if self.cfg.batch_splits <= 1 or sample["target"].size(0) <= 1:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        total_loss, total_size, logs = 0.0, 0, []
        for chunk in split_batch(sample, self.cfg.batch_splits, self.tgt_dict.pad()):
            loss, size, log = super().train_step(chunk, model, criterion, optimizer, update_num, ignore_grad)
            total_loss, total_size = total_loss + loss.detach(), total_size + size
            logs.append(log)
        merged = {key: sum(log[key] for log in logs) for key in logs[0]}
        return total_loss, total_size, merged
