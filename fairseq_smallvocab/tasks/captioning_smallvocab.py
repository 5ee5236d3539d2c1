"""Task ``captioning_smallvocab``: image captioning from precomputed image
features, with a small, input-specific target vocabulary in every batch.

Examples are (image feature f, caption).  A data folder holds

    dict.LANG.txt, {split}.LANG-None.LANG.{bin,idx}
        the captions, binarized target side only
        (fairseq-preprocess --only-source --source-lang LANG), one line each
    {split}.npy     float32 features, one row per image (memory-mapped)
    {split}.index   the image row of each caption, one number per line
                    (several captions per image); without it, caption i
                    belongs to row i

(``--features DIR`` reads the .npy and .index files from another folder.)
``scripts/prepare_captions.py`` writes such a folder from raw captions and
features (Kiros et al.'s files or the synthetic set of
``scripts/make_synthetic_captions.py``).

Everything else is ``translation_smallvocab``'s: candidates from
``--vocab-predictor`` (trained with ``--task vocab_prediction
--source-features DIR``) or ``--candidates-dir``, ``--small-vocab-size``
(0: the full softmax), ``--batch-splits``, decoding inside the predicted
vocabulary.  Validation BLEU (``--eval-bleu``) scores each hypothesis against
every caption of its image (multi-reference sacrebleu);
``--one-caption-per-image`` keeps one example per image outside the training
split, so that fairseq-generate decodes each image once
(``scripts/caption_bleu.py`` then scores its output against all captions).
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq import utils
from fairseq.tasks import register_task
from omegaconf import open_dict

from fairseq_smallvocab.candidates.dataset import CandidateDataset
from fairseq_smallvocab.data.binarized import load_binarized
from fairseq_smallvocab.data.caption_refs import multi_reference_bleu
from fairseq_smallvocab.data.datasets import (
    KeepLastBatchDataset,
    data_folder,
    feature_target_dataset,
    features_width,
    single_dictionary_lang,
    split_folder,
)
from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask

logger = logging.getLogger(__name__)

NOT_INTERACTIVE = ("captioning_smallvocab decodes image features from a data folder (fairseq-generate "
                   "--gen-subset SPLIT), not lines of text: fairseq-interactive cannot be used with it")


@dataclass
class CaptioningSmallVocabConfig(TranslationSmallVocabConfig):
    features: Optional[str] = field(
        default=None, metadata={"help": "folder of {split}.npy feature matrices (float32, one row per image) and "
                                        "{split}.index files (each caption's image row); default: the data folder"})
    feature_dim: Optional[int] = field(
        default=None, metadata={"help": "d_f, the image feature size (default: the feature files' width)"})
    one_caption_per_image: bool = field(
        default=False, metadata={"help": "outside the training split keep only each image's first caption: "
                                         "fairseq-generate decodes each image once"})


def caption_lang(cfg, path) -> str:
    """The captions' language suffix: --target-lang, else the folder's only dict.*.txt."""
    lang = cfg.target_lang or single_dictionary_lang(path)
    if lang is None:
        raise ValueError(f"cannot tell the captions' language in {path} (one dict.LANG.txt expected): "
                         "pass --target-lang")
    return lang


@register_task("captioning_smallvocab", dataclass=CaptioningSmallVocabConfig)
class CaptioningSmallVocabTask(TranslationSmallVocabTask):
    cfg: CaptioningSmallVocabConfig

    def __init__(self, cfg, tgt_dict):
        super().__init__(cfg, None, tgt_dict)
        self.features_dir = cfg.features or data_folder(cfg.data)
        self.candidates.predictor_overrides = {"source_features": self.features_dir}  # it reads image features

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        path = data_folder(cfg.data)
        cfg.target_lang = caption_lang(cfg, path)
        tgt_dict = cls.load_dictionary(os.path.join(path, f"dict.{cfg.target_lang}.txt"))
        if cfg.feature_dim is None:
            cfg.feature_dim = features_width(cfg.features or path, cfg.train_subset)
        logger.info(f"[{cfg.target_lang}] dictionary: {len(tgt_dict)} types; image features: {cfg.feature_dim}-d")
        return cls(cfg, tgt_dict)

    @property
    def feature_dim(self) -> int:
        return self.cfg.feature_dim

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        data_path = split_folder(self.cfg.data, split, self.cfg.train_subset, epoch)
        lang = self.cfg.target_lang
        prefix = os.path.join(data_path, f"{split}.{lang}-None.{lang}")
        captions = load_binarized(prefix, self.tgt_dict, self.cfg.dataset_impl)
        if captions is None:
            raise FileNotFoundError(f"no binarized '{split}' captions ({prefix}.bin/.idx); binarize them with "
                                    f"fairseq-preprocess --only-source --source-lang {lang} or "
                                    "scripts/prepare_captions.py")
        train = split == self.cfg.train_subset
        dataset = feature_target_dataset(self.features_dir, split, captions, self.tgt_dict, dim=self.feature_dim,
                                         shuffle=split != "test", decoder_input=True, references=not train,
                                         one_per_image=self.cfg.one_caption_per_image and not train)
        logger.info(f"{data_path} {split} {lang} {len(dataset)} examples ({len(captions)} captions, "
                    f"{len(np.unique(dataset.row_of))} images)")
        if not self.small_vocab:
            self.datasets[split] = KeepLastBatchDataset(dataset)
            return
        # one list per caption; the dataset may serve a subset (--one-caption-per-image)
        rows = self.candidates.split_rows(split, dataset, len(captions), examples=dataset.examples)
        self.datasets[split] = CandidateDataset(dataset, rows)

    def build_model(self, cfg, from_checkpoint=False):
        saved = getattr(cfg, "feature_dim", None)
        if from_checkpoint and saved and int(saved) != int(self.feature_dim):
            raise ValueError(f"the model was trained on {saved}-d image features, but the features in "
                             f"{self.features_dir} are {self.feature_dim}-d: decode with features from the same "
                             "extractor as the training data")
        if not from_checkpoint and hasattr(cfg, "feature_dim"):
            with open_dict(cfg):
                cfg.feature_dim = int(self.feature_dim)
        return super().build_model(cfg, from_checkpoint)

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        # fairseq-interactive's first use of an input line: refuse before it encodes the line with a source
        # dictionary, which captions lack
        raise NotImplementedError(NOT_INTERACTIVE)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        raise NotImplementedError(NOT_INTERACTIVE)

    def max_positions(self):
        return self.cfg.max_target_positions

    @property
    def source_dictionary(self):
        return None

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        if getattr(args, "max_len_a", 0):
            raise ValueError("an image has no source length: limit captions with --max-len-b, not --max-len-a")
        return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)

    def _inference_with_bleu(self, generator, sample, model):
        """sacrebleu over the batch, each hypothesis against every caption of
        its image (the batch's ``references``)."""
        def decode(toks, escape_unk=False):
            text = self.tgt_dict.string(toks.int().cpu(), self.cfg.eval_bleu_remove_bpe,
                                        unk_string="UNKNOWNTOKENINREF" if escape_unk else "UNKNOWNTOKENINHYP")
            return self.tokenizer.decode(text) if self.tokenizer else text

        gen_out = self.inference_step(generator, [model], sample, prefix_tokens=None)
        hyps = [decode(out[0]["tokens"]) for out in gen_out]
        refs = [[decode(utils.strip_pad(r, self.tgt_dict.pad()), escape_unk=True) for r in refs]
                for refs in sample["references"]]
        if self.cfg.eval_bleu_print_samples:
            logger.info("example hypothesis: " + hyps[0])
            logger.info("example references: " + " | ".join(refs[0]))
        return multi_reference_bleu(hyps, refs, tokenize="none" if self.cfg.eval_tokenized_bleu else "13a")
