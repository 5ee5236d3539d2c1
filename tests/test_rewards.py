"""GLEU against a brute-force implementation of GNMT's definition."""

import random
from collections import Counter

import pytest
import torch

from fairseq_smallvocab.rewards import gleu, gleu_batch


def brute_gleu(hyp, ref, max_order=4):
    matches = hyp_total = ref_total = 0
    for n in range(1, max_order + 1):
        h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
        r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
        matches += sum(min(c, r[g]) for g, c in h.items())
        hyp_total += sum(h.values())
        ref_total += sum(r.values())
    return matches / max(hyp_total, ref_total) if max(hyp_total, ref_total) else 0.0


def test_known_values():
    assert gleu("the cat sat".split(), "the cat sat".split()) == 1.0
    assert gleu([], []) == 0.0 and gleu([5], []) == 0.0 and gleu([], [5, 6]) == 0.0
    # hyp "a a a a" vs ref "a": 1 clipped unigram match out of max(4+3+2+1, 1) n-grams
    assert gleu([7, 7, 7, 7], [7]) == pytest.approx(1 / 10)
    # min(precision, recall): 3 + 2 + 1 matches; hyp has 3+2+1, ref 4+3+2+1 n-grams
    assert gleu("a b c".split(), "a b c d".split()) == pytest.approx(6 / 10)
    assert gleu([1, 2], [2, 1], max_order=1) == 1.0 and gleu([1, 2], [2, 1], max_order=2) == pytest.approx(2 / 3)


@pytest.mark.parametrize("max_order", [1, 2, 4, 6])
def test_batch_equals_brute_force_on_random_sequences(max_order):
    rng = random.Random(max_order)
    bsz, lh, lr = 200, 12, 9
    hyp = torch.randint(0, 1000, (bsz, lh))  # padding positions hold junk, which must be ignored
    ref = torch.randint(0, 1000, (bsz, lr))
    hyp_lens = torch.tensor([rng.randint(0, lh) for _ in range(bsz)])
    ref_lens = torch.tensor([rng.randint(0, lr) for _ in range(bsz)])
    for b in range(bsz):  # small alphabets for repeated n-grams, sometimes copies of the reference
        alphabet = rng.choice([2, 3, 5, 50])
        hyp[b, : hyp_lens[b]] = torch.tensor([rng.randrange(alphabet) for _ in range(int(hyp_lens[b]))])
        ref[b, : ref_lens[b]] = torch.tensor([rng.randrange(alphabet) for _ in range(int(ref_lens[b]))])
        if b % 7 == 0:
            n = min(int(ref_lens[b]), lh)
            hyp[b, :n], hyp_lens[b] = ref[b, :n], n
    got = gleu_batch(hyp, hyp_lens, ref, ref_lens, max_order)
    want = [brute_gleu(hyp[b, : hyp_lens[b]].tolist(), ref[b, : ref_lens[b]].tolist(), max_order)
            for b in range(bsz)]
    assert got.tolist() == pytest.approx(want, abs=1e-6)
    assert 0 < sum(w == 1.0 for w in want) and 0 < sum(w == 0.0 for w in want)


def test_strings_and_ints_agree_and_large_ids_are_exact():
    words = "a man in a blue shirt is standing on a ladder".split()
    ref = "a man in a blue shirt stands on a ladder".split()
    ids = {w: 10**12 + i for i, w in enumerate(dict.fromkeys(words + ref))}
    assert gleu(words, ref) == pytest.approx(brute_gleu(words, ref))
    assert gleu([ids[w] for w in words], [ids[w] for w in ref]) == pytest.approx(brute_gleu(words, ref))


def test_many_distinct_tokens_and_high_orders_stay_exact():
    """Ids up to 10^6 and 8-grams (packed n-gram ids would overflow 64 bits)."""
    gen = torch.Generator().manual_seed(0)
    bsz, length = 150, 20
    ref = torch.randint(0, 10**6, (bsz, length), generator=gen)
    hyp = ref.clone()
    hyp[:, ::4] = torch.randint(0, 10**6, (bsz, (length + 3) // 4), generator=gen)  # partial overlap
    lens = torch.randint(0, length + 1, (bsz,), generator=gen)
    got = gleu_batch(hyp, lens, ref, lens.flip(0).clamp(min=lens.min()), max_order=8)
    want = [brute_gleu(hyp[b, : lens[b]].tolist(), ref[b, : max(int(lens.flip(0)[b]), int(lens.min()))].tolist(),
                       8) for b in range(bsz)]
    assert got.tolist() == pytest.approx(want, abs=1e-6) and max(want) > 0.3
