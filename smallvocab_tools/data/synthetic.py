"""A synthetic parallel corpus with realistic statistics, generated from a seed.

The "languages" are made of pronounceable pseudo-words (shorter words are more
frequent, as in natural language).  Sentences come from a small grammar:

    sentence := clause ((CONJ | ",") clause)* "."
    clause   := NP VERB [ADV] [NP] (PREP NP)*
    NP       := [DET] ADJ* NOUN

Within each open word class (nouns, verbs, adjectives, adverbs) words are drawn
from a Zipf distribution, so the corpus has a long tail of rare words.

The translation of a sentence is a deterministic function of the sentence, so
the target vocabulary is predictable from the source and translation is
learnable:

* lexical mapping: every source content word has one target word; about 10% of
  the target words have a second, rarer source synonym (many-to-one); 5% of the
  nouns translate into a compound of two target words and 15% of the verbs into
  an auxiliary plus the verb (one-to-many);
* agreement: the target determiner depends on the determiner's type and on the
  gender of the target noun it introduces (one source word, several target
  words, chosen by context); one determiner type has no translation;
* local reordering: adjectives follow their noun in the target, and an adverb
  moves in front of its verb (after the auxiliary).

Every target word of the lexicon occurs in the training split: words the Zipf
draw missed are placed into extra training sentences (coverage), so the target
dictionary that ``fairseq-preprocess`` builds has exactly ``tgt_vocab_size``
words (plus fairseq's special symbols).
"""

import json
from dataclasses import asdict, dataclass
from typing import Dict, List

import numpy as np

from smallvocab_tools.data.output_dir import atomic_output_dir
from smallvocab_tools.data.synthetic_lexicon import (
    COMMA,
    MIN_TGT_VOCAB,
    N_CONJ,
    N_DET_TYPES,
    N_SRC_PREP,
    OPEN_CLASSES,
    PUNCT,
    Lexicon,
)


