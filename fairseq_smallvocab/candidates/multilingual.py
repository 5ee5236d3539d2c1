"""Candidates of multilingual batches: one vocabulary predictor per
language pair (or per target language), rows predicted batch by batch.

A multilingual batch mixes language pairs, so each row's candidates come
from the predictor of its own pair.  ``--vocab-predictor`` names them:

    en-de:CKPT_DE,en-fr:CKPT_FR     keyed by pair
    de:CKPT_DE,fr:CKPT_FR           keyed by target language (any source)
    CKPT                            one predictor for every pair

A row's pair is what the model is told: the target language is the
decoder's language token (the first target token under fairseq's
``--decoder-langtok``, the language decoded by fairseq-generate and
fairseq-interactive: ``--target-lang``), the source language the encoder's
token (``--encoder-langtok src``), else the only one there is.

Each predictor is a plugin ``vocab_predictor`` trained with its own data
folder's dictionaries: its target dictionary must be the model's shared one
(without the language tokens, which the multilingual task appends: checked,
same words in the same order), and it reads the source words by symbol.
Two kinds: one trained on a single pair of the multilingual folder
(``fairseq-train DATA --task vocab_prediction -s en -t de``; language tokens
are not its words and are left out), or one for every pair told the target
language, trained on ``prepare_target_tagged``'s data (each source behind its
target language's token): for it the row's target language token is added
to the source words.  A predictor of the first kind serves only the pair
its checkpoint records (its -s / -t): given under another pair's key or
another target language's, or as the one predictor for several pairs, it is
refused at the first row of a pair it was not trained on, naming both; one
that records no pair (trained without -s / -t) or languages this model does
not have is taken unchecked, with a warning.  One of the second kind (its
source dictionary holds language tokens) serves the target languages whose
tokens it was trained with, and is refused for another.

A row is fairseq's special symbols at their ids (positions 0..3, as in
``candidates.space``), then, under ``--decoder-langtok``, the row's target
language token (the first token the model emits: never missing, and not
counted in K), then the K - 4 predicted words; training rows hold every gold
word first (the paper's top K + gold indicator).  Rows are predicted on the
batch's device each step: a bag of embeddings and one |V| x d product per
batch, without lists kept on disk."""

import logging
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_smallvocab.predictor.inference import load_predictor
from fairseq_smallvocab.predictor.scoring import TooManyForcedWords, select_candidates

logger = logging.getLogger(__name__)

Pair = Tuple[Optional[str], str]  # (source language or None: any), target language
KEY = re.compile(r"^(?:([A-Za-z][\w]*)-)?([A-Za-z][\w]*)$")


def key_of(pair: Pair) -> str:
    """How ``--vocab-predictor`` names a pair: ``en-de``, or ``de`` for any source."""
    src, tgt = pair
    return f"{src}-{tgt}" if src else tgt


def parse_predictors(spec: Optional[str]) -> Dict[Pair, str]:
    """``--vocab-predictor``'s value as {(src or None, tgt or "*"): path}."""
    if not spec:
        return {}
    items = [item.strip() for item in str(spec).split(",") if item.strip()]
    keyed = [item.split(":", 1) for item in items if ":" in item and KEY.match(item.split(":", 1)[0])]
    if len(keyed) != len(items):
        if len(items) == 1 and not keyed:
            return {(None, "*"): items[0]}
        raise ValueError(f"--vocab-predictor {spec!r}: give one checkpoint for every pair (PATH), or one per pair "
                         "or target language: en-de:PATH,en-fr:PATH or de:PATH,fr:PATH")
    found: Dict[Pair, str] = {}
    for key, path in keyed:
        m = KEY.match(key)
        pair = (m.group(1), m.group(2))
        if pair in found:
            raise ValueError(f"--vocab-predictor names {key} twice")
        found[pair] = path
    return found


