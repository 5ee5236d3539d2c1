"""fairseq-train's cost, said early: after the first updates, one log line
with the seconds per update and the time to the run's budget at that pace
(--max-update, or --max-epoch times the epoch's updates), so that a run's
cost is known within its first minute rather than after its first epoch or
never.  The first update (data loading, allocations, candidate lists) is not
timed; the pace is measured over the next ``WINDOW_UPDATES`` updates, or as
many (at least one) as end within ``WINDOW_SECONDS``.  Validation and saving
are not in it, and a busy machine changes it: an estimate, said as one."""

import logging
import math
import time

logger = logging.getLogger("fairseq_smallvocab.pace")

WINDOW_UPDATES = 10
WINDOW_SECONDS = 30.0

_installed = False


class Pace:
    """The clock of one training run: ``update(trainer)`` after each update; says the pace once."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.start = None  # the end of the first (untimed) update
        self.first = None  # the update count then
        self.said = False
        self.epoch_updates = None  # updates per epoch, where the trainer's iterator told it

    def update(self, num_updates: int, optimization) -> str:
        """Call after an update; returns the line said (once), or ''."""
        if self.said:
            return ""
        now = self.clock()
        if self.start is None:
            self.start, self.first = now, num_updates
            return ""
        timed = num_updates - self.first
        if timed <= 0 or (timed < WINDOW_UPDATES and now - self.start < WINDOW_SECONDS):
            return ""
        self.said = True
        return pace_line((now - self.start) / timed, self.first + 1, num_updates, optimization, self.epoch_updates)


def _minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def pace_line(sec_per_update: float, first: int, last: int, optimization, epoch_updates=None) -> str:
    """The pace and the time to the budget: --max-update, and --max-epoch where the updates per epoch are known
    (the nearer of the two); ``optimization`` is fairseq's cfg.optimization."""
    line = f"pace: {sec_per_update:.3f} s/update (updates {first}-{last}; validation and saving not included)"
    budgets = []
    max_update = getattr(optimization, "max_update", 0) or 0
    if max_update > 0:
        budgets.append((max_update, f"--max-update {max_update:,}"))
    max_epoch = getattr(optimization, "max_epoch", 0) or 0
    if max_epoch > 0 and epoch_updates:
        budgets.append((max_epoch * epoch_updates, f"--max-epoch {max_epoch} ({epoch_updates:,} updates an epoch)"))
    if not budgets:
        return line + "; no --max-update or --max-epoch: it runs until stopped" + (
            f" ({epoch_updates:,} updates an epoch, {_minutes(epoch_updates * sec_per_update)})"
            if epoch_updates else "")
    total, name = min(budgets)
    left = max(0, total - last)
    return line + f"; {name}: {left:,} more updates, about {_minutes(left * sec_per_update)} at this pace"


def install():
    """Wrap fairseq's Trainer (once): the pace after the first updates, on the first worker only."""
    global _installed
    if _installed:
        return
    from fairseq.trainer import Trainer

    fairseq_train_step = Trainer.train_step
    fairseq_train_iterator = Trainer.get_train_iterator

    def _pace(trainer) -> Pace:
        if "_smallvocab_pace" not in trainer.__dict__:
            trainer._smallvocab_pace = Pace()
        return trainer._smallvocab_pace

    def train_step(self, samples, raise_oom=False):
        out = fairseq_train_step(self, samples, raise_oom)
        if getattr(self, "data_parallel_rank", 0) == 0:
            line = _pace(self).update(self.get_num_updates(), self.cfg.optimization)
            if line:
                logger.info(line)
        return out

    def get_train_iterator(self, epoch, *args, **kwargs):
        itr = fairseq_train_iterator(self, epoch, *args, **kwargs)
        try:
            freq = self.cfg.optimization.update_freq
            freq = freq[min(epoch, len(freq)) - 1] if len(freq) else 1
            _pace(self).epoch_updates = math.ceil(len(itr) / max(1, freq))
        except (TypeError, AttributeError):  # an iterator without a length: no epoch estimate
            pass
        return itr

    Trainer.train_step = train_step
    Trainer.get_train_iterator = get_train_iterator
    _installed = True
