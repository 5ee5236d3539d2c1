"""candidates.fit: how K fits an evaluated split, said when a task loads it: the share of reference words outside
their sentence's candidates (counted as the validation's gold_outside_cands counts them), and the warnings with
their fixes."""

import numpy as np
import torch
from fairseq.data import Dictionary

from fairseq_smallvocab.candidates.fit import OUTSIDE_WARN, fit_messages, reference_outside


def test_the_reference_words_outside_their_sentence_s_candidates_are_counted():
    d = Dictionary()
    for word in "a b c d e f".split():
        d.add_symbol(word)
    a, b, c, d_, e, f = (d.index(w) for w in "a b c d e f".split())
    rows = np.array([[0, 1, 2, 3, a, b], [0, 1, 2, 3, c, d_]], dtype=np.uint16)
    targets = [torch.tensor([a, c, b, 2]), torch.tensor([e, f, c, d.unk(), 2])]
    # sentence 0: c is outside (of 4 tokens, eos included); sentence 1: e and f are (of 5; <unk> is a candidate)
    assert reference_outside(rows, targets, d) == (2, 9, 3)
    assert reference_outside(rows, targets, d, limit=1) == (1, 4, 1)
    assert reference_outside(rows, targets, d, chunk=1) == (2, 9, 3)  # chunks padded apart count the same


def test_the_log_line_and_the_warnings_name_the_fix():
    line, warnings = fit_messages("valid", 500, 7868, 1014, 10000, 369)
    assert line == ("candidates for valid: K = 500 of |V| = 7,868 target entries (6.4%); 3.69% of the reference "
                    "words of its 1,014 sentences are outside their sentence's K candidates")
    assert warnings == []
    _, warnings = fit_messages("valid", 500, 1046, 6000, 1000, 53)  # the new user's K = 500 of 1,042 words
    assert len(warnings) == 2
    assert warnings[0].startswith("5.3% of the reference words of valid are outside their K = 500 candidates")
    assert "Raise --small-vocab-size" in warnings[0] and "--small-vocab-size 0" in warnings[0]
    assert warnings[1].startswith("K = 500 is 48% of the 1,046 target entries")
    assert "--small-vocab-size 0" in warnings[1]
    line, warnings = fit_messages("test", 100, 10000, 5000, 1000, int(OUTSIDE_WARN * 10) - 1)
    assert "of its first 5,000 sentences" in line and warnings == []
