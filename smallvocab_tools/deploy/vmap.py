"""A CTranslate2 vocabulary map (``vmap``) made from a trained vocabulary predictor.

CTranslate2 restricts a batch's output vocabulary to the union of what its map allows for the batch's source
tokens and n-grams, plus one line of words always allowed (``use_vmap``).  Its map is static per token; the
predictor's candidates are per sentence.  The map here is the predictor asked about each source word alone and
about each frequent source bigram:

* the always-allowed line: the target words that are not words (punctuation), and the ``always`` words found in
  the most training targets (the predictor's prior p(i), saved in its checkpoint);
* each source word w: the ``per_token`` best words of ``predict([w])`` that the always line does not hold;
* each of the ``bigrams`` most frequent source bigrams (w1 w2) of the training split: the words among the
  ``per_token`` best of ``predict([w1, w2])`` that neither w1's line, w2's line nor the always line allow (no
  line where it adds nothing).

``coverage`` measures, on a split, what the map allows against what the predictor predicts for whole
sentences (its K candidates) and against the reference words.  CTranslate2 itself always allows unk, bos and
eos, and the target prefix."""

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Set, Tuple

import numpy as np
import torch

from fairseq_smallvocab.data.datasets import unwrapped


@dataclass
class VocabMap:
    always: List[str]
    words: Dict[Tuple[str, ...], List[str]] = field(default_factory=dict)  # source n-gram -> target words

    def lines(self):
        yield "\t" + " ".join(self.always)
        for key, targets in self.words.items():
            yield " ".join(key) + "\t" + " ".join(targets)

    def write(self, path):
        """Write the map as CTranslate2 reads it, replacing ``path`` only once it is complete."""
        path = os.fspath(path)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".vmap-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for line in self.lines():
                    f.write(line + "\n")
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    @classmethod
    def read(cls, path) -> "VocabMap":
        """A map file as ``write`` writes it (and CTranslate2 reads it)."""
        vmap = cls(always=[])
        for line in open(path, encoding="utf-8").read().splitlines():
            key, _, targets = line.partition("\t")
            if key:
                vmap.words[tuple(key.split(" "))] = targets.split()
            else:
                vmap.always.extend(targets.split())
        return vmap

    def allowed(self, tokens: Sequence[str]) -> Set[str]:
        """The target words the map allows for one source sentence (its tokens), as CTranslate2 looks them up
        (every unigram and bigram); CTranslate2 adds unk, bos and eos."""
        allowed = set(self.always)
        for n in (1, 2):
            for i in range(len(tokens) - n + 1):
                allowed.update(self.words.get(tuple(tokens[i:i + n]), ()))
        return allowed


def _is_word(symbol: str) -> bool:
    return any(ch.isalnum() for ch in symbol)


@torch.no_grad()
def _best(model, inputs: torch.Tensor, exclude: torch.Tensor, n: int, chunk: int = 512) -> torch.Tensor:
    """The ``n`` best target ids of the predictor for each row of source ids ``inputs`` (rows x width), the
    ``exclude`` ids (a |V| bool mask) left out."""
    out = []
    for part in inputs.split(chunk):
        scores = model.predict(src_tokens=part)
        scores[:, exclude] = -1.0
        out.append(scores.topk(n, dim=1).indices)
    return torch.cat(out) if out else torch.empty(0, n, dtype=torch.long)


def source_bigrams(task, split: str, count: int) -> List[Tuple[int, int]]:
    """The ``count`` most frequent bigrams of source words (no special symbol) in a split, most frequent first
    (ties in order of first appearance)."""
    if count <= 0:
        return []
    if split not in task.datasets:
        task.load_dataset(split)
    src = unwrapped(task.dataset(split)).src
    nspecial = task.source_dictionary.nspecial
    counts = Counter()
    for i in range(len(src)):
        ids = src[i].tolist()
        counts.update((a, b) for a, b in zip(ids, ids[1:]) if a >= nspecial and b >= nspecial)
    return [pair for pair, _ in counts.most_common(count)]


