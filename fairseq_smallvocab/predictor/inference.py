"""Using a trained vocabulary predictor: loading it with checks, predicting
candidate lists and measuring recall@K over a data split."""

import os
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq import tasks
from fairseq.data import data_utils
from fairseq.dataclass.utils import merge_with_parent
from omegaconf import open_dict

from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError, read_checkpoint
from fairseq_smallvocab.data.datasets import (
    data_folder,
    dictionary_fingerprint,
    single_dictionary_lang,
    token_stream,
    unwrapped,
)
from fairseq_smallvocab.predictor.lists import candidate_file, file_sha256, split_digest, write_candidates
from fairseq_smallvocab.predictor.scoring import TooManyForcedWords, check_k, multi_hot, recall_hits, select_candidates

PREDICTOR_TASK = "vocab_prediction"  # the task every predictor is set up with


class PredictorError(ValueError):
    """A predictor checkpoint that cannot be used, with the reason and the fix."""


def folder_instead_of_checkpoint(path, given: str) -> Optional[str]:
    """The error for a folder given where a predictor checkpoint file is
    expected (None when ``path`` is not a folder); ``given`` names the option."""
    path = Path(path)
    if not path.is_dir():
        return None
    found = [str(path / name) for name in ("checkpoint_best.pt", "checkpoint_last.pt") if (path / name).is_file()]
    hint = f": give {' or '.join(found)}" if found else " (this one holds no checkpoint_best.pt or checkpoint_last.pt)"
    return (f"{given}, {path}, is a folder; a checkpoint file is expected (a .pt file of fairseq-train's "
            f"--save-dir){hint}")


def load_predictor(path, data: Optional[str] = None, **task_overrides):
    """(model in eval mode, task) from a ``vocab_predictor`` checkpoint.

    ``data`` replaces the data folder the predictor was trained on (the
    target dictionaries must be the same); ``task_overrides`` set other task
    options (e.g. ``source_features``).  ``task.recorded_langs``: the
    (source, target) languages the checkpoint records (fairseq-train's -s /
    -t), None for one it was trained without (the task's own are then
    inferred from the data folder now, not necessarily what it was trained
    on)."""
    path = Path(path)
    folder = folder_instead_of_checkpoint(path, "the vocabulary predictor")
    if folder:
        raise PredictorError(folder)
    if not path.is_file():
        raise PredictorError(f"vocabulary predictor checkpoint not found: {path}")
    try:
        state = read_checkpoint(path)
    except CheckpointLoadError as err:  # it names the file, what is wrong and what to do
        raise PredictorError(str(err)) from None
    except Exception as err:  # a truncated or foreign file: torch/pickle/zip errors
        raise PredictorError(f"cannot read {path} as a fairseq checkpoint ({type(err).__name__}: {err}); "
                             "the file may be incomplete or corrupt: retrain or copy it again") from err
    cfg = state.get("cfg")
    arch = getattr(getattr(cfg, "model", None), "_name", None)
    if arch != "vocab_predictor":
        raise PredictorError(f"{path} is a checkpoint of '{arch}', not of a vocabulary predictor "
                             "(fairseq-train --task vocab_prediction --arch vocab_predictor)")
    trained_on = cfg.task.data
    reads_features = getattr(cfg.task, "source_features", None) is not None
    if "source_features" in task_overrides and (task_overrides["source_features"] is not None) != reads_features:
        if reads_features:
            raise PredictorError(
                f"{path} predicts words from image features (trained with --source-features "
                f"{cfg.task.source_features}), but these data ({data or trained_on}) are sentence pairs: use a "
                "predictor trained on their source sentences (fairseq-train DATA --task vocab_prediction "
                "--arch vocab_predictor ...)")
        raise PredictorError(
            f"{path} predicts words from source sentences (trained on {trained_on}), but captioning reads image "
            "features: use a predictor trained with --task vocab_prediction --source-features DIR")
    trained_dict = _target_dictionary_file(trained_on, getattr(cfg.task, "target_lang", None), reads_features)
    if data is not None:
        cfg.task.data = str(data)
    for key, value in task_overrides.items():
        setattr(cfg.task, key, value)
    folder = data_folder(cfg.task.data)
    mismatch = _other_input_kind(folder, path, trained_on, getattr(cfg.task, "source_features", None))
    if mismatch:
        raise PredictorError(mismatch)
    tgt = getattr(cfg.task, "target_lang", None)
    if tgt and not os.path.isfile(os.path.join(folder, f"dict.{tgt}.txt")):
        found = ", ".join(sorted(p.name for p in Path(folder).glob("dict.*.txt"))) or "no dict.*.txt at all"
        raise PredictorError(
            f"{path} was trained on target language '{tgt}' ({trained_dict}), "
            f"but {folder} has no dict.{tgt}.txt (it has {found}): use a predictor trained on this data")
    recorded = (getattr(cfg.task, "source_lang", None), getattr(cfg.task, "target_lang", None))
    task = tasks.TASK_REGISTRY[PREDICTOR_TASK].setup_task(_predictor_task_config(cfg.task))
    task.recorded_langs = recorded
    saved_hash = int(state["model"]["target_dict_hash"].item())
    saved_size = state["model"]["prior"].numel()
    if saved_hash != dictionary_fingerprint(task.target_dictionary):
        tgt = task.cfg.target_lang  # inferred from the data folder when not given
        raise PredictorError(
            f"target dictionaries differ: the predictor {path} was trained with "
            f"{trained_dict or f'the target dictionary of {trained_on}'} ({saved_size} entries), the data uses "
            f"{os.path.join(folder, f'dict.{tgt}.txt')} ({len(task.target_dictionary)} entries). "
            "Use a predictor trained on this data, or binarize the data with "
            "fairseq-preprocess --tgtdict pointing to the predictor's dictionary.")
    model = task.build_model(cfg.model, from_checkpoint=True)
    model.load_state_dict(state["model"], strict=True)
    model.eval()
    return model, task


