"""Each image's captions: grouping captions by their image row, each image's
first caption, and corpus BLEU of one hypothesis per image against all of its
captions (used by the captioning dataset and task and by
scripts/caption_bleu.py)."""

from typing import Dict, List, Sequence

import numpy as np


def captions_by_image(items: Sequence, index: np.ndarray) -> Dict[int, List]:
    """image row -> the items (captions, or caption numbers) of that image, in
    caption order; ``index[c]`` is caption c's image row."""
    groups: Dict[int, List] = {}
    for item, row in zip(items, np.asarray(index).tolist()):
        groups.setdefault(int(row), []).append(item)
    return groups


def first_caption_of_each_image(index: np.ndarray) -> np.ndarray:
    """The number of each image's first caption, in caption order."""
    return np.sort(np.unique(index, return_index=True)[1])


def reference_streams(refs: Sequence[Sequence[str]]) -> list:
    """sacrebleu's reference streams for hypothesis i against every string of refs[i]: stream j holds each
    hypothesis's j-th reference, None where it has fewer (images may have different numbers of captions)."""
    return [[r[j] if j < len(r) else None for r in refs] for j in range(max(len(r) for r in refs))]


def multi_reference_bleu(hyps: Sequence[str], refs: Sequence[Sequence[str]], tokenize="13a"):
    """sacrebleu's corpus BLEU, hypothesis i against every string of refs[i] (``reference_streams``)."""
    import sacrebleu

    return sacrebleu.corpus_bleu(list(hyps), reference_streams(refs), tokenize=tokenize)
