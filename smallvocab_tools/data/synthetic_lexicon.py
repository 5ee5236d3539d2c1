"""The synthetic corpus's lexicon (``synthetic``): its word classes and their
sizes, pronounceable pseudo-words (shorter ones for the more frequent ranks),
and the deterministic translation rules between the two vocabularies (one
target word per source content word, rarer source synonyms, compounds,
auxiliaries, determiners agreeing with the noun's gender)."""

from typing import Dict, List, Tuple

import numpy as np

OPEN_CLASSES = ("NOUN", "VERB", "ADJ", "ADV")
OPEN_SHARE = {"NOUN": 0.55, "VERB": 0.20, "ADJ": 0.17, "ADV": 0.08}
N_GENDERS = 3
N_DET_TYPES = 4  # types 0..2 are translated (x gender); type 3 is dropped
SRC_DETS_PER_TYPE = 2
N_AUX = 6
N_PARTICLES = 20
N_TGT_PREP = 40
N_SRC_PREP = 48  # 8 prepositions share a translation with another (many-to-one)
N_CONJ = 6
PUNCT = (",", ".")
COMMA = -1  # joins two clauses with "," instead of a conjunction
N_TGT_CLOSED = (N_DET_TYPES - 1) * N_GENDERS + N_AUX + N_PARTICLES + N_TGT_PREP + N_CONJ + 2
MIN_TGT_VOCAB = 200

SRC_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
TGT_SYLLABLES = [c + v for c in ("b", "ch", "d", "g", "h", "k", "l", "m", "n", "r", "sch", "t", "w")
                 for v in ("a", "e", "i", "o", "u", "ei", "au")]


def make_words(rng, syllables, n, taken):
    """n distinct pseudo-words not in ``taken``, shortest first."""
    words = []
    seen = set(taken)
    while len(words) < n:
        n_syl = int(rng.choice([1, 2, 3, 4], p=[0.1, 0.4, 0.35, 0.15]))
        word = "".join(syllables[i] for i in rng.integers(len(syllables), size=n_syl))
        if word not in seen:
            seen.add(word)
            words.append(word)
    words.sort(key=len)  # stable: frequent (low-rank) words are the short ones
    return words