def _predictor_task_config(task_cfg):
    """The file's task options as a ``vocab_prediction`` config, whatever
    task the file names: a predictor is only ever used with that task, and
    another task could evaluate what the file holds (``left_pad_source`` of
    multilingual_translation goes through ``eval``); options that
    ``vocab_prediction`` does not have are dropped."""
    with open_dict(task_cfg):
        task_cfg._name = PREDICTOR_TASK
        task_cfg.pop("task", None)
    return merge_with_parent(tasks.TASK_DATACLASS_REGISTRY[PREDICTOR_TASK](), task_cfg, remove_missing=True)


def _other_input_kind(folder, path, trained_on, source_features) -> Optional[str]:
    """The error for a captioning folder given to a predictor of source
    sentences (else None), checked before the folder's dictionaries are looked
    up: its file names make fairseq infer the target language 'None'
    (dict.None.txt), which names neither the folder nor the fix.  (A predictor
    of image features may read the targets of sentence pairs: not an error.)"""
    lang = single_dictionary_lang(folder)  # captions are binarized alone: one dictionary
    if lang is None or source_features is not None:
        return None
    return (f"{folder} is a captioning folder (its captions binarized alone, dict.{lang}.txt; the images are "
            f"read as features), but the predictor {path} predicts words from source sentences (trained on "
            f"{trained_on}): use a predictor trained on it with --source-features (fairseq-train {folder} "
            "--task vocab_prediction --arch vocab_predictor --source-features FEATURES_DIR)")


def _target_dictionary_file(folder, lang, reads_features) -> Optional[str]:
    """The target dictionary a predictor was trained with, as its data folder
    names it: dict.LANG.txt of the language it recorded, else of the folder's
    only dictionary (captions) or inferred language pair (sentence pairs); a
    relative folder as recorded, said to be relative to where it was trained."""
    if not folder:  # a checkpoint that records no data folder
        return None
    recorded = str(folder)
    if not os.path.isabs(recorded) and "://" not in recorded:  # as recorded: not to be read against this folder
        named = os.path.join(recorded, f"dict.{lang}.txt") if lang else f"the target dictionary of {recorded}"
        return f"{named}, relative to the folder its fairseq-train ran in"
    folder = data_folder(folder)
    if not lang and os.path.isdir(folder):
        lang = single_dictionary_lang(folder) if reads_features else data_utils.infer_language_pair(folder)[1]
    return os.path.join(folder, f"dict.{lang}.txt") if lang else None


