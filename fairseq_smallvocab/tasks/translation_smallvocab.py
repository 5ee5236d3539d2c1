"""Task ``translation_smallvocab``: fairseq's ``translation`` with a small,
input-specific target vocabulary in every batch.

Each batch carries ``net_input["candidates"]``, a B x K matrix of target ids
per example, built from the vocabulary predictor's lists: fairseq's special
symbols first, at their own ids (positions 0..3 = bos, pad, eos, unk), then the
example's predicted words.  Training lists hold every gold word (the
predictor's top K plus the gold indicator; lists cut to a smaller K are
checked to keep them); valid/test lists are the predicted top K.
``lstm_smallvocab`` then scores only those K words, and fairseq's
``cross_entropy`` / ``label_smoothed_cross_entropy`` work unchanged (the model
maps gold ids into candidate space).

Candidates come from ``--candidates-dir`` (lists exported by
``scripts/export_candidates.py``) or ``--vocab-predictor`` (computed once per
split and K and cached on disk in ``--candidates-dir``, by default the
predictor's folder/candidates, keyed by the predictor's SHA-256).  Either
way the lists must have been made from this very split: their file records a
digest of the split's content (``candidates.split_digest``), checked on load.
``--small-vocab-size 0`` (or K >= |V|) trains the same model with the full
softmax.
"""

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from fairseq import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II
from omegaconf.errors import OmegaConfBaseException

from fairseq_smallvocab.data import KeepLastBatchDataset

logger = logging.getLogger(__name__)


@dataclass
class TranslationSmallVocabConfig(TranslationConfig):
    vocab_predictor: Optional[str] = field(
        default=None, metadata={"help": "vocab_predictor checkpoint whose predictions give each example's "
                                        "candidates (computed once per split and cached)"})
    candidates_dir: Optional[str] = field(
        default=None, metadata={"help": "folder of candidate lists ({split}.kK.npy from "
                                        "scripts/export_candidates.py); with --vocab-predictor, the cache folder"})
    small_vocab_size: Optional[int] = field(
        default=None, metadata={"help": "K, candidates per example including the special symbols (default: "
                                        "1000 when |V| > 10,000, else 500; 0: full softmax)"})
    batch_splits: int = field(
        default=1, metadata={"help": "S: sort each training batch by length and run forward and backward on S "
                                     "chunks, accumulating the gradients before one update (less memory)"})
    # fairseq's own flags, read here to refuse them early where they cannot work (no help: no new option)
    fp16: bool = II("common.fp16")
    bf16: bool = II("common.bf16")


def default_small_vocab_size(vocab_size: int) -> int:
    """The paper's rule."""
    return 1000 if vocab_size > 10000 else 500


def candidate_rows(lists: np.ndarray, k: int, nspecial: int, where: str) -> np.ndarray:
    """(N, K) rows: the special ids 0..nspecial-1, then each list's first
    K - nspecial non-special ids, in the list's order (best first)."""
    lists = np.asarray(lists).astype(np.int64)
    keep = lists >= nspecial
    need = k - nspecial
    short = keep.sum(1) < need
    if short.any():
        row = int(np.flatnonzero(short)[0])
        raise ValueError(f"{where}: example {row} has only {int(keep[row].sum())} non-special candidates, "
                         f"{need} are needed for K = {k}; export the lists with a larger K")
    order = np.argsort(~keep, axis=1, kind="stable")[:, :need]
    words = np.take_along_axis(lists, order, axis=1)
    specials = np.broadcast_to(np.arange(nspecial, dtype=np.int64), (len(lists), nspecial))
    dtype = np.int32 if lists.max(initial=0) > np.iinfo(np.uint16).max else np.uint16
    return np.concatenate([specials, words], axis=1).astype(dtype)


def training_k_needed(lists: np.ndarray, targets, nspecial: int, vocab_size: int, chunk=512) -> Optional[int]:
    """The smallest K for which ``candidate_rows(lists, K)`` keeps every gold
    word of every example (``targets``: the split's fairseq token dataset,
    one target per list), or None when some gold word is not in its list at
    all.  Special ids are always in a row and need no room."""
    from fairseq_smallvocab.tasks.vocab_prediction import token_stream

    lists = np.asarray(lists)
    tokens = token_stream(targets).astype(np.int64)
    example = np.repeat(np.arange(len(targets.sizes), dtype=np.int64), np.asarray(targets.sizes, dtype=np.int64))
    words = tokens >= nspecial
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


