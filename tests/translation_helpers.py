"""What the translation_smallvocab tests share: a task made in-process (``mt_task``), a split's
candidate lists written as scripts/export_candidates.py writes them (``write_lists``), a tiny
lstm_smallvocab config (``model_cfg``), a data folder whose test split is reordered (``reordered_copy``)
and fairseq-train's flags for a tiny run (``MT_TRAIN``)."""

import numpy as np
from helpers import USER_DIR

from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask

MT_TRAIN = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab",
            "--embed-dim", "16", "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.5",
            "--clip-norm", "1.0", "--batch-size", "32", "--max-epoch", "1", "--cpu", "--no-progress-bar",
            "--log-format", "simple", "--num-workers", "0", "--no-save"]


def mt_task(data, **cfg):
    config = TranslationSmallVocabConfig(data=str(data), **cfg)
    config.train_subset, config.dataset_impl, config.required_seq_len_multiple = "train", None, 1
    return TranslationSmallVocabTask.setup_task(config)


def write_lists(data, split, folder, k=60, gold=None, predictor="/elsewhere/vp/checkpoint_best.pt", edit=None):
    """A split's lists as scripts/export_candidates.py writes them, made in-process without a predictor:
    <unk>, the example's gold words (``gold``; default: for the training split), then other words;
    ``edit(ids, tgt_dict)`` may change them before they are written."""
    import os

    from fairseq_smallvocab.data.datasets import dictionary_fingerprint
    from fairseq_smallvocab.predictor.lists import candidate_file, split_digest, write_candidates

    full = mt_task(data, small_vocab_size=0)
    full.load_dataset(split)
    ds, d = full.dataset(split), full.target_dictionary
    gold = np.full(len(ds), split == "train" if gold is None else gold)  # or a mask: which examples get them
    rng = np.random.default_rng(0)
    lists = []
    for i in range(len(ds)):
        words = [t for t in dict.fromkeys(ds[i]["target"].tolist()) if t >= d.nspecial] if gold[i] else []
        rest = [t for t in rng.permutation(len(d)).tolist() if t >= d.nspecial and t not in words]
        lists.append([d.unk(), *words, *rest][:k])
    ids = np.array(lists, dtype=np.uint16)
    if edit is not None:
        edit(ids, d)
    meta = {"split": split, "vocab_size": len(d), "target_dict_hash": dictionary_fingerprint(d),
            "data": os.path.abspath(str(data)), "data_sha256": split_digest(ds), "predictor": predictor,
            "predictor_sha256": "0" * 64, "gold_included": bool(gold.any()), "always_included": [d.unk()]}
    return write_candidates(candidate_file(folder, split, k), ids, meta)


def model_cfg():
    """A tiny lstm_smallvocab config, as fairseq hands it to the task's build_model."""
    from omegaconf import OmegaConf

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig

    cfg = OmegaConf.structured(LSTMSmallVocabConfig(embed_dim=12))
    cfg._name = "lstm_smallvocab"
    return cfg


def reordered_copy(src_folder, dest):
    """A copy of a data folder whose test split holds the same sentence pairs in reverse order: the
    same dictionaries and sizes, other sentences at every index."""
    import shutil

    from fairseq.data import data_utils, indexed_dataset

    shutil.copytree(src_folder, dest)
    for lang in ("src", "tgt"):
        prefix = str(src_folder / f"test.src-tgt.{lang}")
        ds = data_utils.load_indexed_dataset(prefix, None)
        out = str(dest / f"test.src-tgt.{lang}")
        builder = indexed_dataset.make_builder(out + ".bin", impl="mmap", vocab_size=10000)
        for i in reversed(range(len(ds))):
            builder.add_item(ds[i])
        builder.finalize(out + ".idx")
    return dest