# A prediction batch's padded tokens (examples x the longest one's tokens): the source embeddings it makes
# (that many x d floats) stay small, whatever the longest sentence of the split
PREDICT_MAX_TOKENS = 16384


def token_batches(indices, num_tokens, max_tokens: int = PREDICT_MAX_TOKENS, max_sentences: int = 256):
    """``indices`` (best sorted by ``num_tokens``, their sizes) cut into
    batches of at most ``max_sentences`` examples and ``max_tokens`` padded
    tokens; a sentence longer than ``max_tokens`` is a batch of its own
    (every example gets its prediction: none is filtered out or dropped)."""
    from fairseq.data.data_utils_fast import batch_by_size_vec

    # capped at the bound, a long sentence fits a batch alone, and nothing else fits beside it
    capped = np.minimum(np.asarray(num_tokens, dtype=np.int64), max_tokens)
    return batch_by_size_vec(np.asarray(indices, dtype=np.int64), capped, int(max_tokens), int(max_sentences), 1)


def longer_than(dataset, limits) -> np.ndarray:
    """Which examples fairseq-train skips as too long: a source longer than
    ``limits[0]`` or a target longer than ``limits[1]`` (--max-source-positions,
    --max-target-positions; None: no limit), as fairseq's
    ``filter_indices_by_size`` does.  Image features have no source length."""
    dataset = unwrapped(dataset)
    skipped = np.zeros(len(dataset), dtype=bool)
    for sizes, limit in ((getattr(dataset, "src_sizes", None), limits[0]), (getattr(dataset, "tgt_sizes", None),
                                                                            limits[1])):
        if sizes is not None and limit is not None:
            skipped |= np.asarray(sizes) > limit
    return skipped


def _num_tokens(dataset, indices) -> np.ndarray:
    """The examples' sizes for batching: fairseq's wrappers (KeepLastBatchDataset) leave
    ``num_tokens_vec`` unimplemented, the datasets they wrap have it."""
    try:
        return np.asarray(unwrapped(dataset).num_tokens_vec(indices))
    except NotImplementedError:
        return np.array([dataset.num_tokens(i) for i in indices], dtype=np.int64)


def _batches(task, split, max_sentences, max_tokens=PREDICT_MAX_TOKENS):
    """The split's batches, bounded by ``max_sentences`` and ``max_tokens``
    (``token_batches``), none filtered out or dropped."""
    if split not in task.datasets:
        task.load_dataset(split)
    dataset = task.dataset(split)
    order = dataset.ordered_indices()  # by length: little padding
    batches = token_batches(order, _num_tokens(dataset, order), max_tokens, max_sentences)
    return len(dataset), (dataset.collater([dataset[i] for i in batch]) for batch in batches)


