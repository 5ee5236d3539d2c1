"""Whether a dictionary holds subword pieces rather than words, for the
warnings of what would otherwise score pieces silently: the reward without
``--reward-post-process`` and ``--eval-bleu`` without ``--eval-bleu-remove-bpe``."""

from typing import Optional, Tuple

# fairseq's post-processings (``data_utils.post_process``, fairseq-generate's --post-process) and the mark that
# the tokens of a dictionary made for each carry (None: nothing to look for)
POST_PROCESSING_MARKS = {"sentencepiece": "\u2581", "wordpiece": "_", "letter": "|", "silence": "<SIL>",
                         "_EOW": "_EOW", "subword_nmt": "@@", "@@ ": "@@", "@@": "@@", "none": None}

# the subword schemes whose pieces are recognisable (sentencepiece's word-start mark, subword-nmt's
# continuation mark), and the share of a dictionary's words carrying it above which it is taken for one
# of those: word-level data has next to none
SUBWORD_MARKS = {"sentencepiece": "\u2581", "subword_nmt": "@@"}
SUBWORD_SHARE = 0.2


def subword_scheme(dictionary) -> Optional[Tuple[str, str, float, int]]:
    """(scheme, its mark, the share of the dictionary's words holding it, the
    number of words) when the dictionary looks like that scheme's pieces,
    else None."""
    words = [dictionary[i] for i in range(dictionary.nspecial, len(dictionary))]
    for name, mark in SUBWORD_MARKS.items():
        share = sum(mark in word for word in words) / max(len(words), 1)
        if share >= SUBWORD_SHARE:
            return name, mark, share, len(words)
    return None



def eval_bleu_scores_pieces(dictionary, remove_bpe: Optional[str]) -> Optional[str]:
    """The warning for fairseq's ``--eval-bleu`` when its decodes would be
    scored as pieces: the dictionary looks like subword pieces and
    ``--eval-bleu-remove-bpe`` is missing or names another scheme (a bare flag
    removes subword-nmt's "@@ ", not sentencepiece's mark).  None when the
    text is words."""
    found = subword_scheme(dictionary)
    # joined by any post-processing that removes the scheme's mark ("@@ " is what a bare flag gives)
    if not found or (remove_bpe is not None and POST_PROCESSING_MARKS.get(remove_bpe) == found[1]):
        return None
    name, mark, share, words = found
    given = "no --eval-bleu-remove-bpe was given" if remove_bpe is None else \
        f"--eval-bleu-remove-bpe {remove_bpe!r} does not join them"
    return (f"{100 * share:.0f}% of the target dictionary's {words} tokens hold {mark!r}, the mark of {name} "
            f"pieces, and {given}, so --eval-bleu scores pieces, not words (and picks checkpoint_best.pt by "
            f"them): give --eval-bleu-remove-bpe {name}")