def build_vmap(model, task, per_token: int = 20, always: int = 100, bigrams: int = 0,
               split: str = "train") -> VocabMap:
    """The map of a trained predictor (``model``, in eval mode, and its ``vocab_prediction`` task): see the
    module's doc.  ``bigrams`` most frequent bigrams of ``split`` get a line where they add words."""
    if per_token < 1 or always < 0 or bigrams < 0:
        raise ValueError(f"the map's sizes must be per_token >= 1, always >= 0 and bigrams >= 0: got {per_token}, "
                         f"{always}, {bigrams}")
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    vocab = len(tgt_dict)
    words = torch.tensor([i >= tgt_dict.nspecial and _is_word(tgt_dict[i]) for i in range(vocab)])
    fixed = ~words  # specials and punctuation: always allowed (the specials by CTranslate2 itself)
    if always:
        prior = model.prior.clone()
        prior[~words] = -1.0
        fixed[prior.topk(min(always, int(words.sum()))).indices] = True
    per_token = min(per_token, int((~fixed).sum()))
    always_line = [tgt_dict[i] for i in range(tgt_dict.nspecial, vocab) if fixed[i]]
    vmap = VocabMap(always=always_line)
    if per_token == 0:
        return vmap
    sources = torch.arange(src_dict.nspecial, len(src_dict))
    best = _best(model, sources.unsqueeze(1), fixed, per_token)
    lines = {}
    for src_id, targets in zip(sources.tolist(), best.tolist()):
        lines[src_id] = targets
        vmap.words[(src_dict[src_id],)] = [tgt_dict[t] for t in targets]
    pairs = source_bigrams(task, split, bigrams)
    if pairs:
        best = _best(model, torch.tensor(pairs), fixed, per_token)
        for (a, b), targets in zip(pairs, best.tolist()):
            alone = set(lines[a]) | set(lines[b])
            new = [t for t in targets if t not in alone]
            if new:
                vmap.words[(src_dict[a], src_dict[b])] = [tgt_dict[t] for t in new]
    return vmap


@torch.no_grad()
def coverage(vmap: VocabMap, model, task, split: str, k: int, batch: int = 32, cands=None) -> Dict[str, float]:
    """What ``vmap`` allows on a split against the predictor's K candidates of each whole sentence and against
    the reference words (token level, eos left out): coverage rates in percent and mean allowance sizes (per
    sentence; per ``batch`` consecutive sentences, what CTranslate2 restricts a batch to).  ``cands``: the
    split's candidates where the caller has them (``predict_candidates(model, task, split, k)``)."""
    from fairseq_smallvocab.predictor.inference import predict_candidates

    if split not in task.datasets:
        task.load_dataset(split)
    pairs = unwrapped(task.dataset(split))
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    nspecial = tgt_dict.nspecial
    cands = predict_candidates(model, task, split, k) if cands is None else cands
    specials = {tgt_dict[i] for i in range(nspecial)}
    cand_hit = cand_total = ref_in_map = ref_in_cands = ref_total = 0
    sizes, unions = [], []
    union: Set[str] = set()
    for i in range(len(pairs)):
        src = [src_dict[t] for t in pairs.src[i].tolist() if t >= src_dict.nspecial]
        allowed = vmap.allowed(src) | specials
        words = {tgt_dict[t] for t in cands[i].tolist() if t >= nspecial}
        cand_hit += len(words & allowed)
        cand_total += len(words)
        ref = [tgt_dict[t] for t in pairs.tgt[i].tolist() if t != tgt_dict.eos()]
        ref_in_map += sum(w in allowed for w in ref)
        ref_in_cands += sum(w in words or w in specials for w in ref)  # unk: in both, as for the map
        ref_total += len(ref)
        sizes.append(len(allowed))
        union |= allowed
        if (i + 1) % batch == 0 or i + 1 == len(pairs):
            unions.append(len(union))
            union = set()
    pct = lambda a, b: 100.0 * a / max(b, 1)  # noqa: E731
    return {"sentences": len(pairs), "vocabulary": len(tgt_dict), "k": k,
            "candidates_covered": pct(cand_hit, cand_total), "reference_in_map": pct(ref_in_map, ref_total),
            "reference_in_candidates": pct(ref_in_cands, ref_total),
            "allowed_per_sentence": float(np.mean(sizes)), f"allowed_per_batch_{batch}": float(np.mean(unions))}