def predict_lists(model, net_input, k: int, tgt_dict, gold: Optional[torch.Tensor] = None,
                  always: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Predict -> select: each example's K candidate ids (B x K, best first)
    from a batch's ``net_input``; ``gold`` (B x V 0/1) and ``always``
    (default: unk) are forced in."""
    always = (tgt_dict.unk(),) if always is None else tuple(always)
    return select_candidates(model.predict(**net_input), k, gold=gold, always=always)


@torch.no_grad()
def predict_candidates(model, task, split, k, include_gold=False, batch_size=256,
                       always: Optional[Sequence[int]] = None, gold_within: Optional[Tuple] = None,
                       max_tokens: int = PREDICT_MAX_TOKENS) -> np.ndarray:
    """Each example's K candidate target ids (best first) as an (N, K) array,
    predicted in batches of at most ``batch_size`` examples and
    ``max_tokens`` padded tokens.

    With ``include_gold`` every word of the gold target is forced in (the
    training split: 100% recall), except for the examples that fairseq-train
    skips as longer than ``gold_within`` ((max source, max target)
    positions, see ``longer_than``; None: none skipped).  ``always``
    (default: unk) are forced in for every example."""
    d = task.target_dictionary
    vocab = len(d)
    check_k(k, vocab)
    always = (d.unk(),) if always is None else tuple(always)
    n, batches = _batches(task, split, batch_size, max_tokens)
    skipped = longer_than(task.dataset(split), gold_within) if include_gold and gold_within else None
    out = np.empty((n, k), dtype=np.uint16 if vocab <= np.iinfo(np.uint16).max else np.int32)
    filled = np.zeros(n, dtype=bool)
    for sample in batches:
        gold = multi_hot(sample["target"], vocab, ignore=(d.pad(), d.bos())) if include_gold else None
        ids = sample["id"].numpy()
        if skipped is not None and skipped[ids].any():
            gold[torch.from_numpy(skipped[ids])] = 0.0
        try:
            out[ids] = predict_lists(model, sample["net_input"], k, d, gold=gold, always=always).numpy()
        except TooManyForcedWords as err:  # name the sentence by its id in the split, not its row in the batch
            raise ValueError(
                f"sentence {ids[err.row]} of split '{split}' needs {err.forced} forced words (its distinct gold "
                f"words, eos included, and {[d[i] for i in always]}), more than K = {k}: use K >= {err.forced} "
                "(scripts/export_candidates.py --k, fairseq-train --small-vocab-size)") from None
        filled[ids] = True
    if not filled.all():
        raise RuntimeError(f"{int((~filled).sum())} examples of {split} got no prediction")
    return out


@torch.no_grad()
def recall_at(model, task, split, ks: Sequence[int], batch_size=256, scores: Optional[torch.Tensor] = None,
              max_tokens: int = PREDICT_MAX_TOKENS) -> Dict[int, float]:
    """Token-level recall@K (percent) of the predictor on a split, for each K;
    with ``scores`` (one score per target word) a fixed ranking is measured
    instead, e.g. the frequency baseline."""
    for k in ks:
        check_k(k, len(task.target_dictionary))
    hits, tokens = np.zeros(len(ks), dtype=np.int64), 0
    _, batches = _batches(task, split, batch_size, max_tokens)
    for sample in batches:
        target = sample["target"]
        if scores is None:
            batch_scores = model.predict(**sample["net_input"])
        else:
            batch_scores = scores.unsqueeze(0).expand(target.size(0), -1)
        h, t = recall_hits(batch_scores, target, ks, task.target_dictionary.pad())
        hits += h
        tokens += t
    return {k: 100.0 * h / max(tokens, 1) for k, h in zip(ks, hits)}


def frequency_scores(task) -> torch.Tensor:
    """The frequency baseline's ranking: each target word's token count in the
    training split (eos included), no model."""
    counts = np.bincount(token_stream(task.training_targets()).astype(np.int64),
                         minlength=len(task.target_dictionary))
    return torch.from_numpy(counts.astype(np.float64))


def export_split(model, task, split, k, out_dir, predictor_path, digest=None, gold=False, batch_size=256,
                 path=None, gold_within: Optional[Tuple] = None):
    """Predict a split's K-candidate lists and write them as a candidate file
    (see candidates.py), by default ``out_dir/SPLIT.kK.npy``; ``gold`` and
    ``gold_within`` as ``predict_candidates``'s ``include_gold`` and
    ``gold_within``.  Returns (path, ids, seconds spent predicting)."""
    import time

    start = time.perf_counter()
    ids = predict_candidates(model, task, split, k, include_gold=gold, batch_size=batch_size,
                             gold_within=gold_within)
    seconds = time.perf_counter() - start
    meta = {"split": split, "vocab_size": len(task.target_dictionary),
            "target_dict_hash": dictionary_fingerprint(task.target_dictionary),
            "data": data_folder(task.cfg.data),
            "data_sha256": split_digest(task.dataset(split)),
            # absolute: a model trained on these lists records it, to find it from any folder when decoded
            "predictor": os.path.abspath(predictor_path), "predictor_sha256": digest or file_sha256(predictor_path),
            "gold_included": gold, "always_included": [task.target_dictionary.unk()],
            # the (source, target) lengths beyond which no gold word was forced in (fairseq-train skips those)
            "gold_within": list(gold_within) if gold and gold_within else None}
    return write_candidates(path or candidate_file(out_dir, split, k), ids, meta), ids, seconds

