"""Datasets of the plugin's tasks."""

from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils


class KeepLastBatchDataset(BaseWrapperDataset):
    """Batches like the wrapped dataset, but never drops the last batch.

    fairseq 0.12's ``data_utils.batch_by_size`` drops a final batch whose size
    is not a multiple of ``--required-batch-size-multiple`` (default 8;
    fairseq issue #5036), so validation and test silently lose up to 7
    examples.  fairseq's Cython ``batch_by_size_vec`` itself keeps that batch;
    this wrapper calls it directly.  Other attributes (``src_dict``, ``tgt``,
    ...) are those of the wrapped dataset."""

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        from fairseq.data.data_utils_fast import batch_by_size_vec

        indices = np.asarray(indices, dtype=np.int64)
        if hasattr(self.dataset, "num_tokens_vec"):
            num_tokens = self.dataset.num_tokens_vec(indices)
        else:
            num_tokens = np.array([self.dataset.num_tokens(i) for i in indices])
        return batch_by_size_vec(indices, np.asarray(num_tokens, dtype=np.int64),
                                 int(max_tokens) if max_tokens else -1,
                                 int(max_sentences) if max_sentences else -1,
                                 int(required_batch_size_multiple))

    def __getattr__(self, name):
        if name == "dataset":  # not yet set (e.g. during copy): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


def load_features(path, dim: Optional[int] = None) -> np.ndarray:
    """A float32 feature matrix (one row per image) from a .npy file,
    memory-mapped.  Checks the shape and that no row holds NaN or inf."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"feature file not found: {path}")
    try:
        feats = np.load(path, mmap_mode="r")
    except ValueError as err:
        raise ValueError(f"{path} is not a .npy array file: {err}") from err
    if feats.ndim != 2:
        raise ValueError(f"{path}: features must be a 2-D matrix (rows x dims), got shape {feats.shape}")
    if feats.dtype != np.float32:
        raise ValueError(f"{path}: features must be float32, got {feats.dtype}; convert with "
                         "np.save(path, array.astype(np.float32))")
    if dim is not None and feats.shape[1] != dim:
        raise ValueError(f"{path}: feature dimension {feats.shape[1]} differs from the expected {dim} "
                         "(--feature-dim, or the dimension the model was trained with)")
    for start in range(0, feats.shape[0], 8192):
        bad = ~np.isfinite(feats[start:start + 8192]).all(axis=1)
        if bad.any():
            raise ValueError(f"{path}: row {start + int(np.flatnonzero(bad)[0])} holds NaN or inf")
    return feats


class FeatureTargetDataset(FairseqDataset):
    """(image feature vector, target sentence) examples.

    ``row_of[i]`` is the feature row of example i (several captions may share
    an image); by default example i uses row i."""

    def __init__(self, features: np.ndarray, tgt, tgt_sizes, tgt_dict, row_of=None, shuffle=True):
        self.features = features
        self.tgt = tgt
        self.tgt_sizes = np.asarray(tgt_sizes)
        self.sizes = self.tgt_sizes
        self.tgt_dict = tgt_dict
        self.shuffle = shuffle
        n = len(self.tgt_sizes)
        self.row_of = np.arange(n) if row_of is None else np.asarray(row_of, dtype=np.int64)
        if len(self.row_of) != n:
            raise ValueError(f"{len(self.row_of)} feature-row indices for {n} examples")
        if n and (self.row_of.min() < 0 or self.row_of.max() >= len(features)):
            bad = int(np.flatnonzero((self.row_of < 0) | (self.row_of >= len(features)))[0])
            raise ValueError(f"example {bad} points at feature row {int(self.row_of[bad])}, outside the "
                             f"{len(features)} rows of the feature matrix")

    def __getitem__(self, index):
        return {"id": index, "features": torch.from_numpy(np.array(self.features[self.row_of[index]])),
                "target": self.tgt[index]}

    def __len__(self):
        return len(self.tgt_sizes)

    def collater(self, samples):
        if not samples:
            return {}
        target = data_utils.collate_tokens([s["target"] for s in samples], self.tgt_dict.pad(),
                                           self.tgt_dict.eos(), left_pad=False)
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples),
                "ntokens": sum(len(s["target"]) for s in samples),
                "net_input": {"features": torch.stack([s["features"] for s in samples])},
                "target": target}

    def num_tokens(self, index):
        return int(self.tgt_sizes[index])

    def num_tokens_vec(self, indices):
        return self.tgt_sizes[indices]

    def size(self, index):
        return int(self.tgt_sizes[index])

    def ordered_indices(self):
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.tgt_sizes[order], kind="mergesort")]