def map_size(vmap: VocabMap) -> Dict[str, float]:
    """Lines and entries of a map."""
    unigram = [v for key, v in vmap.words.items() if len(key) == 1]
    bigram = [v for key, v in vmap.words.items() if len(key) == 2]
    return {"always": len(vmap.always), "token_lines": len(unigram), "bigram_lines": len(bigram),
            "words_per_token_line": float(np.mean([len(v) for v in unigram])) if unigram else 0.0,
            "words_per_bigram_line": float(np.mean([len(v) for v in bigram])) if bigram else 0.0}


# how many points fewer reference words than the K candidates a map may allow (sized_vmap's target, the warning's
# threshold)
WITHIN = 1.0


def sized_vmap(model, task, split: str, k: int, start: int = 20, always: int = 100, bigrams: int = 0,
               batch: int = 32, within: float = WITHIN):
    """The map whose per-token lines are the shortest of ``start``, 2 ``start``, 4 ``start``, ... (at most K, or
    every word) that allows, on ``split``, the reference words within ``within`` points of what the predictor's K
    candidates allow: a map of fixed lines can hold far fewer of them than whole-sentence candidates (a user's
    default map allowed 87% of the reference words where K = 500 held 95%, and cost 12 BLEU).  Returns (map,
    its per-token words, its ``coverage``, [(per-token words, reference words allowed %) tried, in order])."""
    from fairseq_smallvocab.predictor.inference import predict_candidates

    if start < 1:
        raise ValueError(f"the map's per-token words start at >= 1: got {start}")
    if split not in task.datasets:
        task.load_dataset(split)
    cands = predict_candidates(model, task, split, k)
    tgt_dict = task.target_dictionary
    words = sum(_is_word(tgt_dict[i]) for i in range(tgt_dict.nspecial, len(tgt_dict)))
    most = max(start, min(k, words))
    per_token, tried = start, []
    while True:
        vmap = build_vmap(model, task, per_token=per_token, always=always, bigrams=bigrams)
        cover = coverage(vmap, model, task, split, k, batch, cands=cands)
        tried.append((per_token, cover["reference_in_map"]))
        if cover["reference_in_map"] >= cover["reference_in_candidates"] - within or per_token >= most:
            return vmap, per_token, cover, tried
        per_token = min(2 * per_token, most)


def describe_coverage(cover: Dict[str, float], split: str, per_token: int, tried=(),
                      within: float = WITHIN) -> List[str]:
    """The map's coverage as sentences for the export's output, and a warning where the map allows more than
    ``within`` points fewer reference words than the K candidates do."""
    batch = next(key for key in cover if key.startswith("allowed_per_batch_"))
    lines = [f"vocabulary map: {per_token} words per source word; on {split} ({cover['sentences']} "
             f"sentences) it allows {cover['reference_in_map']:.1f}% of the reference words, where the predictor's "
             f"K = {cover['k']} candidates allow {cover['reference_in_candidates']:.1f}%, and "
             f"{cover['candidates_covered']:.1f}% of those candidates; {cover['allowed_per_sentence']:.0f} target "
             f"words per sentence, {cover[batch]:.0f} per batch of {batch.rsplit('_', 1)[1]} (of "
             f"{cover['vocabulary']})"]
    if len(tried) > 1:
        lines.append("vocabulary map: per-token words raised until within a point of the candidates: " + ", ".join(
            f"{n} -> {pct:.1f}%" for n, pct in tried))
    short = cover["reference_in_candidates"] - cover["reference_in_map"]
    if short > within:
        lines.append(f"warning: the map allows {short:.1f} points fewer reference words than the K = {cover['k']} "
                     "candidates: CTranslate2 with use_vmap=True will lose BLEU the plugin's own decoding keeps. "
                     "Raise --vmap-per-token, add --vmap-bigrams N, or translate without use_vmap")
    return lines
