"""``benchmark.py --largest-batch``: the largest training batch whose step
fits the GPU's memory, for each softmax, and its sentences per second.

The search (``largest_fitting``) doubles the batch from ``--batch`` until a
step runs out of memory, then bisects between the last batch that fit and
the first that did not, until they are within ``PRECISION`` of each other.
Each trial runs two steps of the worker's own model and criterion on a batch
of that many sentences (the second step has the optimizer's state, which
the first allocates) after dropping the captured sampling steps and
teacher-forced passes of earlier trials (``capture.forget``,
``graphed_pass.forget``); out of memory, the trial's tensors are dropped
and the allocator's cache emptied before the next.
"""

import gc
from typing import Callable, List, Tuple

# the search stops when the first batch that did not fit is within this share of the last that did
PRECISION = 0.05
# no batch above this is tried (a step this large is not a memory question any more)
MAX_SENTENCES = 1 << 16


def largest_fitting(fits: Callable[[int], bool], start: int, precision: float = PRECISION,
                    limit: int = MAX_SENTENCES) -> Tuple[int, List[Tuple[int, bool]]]:
    """The largest n (at most ``limit``) with ``fits(n)``, assuming every smaller n fits too, and the trials
    as (n, fitted); 0 when not even 1 fits."""
    trials: List[Tuple[int, bool]] = []

    def trial(n: int) -> bool:
        ok = fits(n)
        trials.append((n, ok))
        return ok

    n = max(1, min(start, limit))
    if trial(n):
        good, bad = n, None
        while bad is None and good < limit:
            n = min(2 * good, limit)
            if trial(n):
                good = n
            else:
                bad = n
        if bad is None:
            return good, trials
    else:
        good, bad = 0, n
        while good == 0 and bad > 1:
            n = bad // 2
            if trial(n):
                good = n
            else:
                bad = n
        if good == 0:
            return 0, trials
    while bad - good > max(1, int(precision * good)):
        n = (good + bad) // 2
        if trial(n):
            good = n
        else:
            bad = n
    return good, trials


def fits_on_cuda(step, make_sample, reset=lambda: None):
    """A ``fits(n)`` for ``largest_fitting``: two steps of ``step`` on ``make_sample(n)``, after ``reset``
    (which drops what earlier trials cached); False when CUDA runs out of memory or the criterion refuses the
    batch as too large for it (the trial's tensors freed and the allocator's cache emptied)."""
    import torch

    def fits(n: int) -> bool:
        reset()
        try:
            sample = make_sample(n)
            for _ in range(2):
                step(sample)
            return True
        except (torch.cuda.OutOfMemoryError, MemoryError):  # (MemoryError: smallvocab_reinforce's own check, ahead)
            pass
        # out of the except block: the exception's traceback (and the frames' tensors it holds) is gone
        sample = None
        release(reset)
        return False

    return fits


def release(reset=lambda: None):
    """What a trial held, back to the device: ``reset`` (the caches it made, e.g. its capture buckets), the
    unreferenced tensors collected, the allocator's cache emptied."""
    import torch

    reset()
    gc.collect()
    torch.cuda.empty_cache()
