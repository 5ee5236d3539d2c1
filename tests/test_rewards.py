"""GLEU against a brute-force implementation of GNMT's definition."""

import math
import random
from collections import Counter

import pytest
import torch

from fairseq_smallvocab.reinforce.rewards import gleu, gleu_batch, named_reward


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


def test_gleu_bp_makes_a_dropped_word_cost_the_reward():
    """GLEU is min(precision, recall): a sample that drops words it had right
    scores as much as (or more than) one that keeps them; times the brevity
    penalty it scores less, by exp(1 - r / h) (Hashimoto-style GLEU alone
    drifts to short outputs)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    ref = "a man in a blue shirt is standing on a ladder"
    full = "a man in a blue shirt stands on a red ladder"  # 11 words, 2 wrong
    cut = "a man in a blue shirt"  # 6 words, all right
    (h, hl), (r, rl) = _reward_batch(d, [full, cut]), _reward_batch(d, [ref, ref])
    g = named_reward("gleu", d)(h, hl, r, rl).tolist()
    gbp = named_reward("gleu_bp", d)(h, hl, r, rl).tolist()
    assert gbp[0] == pytest.approx(g[0])  # as long as the reference: no penalty
    assert gbp[1] == pytest.approx(g[1] * math.exp(1 - 11 / 6))
    assert gbp[1] < gbp[0] and g[1] > 0.4


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


def _reward_batch(dictionary, sentences):
    """Words -> a padded id tensor (unknown words added) and lengths."""
    ids = [[dictionary.add_symbol(w) for w in s.split()] for s in sentences]
    out = torch.full((len(ids), max([len(x) for x in ids] + [1]) + 2), dictionary.pad())
    for i, row in enumerate(ids):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        out[i, len(row)] = dictionary.eos()  # what follows the length never counts
    return out, torch.tensor([len(x) for x in ids])


def test_bleu_and_chrf_rewards_equal_sacrebleu_sentence_scores():
    import sacrebleu
    from fairseq.data import Dictionary

    from fairseq_smallvocab.reinforce.rewards import named_reward

    rng = random.Random(3)
    words = "a man in blue shirt is riding bike down the street , . two dogs play ein mann".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))) for _ in range(300)]
    hyps = [" ".join(w if rng.random() < 0.6 else rng.choice(words) for w in r.split()[: rng.randint(1, 16)])
            for r in refs]
    hyps[0] = refs[0]  # one perfect sample
    d = Dictionary()
    (h, hl), (r, rl) = _reward_batch(d, hyps), _reward_batch(d, refs)
    bleu = named_reward("bleu", d)(h, hl, r, rl)
    chrf = named_reward("chrf", d)(h, hl, r, rl)
    want_bleu = [sacrebleu.sentence_bleu(x, [y], tokenize="none").score / 100 for x, y in zip(hyps, refs)]
    want_chrf = [sacrebleu.sentence_chrf(x, [y]).score / 100 for x, y in zip(hyps, refs)]
    assert bleu.tolist() == pytest.approx(want_bleu, abs=1e-6) and chrf.tolist() == pytest.approx(want_chrf, abs=1e-6)
    assert bleu[0] == pytest.approx(1.0) and chrf[0] == pytest.approx(1.0)
    assert len(set(bleu.tolist())) > 100 and 0 < float(bleu.mean()) < float(chrf.mean()) < 1
    gleu_reward = named_reward("gleu", d)(h, hl, r, rl)
    assert gleu_reward.tolist() == pytest.approx([gleu(x.split(), y.split()) for x, y in zip(hyps, refs)])
    # GLEU x sacrebleu's own brevity penalty of each sentence
    gleu_bp = named_reward("gleu_bp", d)(h, hl, r, rl)
    want_bp = [sacrebleu.sentence_bleu(x, [y], tokenize="none").bp for x, y in zip(hyps, refs)]
    assert gleu_bp.tolist() == pytest.approx([g * p for g, p in zip(gleu_reward.tolist(), want_bp)], abs=1e-6)
    assert sum(p < 1 for p in want_bp) > 50 and sum(p == 1 for p in want_bp) > 50
    assert named_reward("constant", d)(h, hl, r, rl).tolist() == [1.0] * len(hyps)


def test_rewards_of_post_processed_words():
    """With a post-processing (sentencepiece), every reward reads the words:
    differently split but equal sentences score 1."""
    from fairseq.data import Dictionary

    from fairseq_smallvocab.reinforce.rewards import named_reward

    d = Dictionary()
    (h, hl) = _reward_batch(d, ["\u2581the \u2581cat \u2581sat"])
    (r, rl) = _reward_batch(d, ["\u2581th e \u2581cat \u2581sat"])
    for name in ("gleu", "gleu_bp", "bleu", "chrf"):
        assert named_reward(name, d, "sentencepiece")(h, hl, r, rl).tolist() == [pytest.approx(1.0)]
        if name != "chrf":  # chrF ignores spaces: the pieces already score 1
            assert named_reward(name, d)(h, hl, r, rl).item() < 0.9


@pytest.mark.parametrize("name", ["gleu", "gleu_bp", "bleu", "chrf", "constant"])
def test_empty_samples_and_references_score_zero_without_a_crash(name):
    from fairseq.data import Dictionary

    from fairseq_smallvocab.reinforce.rewards import named_reward

    d = Dictionary()
    (h, hl), (r, rl) = _reward_batch(d, ["", "a b", "", "a b c"]), _reward_batch(d, ["a b", "", "", "a b c"])
    got = named_reward(name, d)(h, hl, r, rl).tolist()
    if name == "constant":  # the control rewards every sample alike, empty ones too
        assert got == [1.0] * 4
    else:
        assert got == [0.0, 0.0, 0.0, pytest.approx(1.0)]
    (h0, hl0) = _reward_batch(d, [])  # no sample at all
    assert named_reward(name, d)(h0, hl0, h0, hl0).tolist() == []


def test_a_subword_post_processing_of_word_level_data_is_warned_about(caplog):
    """--reward-post-process sentencepiece on a word-level dictionary joins each
    sentence into one word (the reward fell from 23.7 to 1.6, silently)."""
    import logging

    from fairseq.data import Dictionary

    words, pieces = Dictionary(), Dictionary()
    for w in ("a", "cat", "sat"):
        words.add_symbol(w)
        pieces.add_symbol("\u2581" + w)
    with caplog.at_level(logging.WARNING):
        named_reward("gleu", pieces, "sentencepiece")
        assert not caplog.records
        named_reward("gleu", words, "sentencepiece")
    assert "no token of the target dictionary (7 entries) holds '\u2581'" in caplog.text
    with pytest.raises(ValueError, match=r"--reward-post-process 'spm' is not a fairseq post-processing"):
        named_reward("chrf", words, "spm")


@pytest.mark.parametrize("scheme, piece", [("sentencepiece", "\u2581{}"), ("subword_nmt", "{}@@")])
def test_subword_data_without_a_post_processing_is_warned_about(caplog, scheme, piece):
    """No --reward-post-process on subword data: the reward scores pieces (GLEU 3.5-4.0 where the
    words give 0.6-1.3), which the log must say; word-level data and subword data with the flag
    are not warned about."""
    import logging

    from fairseq.data import Dictionary

    words, pieces = Dictionary(), Dictionary()
    for w in ("a", "cat", "sat", "on", "the", "mat"):
        words.add_symbol(w)
        pieces.add_symbol(piece.format(w) if w in ("a", "cat", "sat") else w)  # half of them marked
    with caplog.at_level(logging.WARNING):
        named_reward("gleu", words)
        named_reward("gleu", pieces, scheme)
        assert not caplog.records
        named_reward("gleu", pieces)
    assert "50% of the target dictionary's 6 tokens hold" in caplog.text
    assert f"give --reward-post-process {scheme}" in caplog.text
