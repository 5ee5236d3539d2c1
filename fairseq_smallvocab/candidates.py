"""Candidate-list files: each example's K candidate target ids, as written by
``scripts/export_candidates.py`` and read (memory-mapped) by the
small-vocabulary translation task.

A candidate file is a pair ``NAME.npy`` (an N x K matrix of target-dictionary
ids, best first; uint16 when the dictionary fits, else int32) and
``NAME.json`` (what it was made from: K, the split, the target dictionary's
fingerprint, the predictor's path and SHA-256, whether gold words were forced
in).  Both are written to temporary names and renamed, the .npy last, so a
reader never sees a half-written pair.
"""

import json
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

FORMAT = "fairseq-smallvocab-candidates"
VERSION = 1


def candidate_file(folder, split: str, k: int) -> Path:
    """The conventional file name of a split's K-candidate lists."""
    return Path(folder) / f"{split}.k{k}.npy"


def write_candidates(path, ids: np.ndarray, meta: Dict) -> Path:
    path = Path(path).with_suffix(".npy")
    if ids.ndim != 2:
        raise ValueError(f"candidates must be an N x K matrix, got shape {ids.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(meta, format=FORMAT, version=VERSION, rows=int(ids.shape[0]), k=int(ids.shape[1]),
                dtype=str(ids.dtype))
    tmp_npy = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp_json = path.with_name(f".{path.stem}.json.tmp-{os.getpid()}")
    try:
        with open(tmp_npy, "wb") as f:
            np.save(f, ids)
        tmp_json.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp_json, path.with_suffix(".json"))
        os.replace(tmp_npy, path)
    finally:
        for tmp in (tmp_npy, tmp_json):
            if tmp.exists():
                tmp.unlink()
    return path


def read_candidates(path, k: Optional[int] = None, dict_hash: Optional[int] = None,
                    rows: Optional[int] = None) -> Tuple[np.ndarray, Dict]:
    """(memory-mapped N x K ids, metadata); checks the file against the
    expected K, target dictionary fingerprint and number of examples."""
    path = Path(path).with_suffix(".npy")
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise FileNotFoundError(f"candidate file {path} (with {meta_path.name}) not found; write it with "
                                "scripts/export_candidates.py")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path} is not a candidate-list description")
    ids = np.load(path, mmap_mode="r")
    if ids.ndim != 2 or ids.shape != (meta["rows"], meta["k"]):
        raise ValueError(f"{path} holds shape {ids.shape}, its description says ({meta['rows']}, {meta['k']}): "
                         "the pair is inconsistent; export it again")
    if k is not None and meta["k"] != k:
        raise ValueError(f"{path} holds K = {meta['k']} candidates per example, not the requested {k}")
    if dict_hash is not None and meta["target_dict_hash"] != dict_hash:
        raise ValueError(f"{path} was made with another target dictionary than the data's; export it again "
                         "from a predictor trained on this data")
    if rows is not None and meta["rows"] != rows:
        raise ValueError(f"{path} has {meta['rows']} rows but the split has {rows} examples")
    return ids, meta
