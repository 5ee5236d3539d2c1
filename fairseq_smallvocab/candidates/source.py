"""Where a task's candidate lists come from, in one place.

``CandidateSource`` gives the translation and captioning tasks each split's
candidate rows (``candidates.space``) and fairseq-interactive's rows for raw
input, from one of:

- ``--vocab-predictor CKPT``: predicted once per split and K and cached on
  disk in ``--candidates-dir`` (default: the predictor's folder/candidates),
  keyed by the predictor's SHA-256 and the split's content;
- ``--candidates-dir DIR`` alone: lists exported by
  ``scripts/export_candidates.py`` (the smallest K' >= K);
- the predictor recorded in the checkpoint being decoded (its model config's
  ``vocab_predictor``), when neither is given.

Either way the lists must have been made from this very split: their file
records a digest of the split's content (``candidates.split_digest``),
checked on load.  Training rows always hold every gold word: lists cut from
K' to K are checked (``training_k_needed``) whichever way they came.

Only fairseq-train's training split gets lists with the gold words forced
in.  Every other split is evaluated (validation BLEU, gold_outside_cands,
fairseq-generate), and so is the training split itself once a model is
loaded from a checkpoint (``loaded_model``: fairseq-generate --gen-subset
train): gold words in their lists would make the scores optimistic.  The
predictor then predicts its own lists (cached apart from the training
ones); exported lists with the gold words are refused unless
``--allow-gold-candidates`` accepts them, with a warning.
"""

import json
import logging
import re
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from fairseq_smallvocab.candidates.space import candidate_rows
from fairseq_smallvocab.data.datasets import data_folder, dictionary_fingerprint, token_stream
from fairseq_smallvocab.predictor.inference import (
    PredictorError,
    export_split,
    folder_instead_of_checkpoint,
    load_predictor,
    longer_than,
    predict_lists,
)
from fairseq_smallvocab.predictor.lists import (
    DataMismatch,
    candidate_file,
    file_sha256,
    read_candidates,
    split_digest,
)

logger = logging.getLogger(__name__)


def training_k_needed(lists: np.ndarray, targets, nspecial: int, vocab_size: int, chunk=512,
                      skipped: Optional[np.ndarray] = None) -> Optional[int]:
    """The smallest K for which ``candidate_rows(lists, K)`` keeps every gold
    word of every example (``targets``: the split's fairseq token dataset,
    one target per list), or None when some gold word is not in its list at
    all.  Special ids are always in a row and need no room; the examples
    ``skipped`` marks (training never reads them) need nothing."""
    lists = np.asarray(lists)
    tokens = token_stream(targets).astype(np.int64)
    example = np.repeat(np.arange(len(targets.sizes), dtype=np.int64), np.asarray(targets.sizes, dtype=np.int64))
    words = tokens >= nspecial
    if skipped is not None:
        words &= ~skipped[example]
    tokens, example = tokens[words], example[words]  # example ids ascending
    table = np.full((min(chunk, len(lists)), vocab_size), -1, dtype=np.int32)  # each word's rank in its row
    worst = -1
    for start in range(0, len(lists), chunk):
        block = lists[start:start + chunk].astype(np.int64)
        keep = block >= nspecial
        rank = np.cumsum(keep, axis=1) - 1  # position among the row's non-special ids
        r, c = np.nonzero(keep)
        table[r, block[r, c]] = rank[r, c]
        lo, hi = np.searchsorted(example, [start, start + len(block)])
        ranks = table[example[lo:hi] - start, tokens[lo:hi]]
        table[r, block[r, c]] = -1  # reset only what was set
        if (ranks < 0).any():
            return None
        worst = max(worst, int(ranks.max(initial=-1)))
    return nspecial + worst + 1