def split_batch(sample, splits: int, pad: int):
    """Yield ``splits`` sub-batches of a collated translation batch: examples
    sorted by target length, tensors indexed per example, and the columns that
    hold only padding trimmed (source padding may be on either side)."""
    target = sample["target"]
    order = target.ne(pad).sum(1).argsort(descending=True, stable=True)
    for idx in order.chunk(splits):
        net = sample["net_input"]
        part = {key: value[idx] if torch.is_tensor(value) and value.dim() and value.size(0) == len(order)
                else value for key, value in net.items()}
        src = part["src_tokens"]
        part["src_tokens"] = src[:, src.ne(pad).any(0)]
        tgt = target[idx]
        cols = tgt.ne(pad).any(0)
        if "prev_output_tokens" in part:
            part["prev_output_tokens"] = part["prev_output_tokens"][:, cols]
        tgt = tgt[:, cols]
        yield {"id": sample["id"][idx], "nsentences": len(idx), "ntokens": int(tgt.ne(pad).sum()),
               "net_input": part, "target": tgt}


def gold_outside_candidates(candidates, target, tgt_dict):
    """(reference tokens, how many of them are not in their example's
    candidates), judged by the same mapping the model's get_targets uses."""
    from fairseq_smallvocab.models.lstm_smallvocab import candidate_positions

    real = target.ne(tgt_dict.pad())
    mapped = candidates.gather(1, candidate_positions(candidates, target, tgt_dict.unk()))
    return int(real.sum()), int((real & mapped.ne(target)).sum())


def _fairseq_flag(cfg, name) -> bool:
    """A boolean of fairseq's common config seen through the task config; False
    where it cannot be resolved (a task config outside fairseq's full config)."""
    try:
        return getattr(cfg, name, False) is True
    except OmegaConfBaseException:
        return False


def _check_training_precision(cfg):
    """fairseq 0.12 trains in --fp16 on CUDA only, and takes --bf16 for a TPU
    run (its options set --tpu), which needs torch_xla."""
    if _fairseq_flag(cfg, "fp16") and not torch.cuda.is_available():
        raise ValueError("training with --fp16 needs a CUDA GPU, and this machine has none (torch.cuda.is_available() "
                         "is False): fairseq's trainer would stop with an assertion. Drop the flag: on the CPU, "
                         "training runs in float32.")
    if _fairseq_flag(cfg, "bf16"):
        import importlib.util

        if importlib.util.find_spec("torch_xla") is None:
            raise ValueError("training with --bf16: fairseq 0.12 takes --bf16 for a TPU run (it sets --tpu) and "
                             "needs torch_xla, which is not installed, so its trainer would stop with an "
                             "AttributeError. Drop the flag (float32), or use --fp16 / --amp on a CUDA GPU.")


class CandidateDataset(KeepLastBatchDataset):
    """Adds ``net_input["candidates"]`` (B x K) to the wrapped dataset's batches."""

    def __init__(self, dataset, rows: np.ndarray):
        super().__init__(dataset)
        if len(rows) != len(dataset):
            raise ValueError(f"{len(rows)} candidate rows for {len(dataset)} examples")
        self.rows = rows

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if batch:  # the wrapped collater may reorder: index rows by the batch's ids
            batch["net_input"]["candidates"] = torch.from_numpy(self.rows[batch["id"].numpy()].astype(np.int64))
        return batch