class PairPredictors:
    """The predictors of ``spec`` for a model's shared dictionary ``tgt_dict``
    (language tokens appended); ``tag_of(lang)`` is a language's token
    (``__de__``), ``langtok_ids`` the model's language token ids."""

    def __init__(self, spec: Dict[Pair, str], k: int, tgt_dict, tag_of: Callable[[str], str], langtok_ids):
        self.spec, self.k, self.dict, self.tag_of = spec, k, tgt_dict, tag_of
        self.langtok_ids = set(langtok_ids)
        self.nspecial = tgt_dict.nspecial
        self._loaded: Dict[str, tuple] = {}  # path -> (model, its source dictionary)
        self._trained_on: Dict[str, Tuple[Optional[str], Optional[str]]] = {}  # path -> its recorded -s / -t
        self._checked: set = set()  # the pairs whose predictor was checked against what it was trained on
        self._warned: set = set()  # the paths whose pair could not be checked (said once)
        self._maps: Dict[str, Tensor] = {}  # path -> the model's source ids in the predictor's dictionary

    def key_for(self, pair: Pair) -> Pair:
        """The key of ``spec`` that serves ``pair``: its own, its target language's, or the one for every pair."""
        src, tgt = pair
        for key in ((src, tgt), (None, tgt), (None, "*")):
            if key in self.spec:
                return key
        named = ", ".join(key_of(key) for key in self.spec)
        raise ValueError(f"--vocab-predictor has no predictor for {src or '?'}-{tgt} (it names {named}): add "
                         f"{key_of(pair)}:PATH, a predictor trained on that pair")

    def path_for(self, pair: Pair) -> str:
        return self.spec[self.key_for(pair)]

    def predictor(self, pair: Pair, device) -> Tuple[torch.nn.Module, Tensor, Optional[int]]:
        """(the pair's predictor on ``device``, the map of the model's source ids to its own, its id of the
        pair's target language token when it reads one, else None)."""
        path = self.path_for(pair)
        if path not in self._loaded:
            model, task = load_predictor(path)  # with the dictionaries it was trained with
            self.check_dictionary(path, task.target_dictionary)
            self._loaded[path] = (model, task.source_dictionary)
            self._trained_on[path] = task.recorded_langs
        model, src_dict = self._loaded[path]
        if pair not in self._checked:  # once a pair
            self.check_pair(pair, path, src_dict)
            self._checked.add(pair)
        if path not in self._maps or self._maps[path].device != torch.device(device):  # made once, kept there
            self._maps[path] = self.source_map(path, src_dict).to(device)
        return model.to(device), self._maps[path], src_dict.indices.get(self.tag_of(pair[1]))

    def check_pair(self, pair: Pair, path: str, src_dict):
        """Refuse the predictor ``path`` (``src_dict``: its source dictionary) for the rows of ``pair`` unless
        it was trained on them.  One told the target language (its source dictionary holds language tokens:
        trained on ``prepare_target_tagged``'s data) serves the target languages it has the token of.  One
        trained on a single pair serves the pair its checkpoint records (-s / -t, compared with the row's
        target language, and with its source language where the row's is known): given under another pair's
        or target language's key, or as the one predictor for several pairs, it is refused, naming the key,
        what the file records and the fix.  One that records no pair (trained without -s / -t: fairseq
        infers it from the folder and records nothing) or languages this model does not have (another
        folder's names) cannot be compared: taken, with a warning."""
        src, tgt = pair
        key = self.key_for(pair)
        given = (f"as the one predictor for every pair (--vocab-predictor {path})" if key == (None, "*")
                 else f"under {key_of(key)} (--vocab-predictor ...{key_of(key)}:{path}...)")
        tags = sorted(self.dict[i] for i in self.langtok_ids if self.dict[i] in src_dict.indices)
        if tags:  # told the target language
            if self.tag_of(tgt) not in src_dict.indices:
                raise ValueError(
                    f"the vocabulary predictor {path} was told the target languages {', '.join(tags)} in "
                    f"training (prepare_target_tagged's data), not {self.tag_of(tgt)}, but it is given {given} "
                    f"and would predict the words of {src or '?'}-{tgt} without their language: give "
                    f"{key_of((src, tgt))}:PATH, a predictor trained on that pair, or train it on "
                    f"prepare_target_tagged's data of every pair, {src or '?'}-{tgt} among them")
            return
        trained_src, trained_tgt = self._trained_on.get(path) or (None, None)
        if not self.is_language(trained_tgt):
            if path not in self._warned:
                self._warned.add(path)
                what = ("records no language pair (trained without -s / -t)" if trained_tgt is None else
                        f"records the pair {trained_src}-{trained_tgt}, not languages of this model")
                logger.warning(f"the vocabulary predictor {path} {what}: it is taken {given} without checking "
                               "that it was trained on that pair (a predictor of another pair gives rows that "
                               "miss this pair's words); a predictor trained with -s SRC -t TGT on this data "
                               "is checked")
            return
        if trained_tgt == tgt and (src is None or not self.is_language(trained_src) or trained_src == src):
            return
        trained = key_of((trained_src if self.is_language(trained_src) else None, trained_tgt))
        raise ValueError(
            f"the vocabulary predictor {path} was trained on {trained} (the -s / -t its checkpoint records), but "
            f"it is given {given} and would predict the words of {src or '?'}-{tgt}: give each pair the "
            f"predictor trained on it ({trained}:{path},{key_of((src, tgt))}:PATH), or one predictor told the "
            "target language for every pair (trained on prepare_target_tagged's data)")

    def is_language(self, lang: Optional[str]) -> bool:
        """Whether ``lang`` is a language of this model (its token is one of the model's language tokens)."""
        return lang is not None and self.dict.indices.get(self.tag_of(lang)) in self.langtok_ids

    def check_dictionary(self, path, predictor_dict):
        """The predictor's target dictionary must be the model's shared one
        without what the multilingual task appends (language tokens), and
        hold more than K words."""
        ours, theirs = self.dict.symbols, predictor_dict.symbols
        if len(theirs) > len(ours) or ours[: len(theirs)] != theirs \
                or not set(range(len(theirs), len(ours))) <= self.langtok_ids:
            raise ValueError(
                f"the predictor {path} was trained with another target dictionary ({len(theirs)} entries) than "
                f"the model's shared dictionary ({len(ours)} entries with the language tokens): train it on this "
                "data (fairseq-train DATA --task vocab_prediction -s SRC -t TGT ...)")
        if self.k > len(theirs):
            raise ValueError(f"--small-vocab-size {self.k} is larger than the predictor {path}'s dictionary "
                             f"({len(theirs)} entries): use K <= {len(theirs)}, or 0 for the full softmax")

    def source_map(self, path, src_dict) -> Tensor:
        """The predictor's id of each of the model's source ids, by symbol (its pad where it has none: the
        language tokens of a predictor trained on one pair).  Its words must be the shared dictionary's."""
        langs = {self.dict[i] for i in self.langtok_ids}
        words = [symbol for symbol in src_dict.symbols if symbol not in langs]
        if self.dict.symbols[: len(words)] != words:
            raise ValueError(f"the predictor {path} reads another source dictionary ({len(src_dict)} entries) "
                             "than the model's shared one: train it on this data (fairseq-train DATA --task "
                             "vocab_prediction ...)")
        ids = [src_dict.indices.get(symbol, src_dict.pad()) for symbol in self.dict.symbols]
        for i in self.langtok_ids:  # the source's own language token is not a word (nor the target's tag)
            ids[i] = src_dict.pad()
        return torch.tensor(ids)

    @torch.no_grad()
    def rows(self, src_tokens: Tensor, pairs: Sequence[Pair], langtoks: Optional[Tensor],
             gold: Optional[Tensor] = None) -> Tensor:
        """(B, [nspecial] + [1 langtok] + K - nspecial) int64 candidate rows on
        ``src_tokens``' device; ``langtoks`` (B,) the rows' language tokens,
        or None (no slot); ``gold`` (B, T) target ids forced in (training)."""
        b, device = src_tokens.size(0), src_tokens.device
        words = self.k - self.nspecial
        out = torch.empty(b, words, dtype=torch.long, device=device)
        groups: Dict[Pair, List[int]] = {}
        for i, pair in enumerate(pairs):
            groups.setdefault(pair, []).append(i)
        for pair, idx in groups.items():
            model, source_map, tag = self.predictor(pair, device)
            index = torch.tensor(idx, device=device)
            src = source_map[src_tokens.index_select(0, index)]  # language tokens it does not know: pad
            if tag is not None:  # a predictor told the target language: its token beside the words
                src = torch.cat([src, src.new_full((len(idx), 1), tag)], 1)
            scores = model.predict(src_tokens=src)
            # specials have their own positions and language tokens are no words: never among a row's words
            never = list(range(self.nspecial)) + [i for i in self.langtok_ids if i < scores.size(1)]
            scores[:, never] = -1.0
            forced = None
            if gold is not None:
                tgt = gold.index_select(0, index)
                tgt = tgt.masked_fill(tgt.ge(scores.size(1)) | tgt.lt(self.nspecial), self.dict.pad())
                forced = torch.zeros_like(scores).scatter_(1, tgt, 1.0)
                forced[:, never] = 0.0
            out[index] = self._words(scores, forced, words, idx)
        specials = torch.arange(self.nspecial, device=device).expand(b, self.nspecial)
        parts = [specials] + ([langtoks.view(b, 1).to(device)] if langtoks is not None else []) + [out]
        return torch.cat(parts, 1)

    def _words(self, scores: Tensor, forced: Optional[Tensor], words: int, idx: List[int]) -> Tensor:
        """The first ``words`` ids of each row's ranking (forced words first)."""
        try:
            top = select_candidates(scores, words, gold=forced)
        except TooManyForcedWords as err:
            raise ValueError(f"example {idx[err.row]} of the batch has {err.forced} distinct gold words, more than "
                             f"the K - {self.nspecial} = {words} words of a row: use a larger --small-vocab-size"
                             ) from None
        return top
