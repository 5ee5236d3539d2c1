"""Task ``vocab_prediction``: learn which target words an input's output uses.

Reads the binarized data of fairseq's ``translation`` task (fairseq-preprocess
output).  The input is the bag of source words, or with ``--source-features
DIR`` an image feature vector (``DIR/{split}.npy``: float32, one row per
image, with ``DIR/{split}.index`` giving each caption's image row when several
captions share an image, as the captioning task reads them); the label is
the set of words in the gold target (eos included, pad and bos never).  Train with the ``vocab_predictor`` arch and the
``vocab_prediction_bce`` criterion, which logs recall@K on validation.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.data import data_utils, indexed_dataset
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation import load_langpair_dataset
from omegaconf import II

from fairseq_smallvocab.compat.precision import check_training_precision
from fairseq_smallvocab.data.binarized import check_langpair, load_binarized
from fairseq_smallvocab.data.datasets import (
    KeepLastBatchDataset,
    data_folder,
    feature_target_dataset,
    features_width,
    single_dictionary_lang,
    split_folder,
    token_stream,
)
from fairseq_smallvocab.predictor.scoring import document_frequency, versus_frequency

logger = logging.getLogger(__name__)


@dataclass
class VocabPredictionConfig(FairseqDataclass):
    data: Optional[str] = field(default=None, metadata={"help": "fairseq-preprocess output folder"})
    source_lang: Optional[str] = field(default=None, metadata={"help": "source language",
                                                               "argparse_alias": "-s"})
    target_lang: Optional[str] = field(default=None, metadata={"help": "target language",
                                                               "argparse_alias": "-t"})
    source_features: Optional[str] = field(
        default=None, metadata={"help": "folder of {split}.npy image-feature matrices (float32, one row per "
                                        "image; {split}.index: each caption's row) to read instead of source "
                                        "sentences"})
    feature_dim: Optional[int] = field(
        default=None, metadata={"help": "d_f, the image feature dimension (default: the feature files' width)"})
    max_source_positions: int = field(default=1024, metadata={"help": "longest source kept"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest target kept"})
    train_subset: str = II("dataset.train_subset")
    dataset_impl: Optional[ChoiceEnum(indexed_dataset.get_available_dataset_impl())] = II(
        "dataset.dataset_impl")
    fp16: bool = II("common.fp16")  # (read to refuse training in a precision fairseq 0.12 cannot train in)
    bf16: bool = II("common.bf16")


@register_task("vocab_prediction", dataclass=VocabPredictionConfig)
class VocabPredictionTask(FairseqTask):
    cfg: VocabPredictionConfig

    def __init__(self, cfg: VocabPredictionConfig, src_dict, tgt_dict):
        super().__init__(cfg)
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict
        self._recall = {}  # K -> [the predictor's hits, the frequency list's, gold tokens] since the last validation

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        for key in {key for log in logging_outputs for key in log if key.startswith("recall_hits_")}:
            k = int(key.rsplit("_", 1)[1])
            sums = self._recall.setdefault(k, [0.0, 0.0, 0.0])
            for i, name in enumerate((key, f"freq_{key}", "recall_tokens")):
                sums[i] += float(sum(log.get(name, 0) for log in logging_outputs))

    def report_validation(self):
        """After a validation (fairseq saves, or would, right after one): warn where the predictor's recall@K
        over the whole validation set is not above the frequency list's, which any input gets for free."""
        recall, self._recall = self._recall, {}
        behind = [(k, 100 * hits / tokens, 100 * freq / tokens)
                  for k, (hits, freq, tokens) in sorted(recall.items()) if tokens and hits <= freq]
        behind = [f"recall@{k} {ours:.2f}% is {versus_frequency(ours, theirs)}" for k, ours, theirs in behind]
        if behind:
            logger.warning(f"validation: the predictor is not above the frequency list ({'; '.join(behind)}): "
                           "usual in its first epochs, but a predictor that stays there gives candidates no "
                           "better than the most frequent words for every input: train it longer (--max-epoch), "
                           "or with the quick start's settings (--optimizer adagrad --lr 0.08 --weight-decay 1e-6 "
                           "--clip-norm 1.0, the best checkpoint by recall@K)")

    @classmethod
    def setup_task(cls, cfg: VocabPredictionConfig, **kwargs):
        path = data_folder(cfg.data)
        if cfg.source_features is not None and cfg.target_lang is None:
            cfg.target_lang = single_dictionary_lang(path)
        if cfg.source_lang is None or cfg.target_lang is None:
            src, tgt = data_utils.infer_language_pair(path)
            cfg.source_lang = cfg.source_lang or src
            cfg.target_lang = cfg.target_lang or tgt
        if cfg.source_features is not None and cfg.feature_dim is None:
            cfg.feature_dim = features_width(cfg.source_features, cfg.train_subset)
        if cfg.target_lang is None:
            raise ValueError(f"cannot infer the target language in {path}; pass --target-lang")
        tgt_dict = cls.load_dictionary(os.path.join(path, f"dict.{cfg.target_lang}.txt"))
        src_dict = None
        if cfg.source_features is None:
            if cfg.source_lang is None:
                raise ValueError(f"cannot infer the source language in {path}; pass --source-lang")
            src_dict = cls.load_dictionary(os.path.join(path, f"dict.{cfg.source_lang}.txt"))
        return cls(cfg, src_dict, tgt_dict)

    @property
    def uses_features(self):
        return self.cfg.source_features is not None

    @property
    def feature_dim(self):
        return self.cfg.feature_dim

    def _data_path(self, split, epoch=1):
        return split_folder(self.cfg.data, split, self.cfg.train_subset, epoch)

    def _load_targets(self, data_path, split):
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        for prefix in (f"{split}.{src}-{tgt}.{tgt}", f"{split}.{tgt}-None.{tgt}"):
            ds = load_binarized(os.path.join(data_path, prefix), self.tgt_dict, self.cfg.dataset_impl)
            if ds is not None:
                return ds
        raise FileNotFoundError(f"no binarized '{split}' target data ({tgt}) in {data_path}")

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        data_path = self._data_path(split, epoch)
        if self.uses_features:
            tgt = self._load_targets(data_path, split)
            dataset = feature_target_dataset(self.cfg.source_features, split, tgt, self.tgt_dict,
                                             dim=self.cfg.feature_dim, shuffle=split != "test")
        else:
            check_langpair(data_path, split, self.cfg.source_lang, self.src_dict, self.cfg.target_lang, self.tgt_dict,
                           combine, self.cfg.dataset_impl)
            dataset = load_langpair_dataset(
                data_path, split, self.cfg.source_lang, self.src_dict, self.cfg.target_lang, self.tgt_dict,
                combine=combine, dataset_impl=self.cfg.dataset_impl, upsample_primary=1,
                left_pad_source=True, left_pad_target=False,
                max_source_positions=self.cfg.max_source_positions,
                max_target_positions=self.cfg.max_target_positions, shuffle=split != "test")
        self.datasets[split] = KeepLastBatchDataset(dataset)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        from fairseq.data import LanguagePairDataset

        return LanguagePairDataset(src_tokens, src_lengths, self.source_dictionary, tgt_dict=self.tgt_dict)

    def training_targets(self):
        """The training split's binarized target sentences."""
        return self._load_targets(self._data_path(self.cfg.train_subset), self.cfg.train_subset)

    def compute_prior(self):
        """p(i) over the training split's targets (see vocab.document_frequency)."""
        targets = self.training_targets()
        d = self.tgt_dict
        return document_frequency(token_stream(targets), targets.sizes, len(d), ignore=(d.pad(), d.bos()))

    def build_model(self, cfg, from_checkpoint=False):
        if not from_checkpoint:  # fairseq-train: refuse a precision its trainer cannot train in
            check_training_precision(self.cfg)
        model = super().build_model(cfg, from_checkpoint)
        # The prior is part of the model: a new model gets it from the
        # training data; a loaded one has it in its checkpoint.
        if not from_checkpoint:
            model.set_prior(self.compute_prior())
        return model

    def max_positions(self):
        if self.uses_features:
            return self.cfg.max_target_positions
        return (self.cfg.max_source_positions, self.cfg.max_target_positions)

    @property
    def source_dictionary(self):
        return self.src_dict

    @property
    def target_dictionary(self):
        return self.tgt_dict
