"""Per-phase wall times of a training step (``benchmark.py --phases``).

The phases of a REINFORCE step, in the order they run:

- ``encoder``: the encoder's forward passes (the CE pass's and the policy's);
- ``ce_pass``: the rest of the teacher-forced forward for the CE term (the
  decoder over the gold target and its restricted output layer);
- ``sampling``: ``sampling.sample`` (the step-by-step loop: decoder step,
  output layer over the candidates, the draw);
- ``scoring``: ``sampling.score`` (the sampled tokens' log-probabilities from
  the kept states, or from a second pass);
- ``rewards``: the criterion's rewards (GLEU by default);
- ``loss``: the rest of the criterion (the CE loss, the baseline's values
  and its own update, the loss itself);
- ``backward``: ``loss.backward()``;
- ``optimizer``: gradient clipping and the SGD update.

A CE step has ``encoder``, ``ce_pass``, ``loss``, ``backward`` and
``optimizer``.  The timer also counts the sampling loop's steps
(``loop_steps``: each step advances every row by one token), so that the
sampling phase reads as milliseconds per sampled token, the unit in which a
launch-bound GPU loop is judged.  The timers wrap functions from the outside (the plugin is
not changed); on the CPU every operation is synchronous, so wall times are
the operations' own (on CUDA the phases are synchronized at their ends).
"""

import time
from contextlib import contextmanager

PHASES = ("encoder", "ce_pass", "sampling", "scoring", "rewards", "loss", "backward", "optimizer")
# phases are recorded in seconds to the microsecond: a tiny model's optimizer step or rewards take under
# 0.05 ms, which four decimals recorded as 0 (a phase that ran would read as one that never did)
DECIMALS = 6


class PhaseTimer:
    """Wall seconds per phase of the current step (``spans``); nested timed
    calls are charged to the inner phase only (e.g. the encoder inside the
    model's forward)."""

    def __init__(self, sync=lambda: None):
        self.sync = sync
        self.spans = dict.fromkeys(PHASES, 0.0)
        self.inner = [0.0]  # time spent in timed phases inside the phase that is running
        self.loop_steps = 0  # steps of the sampling loops timed (greedy decodes included)

    @contextmanager
    def phase(self, name):
        self.sync()
        start = time.perf_counter()
        self.inner.append(0.0)
        try:
            yield
        finally:
            self.sync()
            elapsed = time.perf_counter() - start
            nested = self.inner.pop()
            self.spans[name] += elapsed - nested
            self.inner[-1] += elapsed

    def wrap(self, owner, attribute, name):
        """Time every call of ``owner.attribute`` as ``name``."""
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)

    def reset(self):
        self.spans = dict.fromkeys(PHASES, 0.0)
        self.loop_steps = 0

    def ms_per_sampled_token(self):
        """The sampling phase's milliseconds per loop step (None before any)."""
        return 1000.0 * self.spans["sampling"] / self.loop_steps if self.loop_steps else None


def instrument(model, criterion, sync=lambda: None) -> PhaseTimer:
    """A timer wrapped around the model's and the criterion's phases (the
    plugin's sampling module functions included)."""
    from fairseq_smallvocab.engine import sampling

    timer = PhaseTimer(sync)
    sample = sampling.sample

    def counted(*args, **kwargs):
        samples = sample(*args, **kwargs)
        timer.loop_steps += samples.tokens.size(1)
        return samples

    sampling.sample = counted
    timer.wrap(model, "forward", "ce_pass")  # the model's forward less the phases timed inside it
    timer.wrap(model.encoder, "forward", "encoder")
    timer.wrap(sampling, "sample", "sampling")
    timer.wrap(sampling, "score", "scoring")
    if hasattr(criterion, "rewards"):
        timer.wrap(criterion, "rewards", "rewards")
    return timer