@register_task("translation_smallvocab", dataclass=TranslationSmallVocabConfig)
class TranslationSmallVocabTask(TranslationTask):
    cfg: TranslationSmallVocabConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        vocab = len(tgt_dict)
        k = cfg.small_vocab_size if cfg.small_vocab_size is not None else default_small_vocab_size(vocab)
        if k < 0:
            raise ValueError(f"--small-vocab-size must be >= 0, got {k}")
        if 0 < k <= tgt_dict.nspecial:
            raise ValueError(f"--small-vocab-size {k} leaves no room for words beside the "
                             f"{tgt_dict.nspecial} special symbols")
        if k >= vocab:
            logger.warning(f"--small-vocab-size {k} >= the target vocabulary ({vocab}): using the full softmax")
            k = 0
        self.k = k
        if cfg.batch_splits < 1:
            raise ValueError(f"--batch-splits must be >= 1, got {cfg.batch_splits}")
        self._predictor_sha256 = None  # of --vocab-predictor, computed once
        self._predictor = None  # (model, task), loaded only when a split is not cached
        self._lists_predictor = None  # the predictor named by exported lists' metadata
        self._model_predictor = None  # the predictor recorded in a loaded model's config
        self._checkpoint_parts = {}  # name -> module whose state_dict travels with checkpoints

    def _predictor_path(self) -> Optional[str]:
        """--vocab-predictor, else the one recorded in the model checkpoint."""
        return self.cfg.vocab_predictor or (None if self.cfg.candidates_dir else self._model_predictor)

    def _require_source(self):
        if not (self._predictor_path() or self.cfg.candidates_dir):
            raise ValueError("a small vocabulary needs --vocab-predictor or --candidates-dir (or "
                             "--small-vocab-size 0 for the full softmax); decoding also finds the predictor "
                             "recorded in a checkpoint trained with --vocab-predictor")

    @property
    def small_vocab(self) -> bool:
        return self.k > 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch, combine, **kwargs)
        dataset = self.datasets[split]
        if not self.small_vocab:
            self.datasets[split] = KeepLastBatchDataset(dataset)
            return
        self.datasets[split] = CandidateDataset(dataset, self._candidate_rows(split, dataset, len(dataset)))

    def _candidate_rows(self, split, dataset, rows, examples=None) -> np.ndarray:
        """The split's (examples x K) candidate rows from its lists (one list
        per target sentence: ``rows`` of them); ``examples`` picks the rows
        of the examples the dataset serves (default: all).  Training rows are
        checked to hold every gold word, whichever path the lists came from."""
        from fairseq_smallvocab.candidates import split_digest

        self._require_source()
        lists, where = self._candidate_lists(split, rows, split_digest(dataset))
        if split == self.cfg.train_subset:
            need = training_k_needed(lists, dataset.tgt, self.tgt_dict.nspecial, len(self.tgt_dict))
            if need is None:
                raise ValueError(f"{where}: some training lists lack gold words of their sentence; the training "
                                 "split needs lists with every gold word (scripts/export_candidates.py includes "
                                 "them for train by default): export them again")
            if need > self.k:
                raise ValueError(f"--small-vocab-size {self.k} is too small for the training lists of {where}: "
                                 f"cut to K = {self.k} they would lose gold words (training lists must hold every "
                                 f"gold word); K = {need} keeps them all: pass --small-vocab-size {need} or more")
        if examples is not None:
            lists = np.asarray(lists)[examples]
        return candidate_rows(lists, self.k, self.tgt_dict.nspecial, where)

    # -- where the lists come from -------------------------------------------------------------

    def _data_folder(self) -> str:
        """The (first) data folder, absolute: how candidate files name their data."""
        return os.path.abspath(self.cfg.data.split(os.pathsep)[0])

    def _data_name(self, split):
        return f"split '{split}' of {self._data_folder()}"

    def _candidate_lists(self, split, rows, digest):
        from fairseq_smallvocab.candidates import read_candidates
        from fairseq_smallvocab.models.vocab_predictor import dictionary_fingerprint

        dict_hash = dictionary_fingerprint(self.tgt_dict)
        train = split == self.cfg.train_subset
        if self._predictor_path():
            return self._predicted_lists(split, rows, dict_hash, train, digest)
        path = self._exported_file(split)
        ids, meta = read_candidates(path, dict_hash=dict_hash, rows=rows, data_digest=digest,
                                    data_name=self._data_name(split))
        self._lists_predictor = self._lists_predictor or meta.get("predictor")
        if train and not meta.get("gold_included"):
            raise ValueError(f"{path} was exported without the gold words; the training split needs them "
                             "(scripts/export_candidates.py includes them for train by default)")
        return ids, str(path)

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
        from fairseq_smallvocab.candidates import DataMismatch, candidate_file, file_sha256, read_candidates
        from fairseq_smallvocab.predictor import export_split

        predictor = Path(self._predictor_path())
        if not predictor.is_file():
            given = "--vocab-predictor" if self.cfg.vocab_predictor else "the predictor recorded in the checkpoint"
            raise FileNotFoundError(f"{given}, {predictor}, not found; give its location with --vocab-predictor")
        cache = Path(self.cfg.candidates_dir or predictor.parent / "candidates")
        if self._predictor_sha256 is None:
            self._predictor_sha256 = file_sha256(predictor)
        path = candidate_file(cache, split, self.k)
        if path.exists():
            try:
                ids, meta = read_candidates(path, k=self.k, dict_hash=dict_hash, rows=rows, data_digest=digest,
                                            data_name=self._data_name(split))
                if meta.get("predictor_sha256") == self._predictor_sha256 and meta.get("gold_included") == train:
                    logger.info(f"candidates for {split}: cached {path}")
                    return ids, str(path)
            except DataMismatch as err:
                here = self._data_folder()
                if err.made_from != here:
                    raise DataMismatch(f"{err} Give this data a cache folder of its own with --candidates-dir "
                                       "(or remove the cached file if the other data is gone).") from None
                logger.warning(f"{path}: {here} changed since its candidates were cached; predicting them again")
            except ValueError as err:  # an older or half-written cache: it is only a cache
                logger.warning(f"{err}; predicting the candidates again")
        model, ptask = self._load_predictor()
        path, ids, seconds = export_split(model, ptask, split, self.k, cache, predictor, self._predictor_sha256,
                                          gold=train)
        logger.info(f"candidates for {split}: predicted in {seconds:.1f} s, cached in {path}")
        return ids, str(path)

    def build_model(self, cfg, from_checkpoint=False):
        from omegaconf import open_dict

        # a new model is built by fairseq-train; decoding builds from a checkpoint (and works in half precision
        # on the CPU), but fairseq's trainer fails where the flags cannot work: refuse before it does
        if not from_checkpoint:
            _check_training_precision(self.cfg)
        if hasattr(cfg, "vocab_predictor"):
            if from_checkpoint:  # decoding: the predictor behind the training candidates, unless one is given
                self._model_predictor = getattr(cfg, "vocab_predictor", None)
            else:  # training: record it in the model's config (saved with every checkpoint)
                path = self.cfg.vocab_predictor or self._lists_predictor
                with open_dict(cfg):
                    cfg.vocab_predictor = os.path.abspath(path) if path else None
        model = super().build_model(cfg, from_checkpoint)
        # criteria built after the model (reinforce_gleu's learned baseline) read the decoder state size here
        self.decoder_state_dim = getattr(model.decoder, "state_dim", None)
        return model

    # -- decoding --------------------------------------------------------------------------------

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """fairseq's generator, decoding inside each example's candidates
        (used by fairseq-generate, fairseq-interactive and --eval-bleu)."""
        if getattr(args, "max_len_a", 0) <= 0 and getattr(args, "max_len_b", 200) < 1:
            raise ValueError(f"--max-len-a {getattr(args, 'max_len_a', 0)} with --max-len-b "
                             f"{getattr(args, 'max_len_b', 200)} leaves no room for a single output token: pass "
                             "--max-len-b N (the longest output, e.g. 200), or --max-len-a R for R x the source "
                             "length + --max-len-b")
        if not self.small_vocab or seq_gen_cls is not None:
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                           prefix_allowed_tokens_fn)
        from fairseq_smallvocab.generation import SmallVocabSequenceGenerator

        unsupported = [flag for flag, used in [
            ("--score-reference", getattr(args, "score_reference", False)),
            ("--print-alignment", getattr(args, "print_alignment", False)),
            ("--constraints", getattr(args, "constraints", False)),
            ("prefix_allowed_tokens_fn", prefix_allowed_tokens_fn or getattr(args, "prefix_allowed_tokens_fn", None)),
        ] if used]
        if unsupported:
            raise ValueError(f"{', '.join(unsupported)} not supported inside a small vocabulary; "
                             "use --small-vocab-size 0 (full softmax)")
        return super().build_generator(models, args, seq_gen_cls=SmallVocabSequenceGenerator,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs)

    def _load_predictor(self):
        """(model, task) of the vocabulary predictor, loaded once."""
        from fairseq_smallvocab.predictor import load_predictor

        if self._predictor is None:
            self._predictor = load_predictor(self._predictor_path(), self.cfg.data.split(os.pathsep)[0],
                                             **self._predictor_overrides())
        return self._predictor

    def _predictor_overrides(self):
        """Task options the predictor needs beside the data folder: none, it
        reads source sentences (a predictor trained on image features is refused)."""
        return {"source_features": None}

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq-interactive's batches, with each line's candidates predicted
        on the fly (the predictor is loaded once)."""
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        if not self.small_vocab:
            return dataset
        self._require_source()
        if not self._predictor_path():
            raise ValueError("decoding raw text inside a small vocabulary needs the predictor (--vocab-predictor), "
                             "not exported lists")
        from fairseq_smallvocab.vocab import select_candidates

        model, _ = self._load_predictor()
        lists = []
        with torch.no_grad():
            for start in range(0, len(dataset), 256):
                batch = dataset.collater([dataset[i] for i in range(start, min(start + 256, len(dataset)))])
                probs = model.predict(**batch["net_input"])
                lists.append(select_candidates(probs, self.k, always=(self.tgt_dict.unk(),))[
                    batch["id"].argsort()].numpy())
        rows = candidate_rows(np.concatenate(lists), self.k, self.tgt_dict.nspecial, "fairseq-interactive input")
        return CandidateDataset(dataset, rows)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's decoding; an input without words (an empty line) gets an
        empty translation."""
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        if "src_tokens" not in sample["net_input"]:  # image features
            return hypos
        src = sample["net_input"]["src_tokens"]
        words = (src.ne(self.src_dict.pad()) & src.ne(self.src_dict.eos())).sum(1)
        for i in words.eq(0).nonzero().view(-1).tolist():
            for hypo in hypos[i]:
                hypo["tokens"] = hypo["tokens"].new_tensor([self.tgt_dict.eos()])
                hypo["positional_scores"] = hypo["positional_scores"][-1:] * 0
                hypo["score"] = hypo["score"] * 0
                if hypo.get("attention") is not None:
                    hypo["attention"] = hypo["attention"][:, -1:]
                if hypo.get("alignment") is not None:
                    hypo["alignment"] = hypo["alignment"][:0]
        return hypos

    # -- training ----------------------------------------------------------------------------------

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """With --batch-splits S > 1: forward and backward on S length-sorted
        chunks; fairseq's criteria return summed losses, so the accumulated
        gradient equals the whole batch's (before the trainer normalizes it)."""
        if self.cfg.batch_splits <= 1 or sample["target"].size(0) <= 1:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        total_loss, total_size, logs = 0.0, 0, []
        for chunk in split_batch(sample, self.cfg.batch_splits, self.tgt_dict.pad()):
            loss, size, log = super().train_step(chunk, model, criterion, optimizer, update_num, ignore_grad)
            total_loss, total_size = total_loss + loss.detach(), total_size + size
            logs.append(log)
        merged = {key: sum(log[key] for log in logs) for key in logs[0]}
        return total_loss, total_size, merged

    # -- state saved with checkpoints ------------------------------------------------------------

    def add_checkpoint_state(self, name, module):
        """Save ``module.state_dict()`` in every checkpoint and restore it when
        training resumes from one, through fairseq's task checkpoint dict
        (``extra_state[TaskClass]``): for state that is neither the model's
        nor a parameter of the criterion (reinforce_gleu's learned baseline).
        Fine-tuning from another checkpoint (--finetune-from-model,
        --reset-dataloader) starts it afresh, as fairseq does."""
        self._checkpoint_parts[name] = module

    def get_checkpoint_dict(self):
        return {self.__class__.__name__: {name: m.state_dict() for name, m in self._checkpoint_parts.items()}}

    def set_checkpoint_dict(self, state):
        for name, module in self._checkpoint_parts.items():
            if name in state:
                module.load_state_dict(state[name])
                logger.info(f"restored {name} from the checkpoint")
            else:
                logger.info(f"the checkpoint holds no {name}; starting a fresh one")

    # -- metrics ---------------------------------------------------------------------------------

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        candidates = sample["net_input"].get("candidates")
        if candidates is not None:
            tokens, outside = gold_outside_candidates(candidates, sample["target"], self.tgt_dict)
            logging_output["cand_tokens"], logging_output["cand_outside"] = tokens, outside
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        tokens = sum(log.get("cand_tokens", 0) for log in logging_outputs)
        if tokens:
            metrics.log_scalar_sum("_cand_tokens", tokens)
            metrics.log_scalar_sum("_cand_outside", sum(log.get("cand_outside", 0) for log in logging_outputs))
            # the share (%) of gold target tokens outside the example's candidates
            metrics.log_derived("gold_outside_cands", lambda m: round(
                100.0 * m["_cand_outside"].sum / m["_cand_tokens"].sum, 3))