def _covers(recorded, wanted) -> bool:
    """Whether lists whose gold words were forced in up to the lengths
    ``recorded`` (None: every sentence) hold those of every sentence up to
    ``wanted``."""
    if recorded is None:
        return True
    return all(r is None or (w is not None and r >= w) for r, w in zip(recorded, wanted))


class CandidateSource:
    """The candidates of a task's splits and of raw input.  ``cfg``: the
    task's config (``data``, ``train_subset``, ``vocab_predictor``,
    ``candidates_dir``); ``predictor_overrides``: task options the predictor
    needs beside the data folder (``source_features`` for image features)."""

    def __init__(self, cfg, k: int, tgt_dict, predictor_overrides: Optional[Dict] = None):
        self.cfg, self.k, self.tgt_dict = cfg, k, tgt_dict
        self.predictor_overrides = dict(predictor_overrides or {})
        self._predictor_sha256 = None  # of the predictor, computed once
        self._predictor = None  # (model, task), loaded only when a split is not cached
        self.lists_predictor = None  # the predictor named by exported lists' metadata
        self.model_predictor = None  # the predictor recorded in a loaded model's config
        self.decoding = False  # a model was loaded from a checkpoint: every split is evaluated

    def loaded_model(self, model_cfg):
        """The task built a model from a checkpoint (fairseq-generate,
        -interactive, -validate, the hub interface), before reading any
        split: the predictor its config records is the default one, and
        every split is evaluated, the training split too."""
        self.model_predictor = getattr(model_cfg, "vocab_predictor", None)
        self.decoding = True

    def trains_on(self, split) -> bool:
        """Whether ``split`` is trained on, so that its lists hold every gold
        word: fairseq-train's training split, and nothing a loaded model
        decodes or scores."""
        return split == self.cfg.train_subset and not self.decoding

    def predictor_path(self) -> Optional[str]:
        """--vocab-predictor, else the one recorded in the model checkpoint."""
        return self.cfg.vocab_predictor or (None if self.cfg.candidates_dir else self.model_predictor)

    def predictor_to_record(self) -> Optional[str]:
        """The predictor a new model records in its config (saved with its
        checkpoints: the default when it is decoded): --vocab-predictor, else
        the one the --candidates-dir lists name, read from the training
        list's description now, because fairseq-train builds the model before
        it reads any split.  None when neither is known; a missing or broken
        list is reported when the split is read."""
        if self.cfg.vocab_predictor or self.lists_predictor or not self.cfg.candidates_dir:
            return self.cfg.vocab_predictor or self.lists_predictor
        try:
            meta = json.loads(self._exported_file(self.cfg.train_subset).with_suffix(".json").read_text())
        except (OSError, ValueError):
            return None
        return meta.get("predictor") if isinstance(meta, dict) else None

    def require(self):
        if not (self.predictor_path() or self.cfg.candidates_dir):
            raise ValueError("a small vocabulary needs --vocab-predictor or --candidates-dir (or "
                             "--small-vocab-size 0 for the full softmax); decoding also finds the predictor "
                             "recorded in a checkpoint trained with --vocab-predictor")

    def split_rows(self, split, dataset, rows, examples=None) -> np.ndarray:
        """The split's (examples x K) candidate rows from its lists (one list
        per target sentence: ``rows`` of them); ``examples`` picks the rows
        of the examples the dataset serves (default: all).  Training rows are
        checked to hold every gold word, whichever path the lists came from."""
        self.require()
        lists, where = self._candidate_lists(split, rows, split_digest(dataset))
        if self.trains_on(split):
            need = training_k_needed(lists, dataset.tgt, self.tgt_dict.nspecial, len(self.tgt_dict),
                                     skipped=longer_than(dataset, self.gold_within()))
            if need is None:
                src, tgt = self.gold_within()
                raise ValueError(f"{where}: some training lists lack gold words of their sentence; the training "
                                 "split needs lists with every gold word (scripts/export_candidates.py includes "
                                 "them for train by default, except for sentences longer than its "
                                 "--max-source-positions / --max-target-positions, which fairseq-train skips): "
                                 f"export them again, with --max-source-positions {src} --max-target-positions "
                                 f"{tgt} as this run's")
            if need > self.k:
                raise ValueError(f"--small-vocab-size {self.k} is too small for the training lists of {where}: "
                                 f"cut to K = {self.k} they would lose gold words (training lists must hold every "
                                 f"gold word); K = {need} keeps them all: pass --small-vocab-size {need} or more")
        if examples is not None:
            lists = np.asarray(lists)[examples]
        return candidate_rows(lists, self.k, self.tgt_dict.nspecial, where)

    def gold_within(self):
        """(longest source, longest target) that fairseq-train reads: training
        lists need the gold words of these sentences only (it skips longer
        ones: --max-source-positions, --max-target-positions)."""
        return (getattr(self.cfg, "max_source_positions", None), getattr(self.cfg, "max_target_positions", None))

    # -- where the lists come from -------------------------------------------------------------

    def _data_name(self, split):
        return f"split '{split}' of {data_folder(self.cfg.data)}"

    def _candidate_lists(self, split, rows, digest):
        dict_hash = dictionary_fingerprint(self.tgt_dict)
        train = self.trains_on(split)
        if self.predictor_path():
            return self._predicted_lists(split, rows, dict_hash, train, digest)
        path = self._exported_file(split)
        ids, meta = read_candidates(path, dict_hash=dict_hash, rows=rows, data_digest=digest,
                                    data_name=self._data_name(split), vocab_size=len(self.tgt_dict))
        self.lists_predictor = self.lists_predictor or meta.get("predictor")
        if train and not meta.get("gold_included"):
            raise ValueError(f"{path} was exported without the gold words; the training split needs them "
                             "(scripts/export_candidates.py includes them for train by default)")
        if not train and meta.get("gold_included"):
            self._gold_in_evaluated_lists(path, split)
        return ids, str(path)

    def _gold_in_evaluated_lists(self, path, split):
        """Exported lists with the gold words forced in, for a split that is
        evaluated: refused, or accepted with a warning when asked for."""
        if getattr(self.cfg, "allow_gold_candidates", False):  # getattr: configs saved before the option
            logger.warning(f"{path}: the lists of '{split}' hold its gold words (forced in when exported) and "
                           f"--allow-gold-candidates accepts them: the scores of '{split}' (BLEU, "
                           "gold_outside_cands) are optimistic")
            return
        why = ("a model loaded from a checkpoint decodes or scores it" if self.decoding
               else "only the training split is trained on")
        raise ValueError(
            f"{path} holds lists with the gold words forced in (scripts/export_candidates.py --gold always, or "
            f"the training split's lists), but '{split}' is evaluated here ({why}): its BLEU and "
            "gold_outside_cands would be optimistic. Export its lists without them (scripts/export_candidates.py "
            f"--splits {split} --gold never, into the --candidates-dir given here), or give --vocab-predictor to "
            "predict them, or pass --allow-gold-candidates to use these lists knowingly")

    def _exported_file(self, split):
        """The split's exported list with the smallest K' >= K."""
        folder = Path(self.cfg.candidates_dir)
        found = {}
        for path in folder.glob(f"{split}.k*.npy"):
            m = re.fullmatch(rf"{re.escape(split)}\.k(\d+)\.npy", path.name)
            if m and int(m.group(1)) >= self.k:
                found[int(m.group(1))] = path
        if not found:
            raise FileNotFoundError(f"no candidate list for '{split}' with K >= {self.k} in {folder}; write one "
                                    f"with scripts/export_candidates.py --splits {split} --k {self.k}")
        return found[min(found)]

    def _predicted_lists(self, split, rows, dict_hash, train, digest):
        """Lists from --vocab-predictor, computed once per split and K and
        cached on disk, keyed by the predictor's SHA-256 and the split's
        content.  A cache of the same data folder whose content changed is
        recomputed; one made from another data folder is refused (two data
        sets must not share a cache folder)."""
        predictor = Path(self.predictor_path())
        given = "--vocab-predictor" if self.cfg.vocab_predictor else "the predictor recorded in the checkpoint"
        folder = folder_instead_of_checkpoint(predictor, given)
        if folder:
            raise PredictorError(folder)
        if not predictor.is_file():
            moved = (" (a checkpoint names its predictor by the absolute path it had when it was trained: after "
                     "moving them, give the predictor's new path)") if not self.cfg.vocab_predictor else ""
            raise FileNotFoundError(f"{given}, {predictor}, not found; give its location with --vocab-predictor"
                                    + moved)
        cache = Path(self.cfg.candidates_dir or predictor.parent / "candidates")
        if self._predictor_sha256 is None:
            self._predictor_sha256 = file_sha256(predictor)
        path = candidate_file(cache, split, self.k)
        if split == self.cfg.train_subset and not train:
            # a loaded model decodes the training split: the predictor's own lists, in a file of their own so
            # that fairseq-train's lists (gold words forced in) stay cached beside them
            path = path.with_name(f"{split}.k{self.k}.nogold.npy")
            logger.info(f"candidates for {split}: the predictor's own lists, without the gold words forced in "
                        "(the training lists hold them; this run decodes or scores the split)")
        if path.exists():
            try:
                ids, meta = read_candidates(path, k=self.k, dict_hash=dict_hash, rows=rows, data_digest=digest,
                                            data_name=self._data_name(split), vocab_size=len(self.tgt_dict))
                if (meta.get("predictor_sha256") == self._predictor_sha256 and meta.get("gold_included") == train
                        and (not train or _covers(meta.get("gold_within"), self.gold_within()))):
                    logger.info(f"candidates for {split}: cached {path}")
                    return ids, str(path)
            except DataMismatch as err:
                here = data_folder(self.cfg.data)
                if err.made_from != here:
                    raise DataMismatch(f"{err} Give this data a cache folder of its own with --candidates-dir "
                                       "(or remove the cached file if the other data is gone).") from None
                logger.warning(f"{path}: {here} changed since its candidates were cached; predicting them again")
            except ValueError as err:  # an older or half-written cache: it is only a cache
                logger.warning(f"{err}; predicting the candidates again")
        model, ptask = self.load_predictor()
        path, ids, seconds = export_split(model, ptask, split, self.k, cache, predictor, self._predictor_sha256,
                                          gold=train, path=path, gold_within=self.gold_within() if train else None)
        logger.info(f"candidates for {split}: predicted in {seconds:.1f} s, cached in {path}")
        return ids, str(path)

    def load_predictor(self):
        """(model, task) of the vocabulary predictor, loaded once."""
        if self._predictor is None:
            self._predictor = load_predictor(self.predictor_path(), data_folder(self.cfg.data),
                                             **self.predictor_overrides)
        return self._predictor

    def inference_rows(self, src_tokens: torch.Tensor, where="fairseq-interactive input") -> torch.Tensor:
        """(B, K) int64 rows, on ``src_tokens``' device, for a batch of raw
        input that has none (fairseq-interactive, the hub interface),
        predicted by the predictor (loaded once, on the CPU) from the batch's
        source tokens, as a cached split's lists are."""
        self.require()
        if not self.predictor_path():
            raise ValueError("decoding raw text inside a small vocabulary needs the predictor (--vocab-predictor), "
                             "not exported lists")
        model, _ = self.load_predictor()
        with torch.no_grad():
            lists = predict_lists(model, {"src_tokens": src_tokens.cpu()}, self.k, self.tgt_dict).numpy()
        rows = candidate_rows(lists, self.k, self.tgt_dict.nspecial, where)
        return torch.from_numpy(rows.astype(np.int64)).to(src_tokens.device)
