"""Datasets of the plugin's tasks, their data folder, and a dictionary's fingerprint (which candidate lists,
predictors and checkpoints record)."""

import hashlib
import os
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils, indexed_dataset

from fairseq_smallvocab.data.caption_refs import captions_by_image, first_caption_of_each_image


def dictionary_fingerprint(dictionary) -> int:
    """A 60-bit hash of a fairseq Dictionary's symbols, in order."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()
    return int(digest[:15], 16)


def data_folder(data) -> str:
    """The folder a task's ``data`` names (fairseq's ``--data``, or the first
    of several ``a:b`` folders, as fairseq splits them), absolute where it is
    local: the one that holds the dictionaries, and how candidate lists name
    the data they were made from."""
    if not data:
        raise ValueError("no data folder: give the data folder (the fairseq-preprocess output, or the captions and "
                         "features folder) as the first argument of fairseq-train (task.data=DIR with "
                         "fairseq-hydra-train)")
    first = utils.split_paths(str(data))[0]
    return first if "://" in first else os.path.abspath(first)


def unwrapped(dataset):
    """The dataset inside fairseq's wrappers (``BaseWrapperDataset``, the
    plugin's ``KeepLastBatchDataset`` and ``CandidateDataset``): the one that
    holds the sizes and tokens."""
    while isinstance(dataset, BaseWrapperDataset):
        dataset = dataset.dataset
    return dataset


def token_stream(dataset):
    """All items of a fairseq indexed dataset concatenated, as a numpy array of
    its own: a copy, because the dataset unmaps its file when it is freed."""
    if isinstance(dataset, indexed_dataset.MMapIndexedDataset):
        return np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype).copy()
    return np.concatenate([dataset[i].numpy() for i in range(len(dataset))])


def split_folder(data, split: str, train_subset: str, epoch: int = 1) -> str:
    """The folder a split is read from, as fairseq's translation task picks
    it: the training split cycles over ``data``'s ``a:b`` folders by epoch,
    every other split is read from the first."""
    paths = utils.split_paths(str(data))
    if split != train_subset:
        paths = paths[:1]
    return paths[(epoch - 1) % len(paths)]


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
        try:
            num_tokens = self.dataset.num_tokens_vec(indices)
        except (AttributeError, NotImplementedError):  # fairseq's ConcatDataset has only num_tokens
            num_tokens = np.array([self.dataset.num_tokens(i) for i in indices])
        return batch_by_size_vec(indices, np.asarray(num_tokens, dtype=np.int64),
                                 int(max_tokens) if max_tokens else -1,
                                 int(max_sentences) if max_sentences else -1,
                                 int(required_batch_size_multiple))

    def __getattr__(self, name):
        if name == "dataset":  # not yet set (e.g. during copy): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


def features_width(folder, train_subset="train") -> int:
    """d_f, read from the header of the first {split}.npy feature matrix in the
    folder (the training split's first)."""
    files = sorted(Path(folder).glob("*.npy"), key=lambda p: (p.stem != train_subset, p.name))
    if not files:
        raise FileNotFoundError(f"no {{split}}.npy feature matrix in {folder}")
    return int(load_features(files[0], check_values=False).shape[1])


def load_features(path, dim: Optional[int] = None, check_values: bool = True) -> np.ndarray:
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
    if check_values:
        for start in range(0, feats.shape[0], 8192):
            bad = ~np.isfinite(feats[start:start + 8192]).all(axis=1)
            if bad.any():
                raise ValueError(f"{path}: row {start + int(np.flatnonzero(bad)[0])} holds NaN or inf")
    return feats


def load_caption_index(path, captions: int, rows: int) -> np.ndarray:
    """The image row of each caption: a text file with one integer per line
    (line i: the feature-matrix row of caption i).  Checks that there is one
    line per caption and that every row exists."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"caption index not found: {path} (one feature-matrix row number per caption, "
                                "one per line; scripts/prepare_captions.py writes it)")
    lines = path.read_text().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != captions:
        raise ValueError(f"{path} has {len(lines)} lines but the split has {captions} captions: "
                         "one feature-row number per caption is needed")
    index = np.empty(len(lines), dtype=np.int64)
    for i, line in enumerate(lines):
        try:
            index[i] = int(line)
        except ValueError:
            raise ValueError(f"{path}, line {i + 1}: '{line.strip()}' is not a row number") from None
    bad = np.flatnonzero((index < 0) | (index >= rows))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"{path}, line {i + 1}: caption {i} points at image row {int(index[i])}, outside the "
                         f"feature matrix's {rows} rows (0..{rows - 1}); the index and the features do not match")
    return index


class FeatureTargetDataset(FairseqDataset):
    """(image feature vector, target sentence) examples.

    ``row_of[c]`` is the feature row of caption c (several captions may share
    an image); by default caption c uses row c.  ``examples`` (default: every
    caption) are the captions the dataset serves, in order: example i is
    caption ``examples[i]``.  With ``decoder_input`` batches also carry what a
    captioning decoder and fairseq's SequenceGenerator read
    (``prev_output_tokens``, and ``padding_mask``: the one input vector is
    never padding).  With ``references`` a batch also carries, per example,
    every caption of its image (``sample["references"]``: lists of token
    tensors, the example's own caption first) for multi-reference BLEU."""

    def __init__(self, features: np.ndarray, tgt, tgt_sizes, tgt_dict, row_of=None, shuffle=True,
                 examples=None, decoder_input=False, references=False):
        self.features = features
        self.with_references = references
        self.tgt = tgt
        self.tgt_dict = tgt_dict
        self.shuffle = shuffle
        self.decoder_input = decoder_input
        n = len(tgt_sizes)
        self.row_of = np.arange(n) if row_of is None else np.asarray(row_of, dtype=np.int64)
        if len(self.row_of) != n:
            raise ValueError(f"{len(self.row_of)} feature-row indices for {n} examples")
        if n and (self.row_of.min() < 0 or self.row_of.max() >= len(features)):
            bad = int(np.flatnonzero((self.row_of < 0) | (self.row_of >= len(features)))[0])
            raise ValueError(f"example {bad} points at feature row {int(self.row_of[bad])}, outside the "
                             f"{len(features)} rows of the feature matrix")
        self.examples = np.arange(n) if examples is None else np.asarray(examples, dtype=np.int64)
        self.tgt_sizes = np.asarray(tgt_sizes)[self.examples]
        self.sizes = self.tgt_sizes
        self._captions_of_row = None  # image row -> its caption numbers, made when first needed

    def __getitem__(self, index):
        caption = self.examples[index]
        return {"id": index, "features": torch.from_numpy(np.array(self.features[self.row_of[caption]])),
                "target": self.tgt[caption]}

    def __len__(self):
        return len(self.examples)

    def references(self, index):
        """Every caption (token tensors) of example ``index``'s image, its own
        first: the references of multi-reference BLEU."""
        if self._captions_of_row is None:
            self._captions_of_row = captions_by_image(range(len(self.row_of)), self.row_of)
        caption = int(self.examples[index])
        others = [c for c in self._captions_of_row[int(self.row_of[caption])] if c != caption]
        return [self.tgt[c] for c in [caption] + others]

    def collater(self, samples):
        if not samples:
            return {}
        pad, eos = self.tgt_dict.pad(), self.tgt_dict.eos()
        target = data_utils.collate_tokens([s["target"] for s in samples], pad, eos, left_pad=False)
        net_input = {"features": torch.stack([s["features"] for s in samples])}
        if self.decoder_input:
            net_input["prev_output_tokens"] = data_utils.collate_tokens(
                [s["target"] for s in samples], pad, eos, left_pad=False, move_eos_to_beginning=True)
            net_input["padding_mask"] = torch.zeros(len(samples), 1, dtype=torch.bool)
        batch = {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples),
                 "ntokens": sum(len(s["target"]) for s in samples), "net_input": net_input, "target": target}
        if self.with_references:
            batch["references"] = [self.references(s["id"]) for s in samples]
        return batch

    def num_tokens(self, index):
        return int(self.tgt_sizes[index])

    def num_tokens_vec(self, indices):
        return self.tgt_sizes[indices]

    def size(self, index):
        return int(self.tgt_sizes[index])

    def ordered_indices(self):
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        return order[np.argsort(self.tgt_sizes[order], kind="mergesort")]


def feature_target_dataset(features_dir, split, tgt, tgt_dict, dim=None, shuffle=True, one_per_image=False,
                           decoder_input=False, references=False) -> FeatureTargetDataset:
    """A split of (image feature, caption) examples: ``features_dir/{split}.npy``
    (float32, one row per image) and, when captions outnumber rows,
    ``features_dir/{split}.index`` (the image row of each caption, one per
    line).  With ``one_per_image`` only each image's first caption is kept
    (each image decoded once)."""
    folder = Path(features_dir)
    feats = load_features(folder / f"{split}.npy", dim=dim)
    index_path = folder / f"{split}.index"
    if index_path.is_file():
        row_of = load_caption_index(index_path, len(tgt), len(feats))
    elif len(feats) == len(tgt):
        row_of = np.arange(len(tgt))
    else:
        raise ValueError(f"{folder / f'{split}.npy'} has {len(feats)} rows but the {split} split has {len(tgt)} "
                         f"captions, and there is no {index_path.name} giving each caption's image row "
                         "(scripts/prepare_captions.py writes it)")
    examples = None
    if one_per_image:
        examples = first_caption_of_each_image(row_of)
    return FeatureTargetDataset(feats, tgt, tgt.sizes, tgt_dict, row_of=row_of, shuffle=shuffle,
                                examples=examples, decoder_input=decoder_input, references=references)


def single_dictionary_lang(folder) -> Optional[str]:
    """The language suffix of the only dict.*.txt in a folder (captions are
    binarized target side only), else None."""
    found = sorted(Path(folder).glob("dict.*.txt"))
    return found[0].name[len("dict."):-len(".txt")] if len(found) == 1 else None
