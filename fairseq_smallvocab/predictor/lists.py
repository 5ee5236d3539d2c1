"""Candidate-list files: each example's K candidate target ids, as written by
``scripts/export_candidates.py`` and read (memory-mapped) by the
small-vocabulary translation task.

A candidate file is a pair ``NAME.npy`` (an N x K matrix of target-dictionary
ids, best first; uint16 when the dictionary fits, else int32) and
``NAME.json`` (what it was made from: K, the split, the target dictionary's
fingerprint, the split's content digest, the predictor's path and SHA-256,
whether gold words were forced in, and the SHA-256 of the .npy itself).

The pair is made consistent by its order of writing and by a check, not by
luck: both files are written to temporary names beside their own and
flushed to the disk, the .npy is renamed first, the .json last, and a reader
refuses a pair whose .npy does not have the digest its .json records.  A
crash between the two renames leaves new lists beside an old description,
which the reader then rejects (the cache is recomputed, an exported list
must be exported again).  A failed write (a full disk is named as one)
removes its temporary files and leaves the old pair, if any, as it was.

The split's content digest (``split_digest``) ties the lists to the data they
were predicted for: two data folders with the same dictionary and the same
number of sentences (two test sets, a reshuffled training set) get different
digests, so the lists of one are never used for the other.
"""

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

FORMAT = "fairseq-smallvocab-candidates"
VERSION = 2  # 2: .npy digest and the split's content digest recorded


class DataMismatch(ValueError):
    """Lists made from other data than the split they are read for;
    ``made_from`` is the data folder their description names."""

    def __init__(self, message, made_from=None):
        super().__init__(message)
        self.made_from = made_from


def candidate_file(folder, split: str, k: int) -> Path:
    """The conventional file name of a split's K-candidate lists."""
    return Path(folder) / f"{split}.k{k}.npy"


