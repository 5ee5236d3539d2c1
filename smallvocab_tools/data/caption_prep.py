"""Preparing a captioning data folder for ``captioning_smallvocab``: captions
binarized target side only, float32 features (one row per image) and each
caption's image row.

Two inputs are read:

* this project's layout (``scripts/make_synthetic_captions.py`` writes it):
  ``RAW/{split}.LANG`` (one caption per line), ``RAW/{split}.npy``,
  ``RAW/{split}.index``;
* Kiros et al.'s precomputed features and captions (the files of their
  visual-semantic-embedding code, used by the paper): ``RAW/NAME_{train,dev,
  test}_caps.txt`` (one caption per line, the captions of an image
  consecutive) and ``RAW/NAME_{split}_ims.npy`` (4096-d image features: one
  row per image, or one row per caption with each image's row repeated).
"""

import re
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.output_dir import atomic_output_dir, check_dest_apart_from_inputs
from smallvocab_tools.data.prep import fairseq_preprocess, write_json
from smallvocab_tools.data.text import read_lines, warn_special_tokens

KIROS_SPLITS = {"train": "train", "valid": "dev", "test": "test"}
_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]", re.UNICODE)


def tokenize(line: str) -> str:
    """Lowercased words and punctuation marks, separated by spaces."""
    return " ".join(_TOKEN.findall(line.lower()))


def kiros_image_rows(n_rows: int, n_captions: int, per_image: int, features=None, where="") -> Tuple[
        np.ndarray, Optional[np.ndarray]]:
    """(image row of each caption, rows of the feature matrix to keep or
    None for all).  One row per image: caption i belongs to row i // per_image.
    One row per caption: rows of an image's captions that are all equal are
    merged into one; otherwise every caption keeps its own row."""
    if n_rows * per_image == n_captions:
        return np.arange(n_captions) // per_image, None
    if n_rows == n_captions:
        groups = n_rows // per_image
        if features is not None and n_rows % per_image == 0:
            first = np.asarray(features[::per_image])
            same = all(np.array_equal(np.asarray(features[j::per_image][:groups]), first)
                       for j in range(1, per_image))
            if same:
                return np.arange(n_captions) // per_image, np.arange(0, n_rows, per_image)
        return np.arange(n_captions), None
    raise DataError(f"{where}: {n_rows} feature rows for {n_captions} captions; expected one row per image "
                    f"({n_captions / per_image:g} with --captions-per-image {per_image}) or one per caption")


def write_features(path, features, keep: Optional[np.ndarray] = None, normalize=False, chunk=4096, where=""):
    """Copy rows of a feature matrix into a float32 .npy file, chunk by chunk
    (a memory-mapped input is never loaded whole); checks every row is finite
    (``where``: the input file and split, for the error)."""
    rows = np.arange(len(features)) if keep is None else keep
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(rows), features.shape[1]))
    for start in range(0, len(rows), chunk):
        block = np.asarray(features[rows[start:start + chunk]], dtype=np.float32)
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            raise DataError(f"{where}feature row {int(rows[start + int(np.flatnonzero(bad)[0])])} holds NaN or "
                            "inf; fix or drop that image's features")
        if normalize:
            block = block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-12)
        out[start:start + len(block)] = block
    out.flush()
    del out


def _read_split(raw: Path, role: str, lang: str, kiros: Optional[str], per_image: int, log=print):
    """(captions, features (memory-mapped), image row of each caption, rows
    to keep, the features' path)."""
    if kiros:
        caps_path = raw / f"{kiros}_{KIROS_SPLITS[role]}_caps.txt"
        feats_path = raw / f"{kiros}_{KIROS_SPLITS[role]}_ims.npy"
    else:
        caps_path, feats_path = raw / f"{role}.{lang}", raw / f"{role}.npy"
    captions = read_lines(caps_path)
    warn_special_tokens(caps_path, captions, log)
    for i, line in enumerate(captions):
        if not line.strip():
            raise DataError(f"{caps_path}, line {i + 1}: empty caption")
    if not feats_path.is_file():
        raise DataError(f"missing feature file: {feats_path}")
    features = np.load(feats_path, mmap_mode="r")
    if features.ndim != 2:
        raise DataError(f"{feats_path}: features must be a 2-D matrix, got shape {features.shape}")
    if kiros:
        index, keep = kiros_image_rows(len(features), len(captions), per_image, features, str(feats_path))
        captions = [tokenize(c) for c in captions]
    else:
        from fairseq_smallvocab.data.datasets import load_caption_index

        index_path = raw / f"{role}.index"
        try:
            index = (load_caption_index(index_path, len(captions), len(features)) if index_path.is_file()
                     else kiros_image_rows(len(features), len(captions), 1, where=str(feats_path))[0])
        except ValueError as err:
            raise DataError(str(err)) from err
        keep = None
    return captions, features, index, keep, feats_path


def prepare_captions(raw_dir, dest, lang="en", kiros: Optional[str] = None, per_image=5, min_count=1,
                     normalize=False, splits=("train", "valid", "test"), workers=1, force=False, log=print) -> Dict:
    """Write DEST: dict.LANG.txt, {split}.LANG-None.LANG.{bin,idx}
    (fairseq-preprocess --only-source), {split}.npy, {split}.index,
    raw/{split}.LANG (the tokenized captions: BLEU references) and stats.json.
    DEST appears only when complete."""
    raw = Path(raw_dir)
    if "train" not in splits:
        raise DataError("a train split is required (it defines the dictionary)")
    check_dest_apart_from_inputs(dest, [raw])
    read = {role: _read_split(raw, role, lang, kiros, per_image, log) for role in splits}
    dims = {role: r[1].shape[1] for role, r in read.items()}
    if len(set(dims.values())) > 1:
        raise DataError(f"the splits' features differ in width: {dims}")
    stats: Dict = {"source": str(raw), "format": "kiros" if kiros else "project", "min_count": min_count,
                   "feature_dim": next(iter(dims.values())), "normalized": normalize, "splits": {}}
    with atomic_output_dir(dest, overwrite=force) as tmp:
        (tmp / "raw").mkdir()
        for role, (captions, features, index, keep, feats_path) in read.items():
            (tmp / "raw" / f"{role}.{lang}").write_text("\n".join(captions) + "\n", encoding="utf-8")
            write_features(tmp / f"{role}.npy", features, keep, normalize, where=f"{feats_path} ({role} split): ")
            (tmp / f"{role}.index").write_text("\n".join(map(str, index.tolist())) + "\n")
            stats["splits"][role] = {"captions": len(captions), "images": int(len(np.unique(index))),
                                     "tokens": sum(len(c.split()) for c in captions)}
            log(f"{role}: {len(captions)} captions of {stats['splits'][role]['images']} images")
        fairseq_preprocess(tmp / "raw", tmp, lang, None, {role: role for role in read}, min_count=min_count,
                           workers=workers)
        stats["dictionary"] = sum(1 for _ in open(tmp / f"dict.{lang}.txt", encoding="utf-8"))
        write_json(tmp / "stats.json", stats)
    return stats