@dataclass
class SyntheticConfig:
    tgt_vocab_size: int = 24000
    train_size: int = 50000
    valid_size: int = 1000
    test_size: int = 1000
    min_len: int = 5
    max_len: int = 50
    zipf_exponent: float = 1.3  # tail calibrated on Multi30k German
    synonym_rate: float = 0.10
    compound_rate: float = 0.05
    aux_rate: float = 0.15
    seed: int = 1

    def validate(self):
        if self.tgt_vocab_size < MIN_TGT_VOCAB:
            raise ValueError(f"tgt_vocab_size must be at least {MIN_TGT_VOCAB}, got {self.tgt_vocab_size}")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.max_len < 10:
            raise ValueError(f"max_len must be at least 10, got {self.max_len}")
        for name in ("train_size", "valid_size", "test_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.train_size == 0:
            raise ValueError("train_size must be positive")
        if self.zipf_exponent <= 0:
            raise ValueError("zipf_exponent must be positive")
        for name in ("synonym_rate", "compound_rate", "aux_rate"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1]")


class _Sampler:
    """Seeded draws: Zipfian words per open class from pre-drawn pools, and
    forced items (the coverage pass), at most ``budget`` per sentence."""

    POOL = 1 << 16

    def __init__(self, lex: Lexicon, cfg: SyntheticConfig, rng: np.random.Generator):
        self.rng = rng
        self.probs = {}
        for c in OPEN_CLASSES:
            ranks = np.arange(1, len(lex.src[c]) + 1, dtype=np.float64)
            p = 1.0 / (ranks + 2.7) ** cfg.zipf_exponent
            self.probs[c] = p / p.sum()
        self.pools = {c: [] for c in OPEN_CLASSES}
        self.forced: Dict[str, List[object]] = {}
        self.budget = 0

    def take(self, kind):
        """A forced item of this kind, or None."""
        queue = self.forced.get(kind)
        if queue and self.budget > 0:
            self.budget -= 1
            return queue.pop()
        return None

    def word(self, c):
        forced = self.take(c)
        if forced is not None:
            return forced
        if not self.pools[c]:
            self.pools[c] = self.rng.choice(len(self.probs[c]), size=self.POOL, p=self.probs[c]).tolist()
        return self.pools[c].pop()


def _noun_phrase(lex, s, rng, src, tgt):
    forced = s.take("DET")
    det = int(rng.integers(len(lex.src["DET"]))) if rng.random() < 0.8 else None
    n_adj = int(rng.choice(3, p=[0.6, 0.3, 0.1]))
    adjs = [s.word("ADJ") for _ in range(n_adj)]
    if forced is not None:
        det, noun = forced
    else:
        noun = s.word("NOUN")
    noun_t = lex.open_map["NOUN"][noun]
    if det is not None:
        src.append(lex.src["DET"][det])
        dtype = lex.det_type[det]
        if dtype < N_DET_TYPES - 1:
            tgt.append(lex.tgt_det[dtype, lex.gender[noun_t[0]]])
    src.extend(lex.src["ADJ"][a] for a in adjs)
    src.append(lex.src["NOUN"][noun])
    tgt.extend(noun_t)  # adjectives follow the noun in the target
    for a in adjs:
        tgt.extend(lex.open_map["ADJ"][a])


def _clause(lex, s, rng, src, tgt):
    _noun_phrase(lex, s, rng, src, tgt)
    verb = s.word("VERB")
    verb_t = lex.open_map["VERB"][verb]
    src.append(lex.src["VERB"][verb])
    if rng.random() < 0.25:
        adv = s.word("ADV")
        src.append(lex.src["ADV"][adv])
        # the adverb moves in front of the verb, after an auxiliary if any
        tgt.extend(verb_t[:-1] + lex.open_map["ADV"][adv] + verb_t[-1:])
    else:
        tgt.extend(verb_t)
    if rng.random() < 0.7:
        _noun_phrase(lex, s, rng, src, tgt)
    n_pp = int(rng.choice(3, p=[0.5, 0.35, 0.15]))
    forced = s.take("PREP")
    for k in range(max(n_pp, forced is not None)):
        p = forced if (k == 0 and forced is not None) else int(rng.integers(N_SRC_PREP))
        src.append(lex.src["PREP"][p])
        tgt.append(lex.prep_map[p])
        _noun_phrase(lex, s, rng, src, tgt)


def _sentence(lex, s, rng):
    src: List[str] = []
    tgt: List[str] = []
    n_clauses = int(rng.geometric(0.55))
    forced = s.take("CONJ")
    if forced is not None:
        n_clauses = max(n_clauses, 2)
    for i in range(n_clauses):
        if i:
            if i == 1 and forced is not None:
                j = forced
            else:
                j = COMMA if rng.random() < 0.5 else int(rng.integers(N_CONJ))
            src.append("," if j == COMMA else lex.src["CONJ"][j])
            tgt.append("," if j == COMMA else lex.conj_map[j])
        _clause(lex, s, rng, src, tgt)
    src.append(".")
    tgt.append(".")
    return src, tgt


def _fits(cfg, pair):
    return all(cfg.min_len <= len(side) <= cfg.max_len for side in pair)


def _split(lex, cfg, rng, n, cover=False):
    s = _Sampler(lex, cfg, rng)
    pairs = []
    drawn = 0
    while len(pairs) < n:
        pair = _sentence(lex, s, rng)
        drawn += 1
        if _fits(cfg, pair):
            pairs.append(pair)
        elif drawn > 100 * (len(pairs) + 100):
            raise RuntimeError(f"almost no sentence fits lengths {cfg.min_len}..{cfg.max_len}; widen them")
    n_cover = 0
    if cover:
        seen = {w for _, tgt in pairs for w in tgt}
        for w in lex.tgt_vocab:
            if w not in seen:
                kind, value = lex.producer[w]
                s.forced.setdefault(kind, []).append(value)
        # forced words go into extra sentences, at most two per sentence; the
        # items of a sentence that does not fit the length limits are put back
        rejected = 0
        while any(s.forced.values()):
            before = {k: list(v) for k, v in s.forced.items()}
            s.budget = 2
            pair = _sentence(lex, s, rng)
            if _fits(cfg, pair):
                pairs.append(pair)
                n_cover += 1
                rejected = 0
            else:
                s.forced = before
                rejected += 1
                if rejected > 10000:
                    raise RuntimeError("cannot fit the coverage sentences into the length limits; "
                                       "raise max_len")
        s.budget = 0
        order = rng.permutation(len(pairs))
        pairs = [pairs[i] for i in order]
    return pairs, n_cover


def generate(cfg: SyntheticConfig):
    """Returns (lexicon, {split: [(src_tokens, tgt_tokens)]}, info dict)."""
    cfg.validate()
    lex_seed, train_seed, valid_seed, test_seed = np.random.SeedSequence(cfg.seed).spawn(4)
    lex = Lexicon(cfg, np.random.default_rng(lex_seed))
    splits = {}
    train, n_cover = _split(lex, cfg, np.random.default_rng(train_seed), cfg.train_size, cover=True)
    splits["train"] = train
    splits["valid"], _ = _split(lex, cfg, np.random.default_rng(valid_seed), cfg.valid_size)
    splits["test"], _ = _split(lex, cfg, np.random.default_rng(test_seed), cfg.test_size)
    info = {"config": asdict(cfg), "coverage_sentences": n_cover,
            "src_vocab_size": len({w for c in lex.src for w in lex.src[c]} | set(PUNCT)),
            "tgt_vocab_size": len(lex.tgt_vocab)}
    return lex, splits, info


def write_corpus(out_dir, cfg: SyntheticConfig, src_lang="src", tgt_lang="tgt", overwrite=False):
    """Generate the corpus into ``out_dir`` (a new folder: written to a
    temporary sibling and renamed at the end, so it is never half-written).
    Writes {train,valid,test}.{src_lang,tgt_lang}, lexicon.tsv and corpus.json."""
    if src_lang == tgt_lang:
        raise ValueError(f"source and target language names must differ, both are {src_lang!r}")
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        lex, splits, info = generate(cfg)
        for name, pairs in splits.items():
            for lang, side in ((src_lang, 0), (tgt_lang, 1)):
                with open(tmp / f"{name}.{lang}", "w", encoding="utf-8") as f:
                    for pair in pairs:
                        f.write(" ".join(pair[side]) + "\n")
        with open(tmp / "lexicon.tsv", "w", encoding="utf-8") as f:
            for row in lex.lexicon_rows():
                f.write("\t".join(row) + "\n")
        info.update(src_lang=src_lang, tgt_lang=tgt_lang,
                    sentences={k: len(v) for k, v in splits.items()})
        (tmp / "corpus.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
