"""fairseq-train's cost, said early: after the first updates, one log line
with the seconds per update and the time to the run's budget at that pace
(--max-update, or --max-epoch times the epoch's updates), so that a run's
cost is known within its first minute rather than after its first epoch or
never.  The first update (data loading, allocations, candidate lists) is not
timed; the pace is measured over the next ``WINDOW_UPDATES`` updates, or as
many (at least one) as end within ``WINDOW_SECONDS``.  Validation and saving
are not in it (a validation within those updates, from the end of the update
before it to the start of the next, is left out of their seconds): after the
first validation that follows, a second line adds
what that validation and its checkpoint cost (timed from its first step to
the next update), spread over the updates between validations
(--validate-interval-updates and --validate-interval), to the updates' own
pace measured again since the last validation, and says the time to the
budget again.  Under --stop-time-hours the first line also says about how
many updates the time left buys at that pace (fairseq's own clock: the
training time its starting checkpoint had included).  A busy machine changes
all of these: an estimate, said as one."""

import logging
import math
import time

logger = logging.getLogger("fairseq_smallvocab.pace")

WINDOW_UPDATES = 10
WINDOW_SECONDS = 30.0

_installed = False


class Pace:
    """The clock of one training run: ``update`` after each update, ``validating`` at each validation step,
    ``before_update`` before each update; says the pace once, then once the pace with validation."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.start = None  # the end of the first (untimed) update
        self.first = None  # the update count then
        self.said = None  # the seconds per update, once said
        self.epoch_updates = None  # updates per epoch, where the trainer's iterator told it
        self.span = None  # (end of the first update since the last validation, its update count)
        self.last = None  # (end of the last update, its update count)
        self.span_pace = None  # seconds per update between the last two validations' updates
        self.validation_start = None  # the first validation step of the validation under way
        self.validation_seconds = None  # the last validation and its saving, until said
        self.said_validation = False
        self.paused = 0.0  # the seconds of validations (and saving) since ``start``, left out of the first pace

    def validating(self):
        """Call at each validation step: the first of a validation starts its clock and closes the span of
        updates before it (its pace: the updates alone, whatever the first pace window measured)."""
        if self.validation_start is not None:
            return
        self.validation_start = self.clock()
        if self.span and self.last and self.last[1] > self.span[1]:
            self.span_pace = (self.last[0] - self.span[0]) / (self.last[1] - self.span[1])

    def before_update(self):
        """Call before each update: a validation (and fairseq's saving after it) ends here."""
        if self.validation_start is not None:
            now = self.clock()
            self.validation_seconds = now - self.validation_start
            self.validation_start = None
            if self.start is not None and self.said is None and self.last is not None:
                self.paused += now - self.last[0]  # from the end of the update before it: none of it an update's

    def update(self, num_updates: int, optimization, dataset=None, trained=None) -> str:
        """Call after an update (``dataset``: fairseq's cfg.dataset, for the validation intervals; ``trained``:
        the trainer's clock of cumulative training time, a callable read only for the line under
        --stop-time-hours); returns the line said, or ''."""
        now = self.clock()
        self.last = (now, num_updates)
        if self.span is None or self.validation_seconds is not None:
            self.span = (now, num_updates)
        if self.validation_seconds is not None:
            seconds, self.validation_seconds = self.validation_seconds, None
            if self.said is None or self.said_validation or dataset is None:
                return ""
            self.said_validation = True
            return validation_line(self.span_pace or self.said, seconds, num_updates, optimization, dataset,
                                   self.epoch_updates)
        if self.said is not None:
            return ""
        if self.start is None:
            self.start, self.first = now, num_updates
            return ""
        timed = num_updates - self.first
        seconds = now - self.start - self.paused
        if timed <= 0 or (timed < WINDOW_UPDATES and seconds < WINDOW_SECONDS):
            return ""
        self.said = seconds / timed
        line = pace_line(self.said, self.first + 1, num_updates, optimization, self.epoch_updates)
        stop_hours = getattr(optimization, "stop_time_hours", 0) or 0
        if stop_hours > 0 and trained is not None:
            left = max(0.0, stop_hours * 3600 - trained())
            line += (f"; --stop-time-hours {stop_hours:g}: {_minutes(left)} left, about "
                     f"{int(left / self.said):,} more updates at this pace (validation not included)")
        return line


def _minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def _budget(optimization, epoch_updates):
    """(updates, its name): --max-update, and --max-epoch where the updates per epoch are known (the nearer of
    the two); None without either."""
    budgets = []
    max_update = getattr(optimization, "max_update", 0) or 0
    if max_update > 0:
        budgets.append((max_update, f"--max-update {max_update:,}"))
    max_epoch = getattr(optimization, "max_epoch", 0) or 0
    if max_epoch > 0 and epoch_updates:
        budgets.append((max_epoch * epoch_updates, f"--max-epoch {max_epoch} ({epoch_updates:,} updates an epoch)"))
    return min(budgets) if budgets else None


def _to_budget(budget, last: int, sec_per_update: float) -> str:
    """What is left of ``budget`` (from ``_budget``) after update ``last``, and its time at ``sec_per_update``."""
    total, name = budget
    left = max(0, total - last)
    return f"{name}: {left:,} more updates, about {_minutes(left * sec_per_update)}"


def pace_line(sec_per_update: float, first: int, last: int, optimization, epoch_updates=None) -> str:
    """The pace and the time to the budget (``optimization`` is fairseq's cfg.optimization)."""
    line = f"pace: {sec_per_update:.3f} s/update (updates {first}-{last}; validation and saving not included)"
    budget = _budget(optimization, epoch_updates)
    if budget is None:
        return line + "; no --max-update or --max-epoch: it runs until stopped" + (
            f" ({epoch_updates:,} updates an epoch, {_minutes(epoch_updates * sec_per_update)})"
            if epoch_updates else "")
    return line + f"; {_to_budget(budget, last, sec_per_update)} at this pace"


def validations_per_update(dataset, epoch_updates=None) -> float:
    """How many validations fairseq runs per update: one every --validate-interval-updates updates, plus one
    every --validate-interval epochs (where the updates per epoch are known); 0 with --disable-validation."""
    if getattr(dataset, "disable_validation", False):
        return 0.0
    rate = 0.0
    every_updates = getattr(dataset, "validate_interval_updates", 0) or 0
    if every_updates > 0:
        rate += 1.0 / every_updates
    every_epochs = getattr(dataset, "validate_interval", 0) or 0
    if every_epochs > 0 and epoch_updates:
        rate += 1.0 / (every_epochs * epoch_updates)
    return rate


def validation_line(sec_per_update: float, validation_seconds: float, last: int, optimization, dataset,
                    epoch_updates=None) -> str:
    """The pace with validation: ``sec_per_update`` (the updates alone, measured since the last validation) plus
    ``validation_seconds`` (one validation and what fairseq saved after it) spread over the updates between
    validations, and the time to the budget at that pace."""
    validation_seconds = max(0.0, validation_seconds)
    rate = validations_per_update(dataset, epoch_updates)
    line = f"pace with validation: a validation and its saving took {_minutes(validation_seconds)}"
    if rate <= 0:
        return line
    total_pace = sec_per_update + validation_seconds * rate
    line += (f", one every {1 / rate:,.0f} updates: {sec_per_update:.3f} s an update between validations, "
             f"{total_pace:.3f} with them")
    budget = _budget(optimization, epoch_updates)
    if budget is None:
        return line
    return line + f"; {_to_budget(budget, last, total_pace)}"


def install():
    """Wrap fairseq's Trainer (once): the pace after the first updates, on the first worker only."""
    global _installed
    if _installed:
        return
    from fairseq.trainer import Trainer

    fairseq_train_step = Trainer.train_step
    fairseq_train_iterator = Trainer.get_train_iterator
    fairseq_valid_step = Trainer.valid_step

    def _pace(trainer) -> Pace:
        if "_smallvocab_pace" not in trainer.__dict__:
            trainer._smallvocab_pace = Pace()
        return trainer._smallvocab_pace

    def train_step(self, samples, raise_oom=False):
        _pace(self).before_update()
        out = fairseq_train_step(self, samples, raise_oom)
        if getattr(self, "data_parallel_rank", 0) == 0:
            line = _pace(self).update(self.get_num_updates(), self.cfg.optimization, self.cfg.dataset,
                                      self.cumulative_training_time)
            if line:
                logger.info(line)
        return out

    def valid_step(self, sample, raise_oom=False):
        _pace(self).validating()
        return fairseq_valid_step(self, sample, raise_oom)

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
    Trainer.valid_step = valid_step
    _installed = True
