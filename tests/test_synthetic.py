"""The synthetic corpus: deterministic, exact vocabulary, Zipfian, learnable."""

import collections
import json

import pytest
from helpers import REPO, run

from smallvocab_tools.data.stats import zipf_slope
from smallvocab_tools.data.synthetic import SyntheticConfig, generate, write_corpus

SMALL = dict(tgt_vocab_size=500, train_size=600, valid_size=50, test_size=50)


@pytest.fixture(scope="module")
def medium():
    return generate(SyntheticConfig(tgt_vocab_size=2000, train_size=4000, valid_size=200, test_size=200))


def test_same_seed_same_bytes_other_seed_other_text(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_corpus(a, SyntheticConfig(**SMALL))
    write_corpus(b, SyntheticConfig(**SMALL))
    write_corpus(c, SyntheticConfig(**SMALL, seed=2))
    for name in ("train.src", "train.tgt", "valid.tgt", "test.src", "lexicon.tsv", "corpus.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "train.tgt").read_bytes() != (c / "train.tgt").read_bytes()


def test_files_and_split_sizes(tmp_path):
    info = write_corpus(tmp_path / "out", SyntheticConfig(**SMALL))
    out = tmp_path / "out"
    for split, n in (("valid", 50), ("test", 50)):
        for lang in ("src", "tgt"):
            assert len((out / f"{split}.{lang}").read_text().splitlines()) == n
    n_train = len((out / "train.src").read_text().splitlines())
    assert n_train == len((out / "train.tgt").read_text().splitlines())
    assert n_train == 600 + info["coverage_sentences"]
    assert json.loads((out / "corpus.json").read_text())["tgt_vocab_size"] == 500
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left


def test_every_target_word_occurs_in_train_exactly_the_configured_vocabulary(medium):
    lex, splits, info = medium
    train_types = {w for _, tgt in splits["train"] for w in tgt}
    assert len(train_types) == 2000 == info["tgt_vocab_size"]
    assert train_types == set(lex.tgt_vocab)
    # valid/test use only lexicon words too
    assert {w for _, tgt in splits["valid"] for w in tgt} <= train_types


def test_lengths_within_limits(medium):
    _, splits, _ = medium
    lengths = [len(side) for pairs in splits.values() for pair in pairs for side in pair]
    assert min(lengths) >= 5 and max(lengths) <= 50
    assert 10 <= sum(lengths) / len(lengths) <= 25  # natural-looking sentence lengths


def test_zipfian_frequencies(medium):
    _, splits, _ = medium
    counts = collections.Counter(w for _, tgt in splits["train"] for w in tgt)
    freqs = sorted(counts.values(), reverse=True)
    assert -1.8 < zipf_slope(freqs) < -0.9
    singletons = sum(1 for c in freqs if c == 1)
    assert singletons > 0.15 * len(freqs)  # a long tail of rare words...
    assert sum(freqs[: len(freqs) // 10]) > 0.7 * sum(freqs)  # ...and a few very frequent ones


def test_translation_is_a_function_of_the_source(medium):
    """Every content word's translation appears in the target sentence, the
    mapping has one-to-many and many-to-one words, and adjectives move after
    their noun (local reordering)."""
    lex, splits, _ = medium
    src_to_tgt = {src: tgt.split() for _, src, tgt in lex.lexicon_rows()}
    for src, tgt in splits["valid"]:
        tgt_counts = collections.Counter(tgt)
        needed = collections.Counter(w for s in src if s in src_to_tgt for w in src_to_tgt[s])
        assert not needed - tgt_counts
    assert any(len(t) == 2 for t in src_to_tgt.values())  # one-to-many
    by_target = collections.Counter(t[-1] for t in src_to_tgt.values())
    assert any(n > 1 for n in by_target.values())  # many-to-one
    adjs = {s for cls, s, _ in lex.lexicon_rows() if cls == "ADJ"}
    nouns = {s for cls, s, _ in lex.lexicon_rows() if cls == "NOUN"}
    swapped = 0
    for src, tgt in splits["valid"]:
        for a, n in zip(src, src[1:]):
            if a in adjs and n in nouns:
                ta, tn = src_to_tgt[a][0], src_to_tgt[n][0]
                if tgt.count(ta) == 1 and tgt.count(tn) == 1:
                    assert tgt.index(tn) < tgt.index(ta)
                    swapped += 1
    assert swapped > 10


def test_same_source_same_translation(medium):
    _, splits, _ = medium
    seen = {}
    for src, tgt in splits["train"]:
        key = tuple(src)
        assert seen.setdefault(key, tuple(tgt)) == tuple(tgt)


@pytest.mark.parametrize("bad, message", [
    (dict(tgt_vocab_size=50), "tgt_vocab_size must be at least"),
    (dict(max_len=8), "max_len must be at least 10"),
    (dict(min_len=20, max_len=10), "min_len <= max_len"),
    (dict(train_size=0), "train_size must be positive"),
    (dict(synonym_rate=1.5), "synonym_rate must be in"),
])
def test_bad_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        generate(SyntheticConfig(**{**SMALL, **bad}))


@pytest.mark.slow
def test_cli_refuses_existing_output_and_bad_size(tmp_path):
    script = REPO / "scripts" / "make_synthetic_corpus.py"
    out = tmp_path / "raw"
    run([script, "--out", out, "--tgt-vocab-size", "300", "--train-size", "300", "--valid-size", "10",
         "--test-size", "10"])
    again = run([script, "--out", out, "--tgt-vocab-size", "300"], check=False)
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr
    bad = run([script, "--out", tmp_path / "x", "--tgt-vocab-size", "20"], check=False)
    assert bad.returncode == 2 and "tgt_vocab_size must be at least" in bad.stderr
    assert not (tmp_path / "x").exists()
    forced = run([script, "--out", out, "--tgt-vocab-size", "300", "--train-size", "300",
                  "--valid-size", "10", "--test-size", "12", "--force"])
    assert forced.returncode == 0
    assert len((out / "test.src").read_text().splitlines()) == 12
