"""fairseq-preprocess's .idx/.bin pairs, checked before fairseq opens them.

fairseq 0.12 opens a damaged pair without complaint or with an error that names no file ("offset must be
non-negative", "'MMapIndexedDataset' object has no attribute '_bin_buffer_mmap'"), and a token id outside the
dictionary passes training to fail at validation with an IndexError.  The check reads the index (12 bytes a
sentence) and takes one max over the tokens, once per split load: nothing per batch."""

import itertools
import os
import struct
from pathlib import Path
from typing import Optional

import numpy as np
from fairseq.data import data_utils, indexed_dataset

# MMapIndexedDataset.Index: magic (9 bytes), version (uint64), dtype code (uint8), sentence count (uint64), then
# int32 sizes and int64 byte offsets, one each per sentence
_INDEX_LAYOUT = "<9sQBQ"
_INDEX_HEADER = struct.calcsize(_INDEX_LAYOUT)


def _binarize_again(prefix) -> str:
    folder = os.path.dirname(prefix) or "."
    return (f"binarize the split again into {folder} (fairseq-preprocess, or scripts/prepare_data.py / "
            "scripts/prepare_captions.py, which run it)")


def check_binarized(prefix: str, dictionary=None, dataset_impl: Optional[str] = None):
    """Refuse a damaged fairseq-preprocess pair ``prefix.idx``/``prefix.bin``
    (fairseq's mmap format) before fairseq opens it, naming the file, what is
    wrong and the fix: one of the two missing, an index cut short or not
    consistent with its sentence count, a .bin shorter or longer than its
    index says, no tokens at all, and with ``dictionary`` a token id outside
    it.  Absent pairs (fairseq reports those) and other ``--dataset-impl``
    formats are left to fairseq."""
    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    if dataset_impl not in (None, "mmap") or not (idx.is_file() or bin_.is_file()):
        return
    again = _binarize_again(prefix)
    if not (idx.is_file() and bin_.is_file()):
        missing, there = (idx, bin_) if bin_.is_file() else (bin_, idx)
        raise FileNotFoundError(f"{missing} is missing beside {there.name}: the pair was not written or copied "
                                f"whole; {again}")
    magic = indexed_dataset.MMapIndexedDataset.Index._HDR_MAGIC
    with open(idx, "rb") as f:
        header = f.read(_INDEX_HEADER)
    if any(header.startswith(other[:8]) for other in (indexed_dataset.IndexedDataset._HDR_MAGIC,
                                                       indexed_dataset.HuffmanMMapIndex._HDR_MAGIC)):
        return  # fairseq's other formats (--dataset-impl lazy/cached, huffman): fairseq checks those
    if len(header) < _INDEX_HEADER and magic.startswith(header[:len(magic)]):
        raise ValueError(f"{idx} is truncated: {len(header)} bytes, shorter than the {_INDEX_HEADER}-byte header "
                         f"of a fairseq-preprocess index; {again}")
    found, version, code, count = struct.unpack(_INDEX_LAYOUT, header) if len(header) == _INDEX_HEADER else [None] * 4
    if found != magic or version != 1 or code not in indexed_dataset._code_to_dtype:
        raise ValueError(f"{idx} is not a fairseq-preprocess index (--dataset-impl mmap): its header is not the "
                         f"format's (another --dataset-impl, or a damaged file); {again}")
    want, have = _INDEX_HEADER + 12 * count, idx.stat().st_size
    if have != want:
        state = "is truncated" if have < want else "is damaged"
        raise ValueError(f"{idx} {state}: the index says {want} bytes ({count} sentences), the file has {have}; "
                         f"{again}")
    dtype = np.dtype(indexed_dataset._code_to_dtype[code])
    sizes = np.fromfile(idx, dtype="<i4", count=count, offset=_INDEX_HEADER).astype(np.int64)
    pointers = np.fromfile(idx, dtype="<i8", count=count, offset=_INDEX_HEADER + 4 * count)
    ends = np.cumsum(sizes) * dtype.itemsize
    if (sizes < 0).any() or (pointers != ends - sizes * dtype.itemsize).any():
        raise ValueError(f"{idx} is damaged: its sentence sizes and offsets do not agree; {again}")
    want, have = int(ends[-1]) if count else 0, bin_.stat().st_size
    if have < want:
        raise ValueError(f"{bin_} is truncated: the index says {want} bytes, the file has {have}; {again}")
    if have > want:
        raise ValueError(f"{bin_} has {have} bytes, but its index {idx.name} says {want}: the two were not written "
                         f"together (or the .bin was appended to); {again}")
    if not count or not want:
        raise ValueError(f"{bin_} holds no tokens ({count} sentences): fairseq cannot read an empty split; check "
                         f"the text files given to fairseq-preprocess and {again}")
    if dictionary is not None:
        _check_token_ids(bin_, np.memmap(bin_, dtype=dtype, mode="r"), ends // dtype.itemsize, dictionary)


def _check_token_ids(path: Path, tokens: np.ndarray, ends: np.ndarray, dictionary):
    """Refuse token ids outside ``dictionary`` (``ends``: each sentence's end in ``tokens``)."""
    size = len(dictionary)
    if int(tokens.max()) < size and (tokens.dtype.kind == "u" or int(tokens.min()) >= 0):
        return
    at = int(np.flatnonzero((tokens >= size) | (tokens < 0))[0])
    sentence = int(np.searchsorted(ends, at, side="right"))
    pair, lang = path.name.split(".")[-3:-1]  # SPLIT.SRC-TGT.LANG.bin; captions: SPLIT.LANG-None.LANG.bin
    flag = "--tgtdict" if pair.endswith(f"-{lang}") else "--srcdict"
    raise ValueError(f"{path}: sentence {sentence} holds token id {int(tokens[at])}, but dict.{lang}.txt has {size} "
                     f"entries (ids 0..{size - 1}): the data was binarized with another dictionary; binarize it again "
                     f"with this one (fairseq-preprocess {flag} {path.parent / f'dict.{lang}.txt'}, and the other "
                     "side's dictionary likewise)")


def check_langpair(data_path: str, split: str, src: str, src_dict, tgt: str, tgt_dict, combine: bool,
                   dataset_impl: Optional[str] = None):
    """``check_binarized`` on the pairs fairseq's ``load_langpair_dataset``
    reads for a split: SPLIT.SRC-TGT.* (or SPLIT.TGT-SRC.*), and with
    ``combine`` SPLIT1, SPLIT2, ... too."""
    for k in itertools.count():
        split_k = split + (str(k) if k > 0 else "")
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            prefix = os.path.join(data_path, f"{split_k}.{pair}.")
            if any(os.path.exists(prefix + src + ext) for ext in (".idx", ".bin")):
                break
        else:
            return
        check_binarized(prefix + src, src_dict, dataset_impl)
        check_binarized(prefix + tgt, tgt_dict, dataset_impl)
        if not combine:
            return


def load_binarized(prefix: str, dictionary, dataset_impl: Optional[str] = None):
    """fairseq's ``load_indexed_dataset`` of one pair, checked first
    (``check_binarized``); None when it does not exist."""
    check_binarized(prefix, dictionary, dataset_impl)
    return data_utils.load_indexed_dataset(prefix, dictionary, dataset_impl)