def file_sha256(path, chunk=1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


# -- what the lists were made from ----------------------------------------------------------------


def _hash_tokens(h, dataset, chunk=1 << 20):
    """Feed a token dataset's content to ``h``: every item's ids as int64,
    concatenated, then the item lengths.  fairseq's memory-mapped datasets are
    read straight from their buffer (the same bytes as item by item)."""
    from fairseq.data import indexed_dataset

    if isinstance(dataset, indexed_dataset.MMapIndexedDataset):
        stream = np.frombuffer(dataset._bin_buffer, dtype=dataset._index.dtype)
        for start in range(0, len(stream), chunk):
            h.update(stream[start:start + chunk].astype(np.int64).tobytes())
        sizes = np.asarray(dataset.sizes, dtype=np.int64)
    else:
        sizes = np.empty(len(dataset), dtype=np.int64)
        for i in range(len(dataset)):
            item = np.asarray(dataset[i], dtype=np.int64)
            h.update(item.tobytes())
            sizes[i] = len(item)
    h.update(b"|sizes|")
    h.update(sizes.tobytes())


def split_digest(dataset) -> str:
    """SHA-256 of what a split's candidate lists depend on, the same for the
    predictor's task and the translation/captioning tasks reading the same
    files: source and target tokens (sentence pairs), or the captions, each
    caption's image row and the image features (captions)."""
    from fairseq_smallvocab.data.datasets import unwrapped

    dataset = unwrapped(dataset)
    h = hashlib.sha256()
    if hasattr(dataset, "features"):  # data.FeatureTargetDataset: every caption, whatever it serves
        h.update(b"captions|")
        _hash_tokens(h, dataset.tgt)
        h.update(b"|rows|")
        h.update(np.asarray(dataset.row_of, dtype=np.int64).tobytes())
        h.update(b"|features|")
        feats = dataset.features
        h.update(str(feats.shape).encode())
        for start in range(0, len(feats), 4096):
            h.update(np.ascontiguousarray(feats[start:start + 4096], dtype=np.float32).tobytes())
    else:  # fairseq's LanguagePairDataset
        h.update(b"source|")
        _hash_tokens(h, dataset.src)
        h.update(b"|target|")
        if dataset.tgt is not None:
            _hash_tokens(h, dataset.tgt)
    return h.hexdigest()


# -- the files ------------------------------------------------------------------------------------


def _write_flushed(tmp: Path, final: Path, write):
    """``write(f)`` into the new file ``tmp``, flushed to the disk before it
    is renamed to ``final`` (a file system may otherwise keep the rename and
    lose the data in a crash).  A full disk is named as one, with ``final``:
    numpy reports it as a short write ("40500 requested and 24512 written"),
    and some file systems only at the flush."""
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if err.errno == errno.ENOSPC or (err.errno is None and "requested and" in str(err)):
            raise OSError(errno.ENOSPC, f"no space left on device writing {final} ({err}): free space on its "
                                        "disk, or write the lists to another folder (export_candidates.py "
                                        "--out-dir, fairseq-train --candidates-dir), and run again; nothing was put "
                                        f"in place of {final.name}") from err
        raise


def _remove_dead_temporaries(path: Path):
    """Delete the temporary files of this pair that a killed writer left
    (``.NAME.npy.tmp-PID``, ``.NAME.json.tmp-PID`` whose process is gone):
    nothing reads them, and each may be as large as the lists."""
    for tmp in list(path.parent.glob(f".{path.name}.tmp-*")) + list(path.parent.glob(f".{path.stem}.json.tmp-*")):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def write_candidates(path, ids: np.ndarray, meta: Dict) -> Path:
    """Write ``ids`` and ``meta`` as a candidate file pair (the .npy renamed
    into place first, the .json last; see the module doc)."""
    path = Path(path).with_suffix(".npy")
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise ValueError(f"candidates must be an N x K matrix of integer ids, got {ids.dtype} of shape {ids.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_npy = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp_json = path.with_name(f".{path.stem}.json.tmp-{os.getpid()}")
    _remove_dead_temporaries(path)
    try:
        _write_flushed(tmp_npy, path, lambda f: np.save(f, ids))
        meta = dict(meta, format=FORMAT, version=VERSION, rows=int(ids.shape[0]), k=int(ids.shape[1]),
                    dtype=str(ids.dtype), npy_sha256=file_sha256(tmp_npy))
        text = (json.dumps(meta, indent=2) + "\n").encode()
        _write_flushed(tmp_json, path.with_suffix(".json"), lambda f: f.write(text))
        os.replace(tmp_npy, path)
        os.replace(tmp_json, path.with_suffix(".json"))
    finally:
        for tmp in (tmp_npy, tmp_json):
            if tmp.exists():
                tmp.unlink()
    return path


def check_lists(ids: np.ndarray, vocab_size: Optional[int], where: str, chunk: Optional[int] = None):
    """Refuse lists that hold an id twice in one row (its word's probability
    would count twice in the small softmax) or an id outside the target
    dictionary (``vocab_size``; None: only negative ids).  Reads ``ids`` a
    block of rows at a time, so memory-mapped lists stay on disk."""
    if chunk is None:
        chunk = max(1, (1 << 20) // max(1, ids.shape[1]))
    again = "the file is damaged or was not written by scripts/export_candidates.py: export it again"
    for start in range(0, len(ids), chunk):
        block = np.asarray(ids[start:start + chunk])
        if not block.size:
            continue
        high = vocab_size if vocab_size is not None else np.iinfo(np.int64).max
        if block.min() < 0 or block.max() >= high:
            row, col = np.argwhere((block < 0) | (block >= high))[0]
            limit = f"0..{vocab_size - 1}" if vocab_size is not None else "0 and above"
            raise ValueError(f"{where}: example {start + row} holds id {block[row, col]} (outside the target "
                             f"dictionary's ids {limit}): the lists were made with another dictionary, or {again}")
        # numpy sorts 16-bit ids stably by radix (linear time); wider ones faster by introsort
        ordered = np.sort(block, axis=1, kind="stable" if block.itemsize <= 2 else "quicksort")
        repeated = ordered[:, 1:] == ordered[:, :-1]
        if repeated.any():
            row, col = np.argwhere(repeated)[0]
            raise ValueError(f"{where}: example {start + row} lists id {ordered[row, col]} twice (a repeated "
                             f"candidate counts its word's probability twice in the small softmax); {again}")


def read_candidates(path, k: Optional[int] = None, dict_hash: Optional[int] = None,
                    rows: Optional[int] = None, data_digest: Optional[str] = None,
                    data_name: str = "this data", vocab_size: Optional[int] = None) -> Tuple[np.ndarray, Dict]:
    """(memory-mapped N x K ids, metadata).  Checks that the pair is whole
    (the .npy has the digest its .json records) and matches the expected K,
    target dictionary fingerprint, number of examples and split content
    (``data_digest``, from ``split_digest``; a mismatch raises
    ``DataMismatch`` naming both data folders), and that every row holds
    distinct ids of the target dictionary (``vocab_size``, default: the one
    the description records; see ``check_lists``)."""
    path = Path(path).with_suffix(".npy")
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise FileNotFoundError(f"candidate file {path} (with {meta_path.name}) not found; write it with "
                                "scripts/export_candidates.py")
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{meta_path} is not a readable candidate-list description ({err}); export it again") \
            from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path} is not a candidate-list description")
    if meta.get("version") != VERSION or "npy_sha256" not in meta:
        raise ValueError(f"{path} was written by an older version of fairseq-smallvocab, which did not record "
                         "what data it was made from; export it again with scripts/export_candidates.py")
    needed = {"rows": "the number of examples", "k": "K, the candidates per example"}
    if dict_hash is not None:
        needed["target_dict_hash"] = "the target dictionary's fingerprint"
    for key, what in needed.items():
        if not isinstance(meta.get(key), int) or isinstance(meta.get(key), bool):
            state = "lacks" if key not in meta else f"has {meta[key]!r} for"
            raise ValueError(f"{meta_path} {state} '{key}' ({what}, an integer), which every description written "
                             "by scripts/export_candidates.py holds: the file was edited or written by another "
                             "tool; export the lists again")
    if file_sha256(path) != meta["npy_sha256"]:
        raise ValueError(f"{path} does not match its description {meta_path.name} (the .npy's SHA-256 differs "
                         "from the one recorded): the pair was not written together, e.g. a run was killed "
                         "between the two; export it again")
    try:
        ids = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:  # e.g. a pickled object array, which cannot be mapped
        raise ValueError(f"{path} is not a candidate list: it must be a .npy matrix of integer ids ({err}); "
                         "export it again with scripts/export_candidates.py") from None
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{path} holds {ids.dtype} values, not integer ids; export it again with "
                         "scripts/export_candidates.py")
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
    if data_digest is not None and meta.get("data_sha256") != data_digest:
        raise DataMismatch(
            f"{path} holds the lists of other data: they were predicted for split '{meta.get('split')}' of "
            f"{meta.get('data')} (content SHA-256 {str(meta.get('data_sha256'))[:12]}...), but this run reads "
            f"{data_name} (content SHA-256 {data_digest[:12]}...). Same dictionary and size, different sentences: "
            "these lists would give every example another sentence's candidates.", made_from=meta.get("data"))
    check_lists(ids, vocab_size if vocab_size is not None else meta.get("vocab_size"), str(path))
    return ids, meta