class Lexicon:
    """The two vocabularies and the deterministic translation rules, drawn
    with ``rng`` for a ``synthetic.SyntheticConfig`` ``cfg``."""

    def __init__(self, cfg, rng: np.random.Generator):
        open_total = cfg.tgt_vocab_size - N_TGT_CLOSED
        sizes = {c: int(open_total * OPEN_SHARE[c]) for c in OPEN_CLASSES}
        sizes["NOUN"] += open_total - sum(sizes.values())
        src_taken, tgt_taken = set(PUNCT), set(PUNCT)

        def words(syllables, taken, n):
            w = make_words(rng, syllables, n, taken)
            taken.update(w)
            return w

        # closed classes
        self.src = {"DET": words(SRC_SYLLABLES, src_taken, N_DET_TYPES * SRC_DETS_PER_TYPE),
                    "PREP": words(SRC_SYLLABLES, src_taken, N_SRC_PREP),
                    "CONJ": words(SRC_SYLLABLES, src_taken, N_CONJ)}
        self.det_type = [i // SRC_DETS_PER_TYPE for i in range(N_DET_TYPES * SRC_DETS_PER_TYPE)]
        self.tgt_det = np.array(words(TGT_SYLLABLES, tgt_taken, (N_DET_TYPES - 1) * N_GENDERS),
                                dtype=object).reshape(N_DET_TYPES - 1, N_GENDERS)
        aux = words(TGT_SYLLABLES, tgt_taken, N_AUX)
        particles = words(TGT_SYLLABLES, tgt_taken, N_PARTICLES)
        tgt_prep = words(TGT_SYLLABLES, tgt_taken, N_TGT_PREP)
        # the last source prepositions share a translation with a frequent one
        self.prep_map = tgt_prep + [tgt_prep[int(i)] for i in rng.integers(10, size=N_SRC_PREP - N_TGT_PREP)]
        self.conj_map = words(TGT_SYLLABLES, tgt_taken, N_CONJ)

        # open classes: the first n_tgt source words (by rank) translate to
        # target words 0..n_tgt-1; the extra source words are rarer synonyms
        # of frequent target words, interleaved at random in the lower half.
        self.open_map: Dict[str, List[List[str]]] = {}
        self.gender: Dict[str, int] = {}
        for c in OPEN_CLASSES:
            n_tgt = sizes[c]
            n_syn = int(round(cfg.synonym_rate * n_tgt))
            tgt = words(TGT_SYLLABLES, tgt_taken, n_tgt)
            self.src[c] = words(SRC_SYLLABLES, src_taken, n_tgt + n_syn)
            target_of = np.concatenate([np.arange(n_tgt), rng.integers(max(1, n_tgt // 3), size=n_syn)])
            lower = target_of[n_tgt // 2:]
            rng.shuffle(lower)  # in place: a view of target_of
            mapping = [[tgt[j]] for j in target_of]
            if c == "NOUN":
                genders = rng.permutation(n_tgt) % N_GENDERS  # every gender is used
                self.gender = {w: int(g) for w, g in zip(tgt, genders)}
                for k, i in enumerate(self._pick(rng, len(mapping), cfg.compound_rate, N_PARTICLES)):
                    mapping[i] = mapping[i] + [particles[k % N_PARTICLES]]
            elif c == "VERB":
                for k, i in enumerate(self._pick(rng, len(mapping), cfg.aux_rate, N_AUX)):
                    mapping[i] = [aux[k % N_AUX]] + mapping[i]
            self.open_map[c] = mapping

        self.tgt_vocab = sorted(
            set(self.tgt_det.ravel()) | set(aux) | set(particles) | set(tgt_prep) | set(self.conj_map)
            | set(PUNCT) | {w for c in OPEN_CLASSES for out in self.open_map[c] for w in out})
        assert len(self.tgt_vocab) == cfg.tgt_vocab_size, (len(self.tgt_vocab), cfg.tgt_vocab_size)

        # One way to produce each target word, as a forced sampler item, for
        # the coverage pass: (kind, value) with kind an open class, "PREP",
        # "CONJ", "PUNCT" or "DET" (value: (source det, noun of the gender)).
        self.producer: Dict[str, Tuple[str, object]] = {}
        for c in OPEN_CLASSES:
            for i, out in enumerate(self.open_map[c]):
                for w in out:
                    self.producer.setdefault(w, (c, i))
        for i, w in enumerate(self.prep_map):
            self.producer.setdefault(w, ("PREP", i))
        for i, w in enumerate(self.conj_map):
            self.producer.setdefault(w, ("CONJ", i))
        self.producer[","] = ("CONJ", COMMA)  # "." ends every sentence
        noun_of_gender = {}
        for i, out in enumerate(self.open_map["NOUN"]):
            noun_of_gender.setdefault(self.gender[out[0]], i)
        for t in range(N_DET_TYPES - 1):
            for g in range(N_GENDERS):
                self.producer[self.tgt_det[t, g]] = ("DET", (t * SRC_DETS_PER_TYPE, noun_of_gender[g]))

    @staticmethod
    def _pick(rng, n, rate, at_least):
        """Indices of a random subset of range(n) of size about rate*n, at least
        ``at_least`` (so that every particle / auxiliary is used)."""
        k = min(n, max(at_least, int(round(rate * n))))
        return rng.choice(n, size=k, replace=False)

    def lexicon_rows(self):
        """(class, source word, target words) for every content word."""
        for c in OPEN_CLASSES:
            for s, t in zip(self.src[c], self.open_map[c]):
                yield c, s, " ".join(t)
