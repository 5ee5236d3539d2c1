"""Rewards users bring: ``--reward python:MODULE.FUNCTION``.

MODULE is imported as Python imports it, from the working directory or
PYTHONPATH (a dotted name for a package's module), when the criterion is
built, so that a wrong name stops fairseq-train at start.  Once per batch
the criterion calls

    FUNCTION(hypotheses, references, sources, target_lang)

with the batch's detokenized strings (the ``--reward-post-process`` of the
target dictionary's tokens; the samples' and, for the self-critical
baseline, the greedy decodes' in one call): ``hypotheses`` (one per sampled
sequence), ``references`` (the gold target of each hypothesis's example, or
None where the function declares it needs none: an attribute
``needs_references = False``, for reference-free rewards such as a quality
estimator), ``sources`` (each hypothesis's source sentence, or None where
the task has no source text, as captioning) and ``target_lang`` (in a
multilingual batch, ``translation_multi_smallvocab``'s, the target language
of each hypothesis, a list; None for bilingual data).  The language tokens
of a multilingual model are not in the strings.  It returns one
number per hypothesis, in the hypotheses' order: a sequence of real numbers
(a list, a tuple, a numpy array, ...; an item may be an int, a float, a
numpy scalar, a fraction, a 0-d tensor or a bool, True as 1 and False as 0,
as for an exact-match reward) or a 1-d tensor on any device; a function may
batch its work on a GPU.  Anything else is refused, named with the type it
returned: a dict (its keys would be read, not its values), a string (one
character per hypothesis), a set (no order), an iterator or generator, a
single number, an array or tensor that is not 1-d or not of real numbers,
an item that is not one real number (a string, a list, a 1-element tensor,
a Decimal, a complex).  A function that raises, returns the wrong number
of values or a value that is not a finite number is named in the error,
with the hypothesis at fault.

The call runs in the training's thread and training waits for it, without
a time limit.  A call still running after ``UserReward.slow_after`` seconds
(60) is named in the log, once, with the time it has run and the number of
hypotheses it was given, so that a reward that never returns does not stop
training silently.  A watchdog thread keeps the time: a call tells it its
start (a clock read and a lock, what the step pays); it wakes when the
running call is due, and ends when it wakes to find none running (the next
call starts another).

The learned baseline is a sigmoid, so it fits rewards in [0, 1]; the
leave-one-out, self-critical and no baseline take any scale.
"""

import importlib
import logging
import numbers
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from fairseq_smallvocab.reinforce.rewards import SentenceReward, check_post_process, named_reward

logger = logging.getLogger(__name__)

PREFIX = "python:"

# what a reward must return, said in each error about what it returned
WANTED = "one number per hypothesis ({count}): a list, tuple or numpy array of numbers, or a 1-d tensor"


def build_reward(name: str, dictionary, post_process: Optional[str] = None, max_order: int = 4) -> SentenceReward:
    """The reward ``--reward`` names (the one factory of rewards): ``python:MODULE.FUNCTION`` (``UserReward``),
    or one of the built-in ones (``rewards.named_reward``)."""
    if not name.startswith(PREFIX):
        return named_reward(name, dictionary, post_process, max_order)
    check_post_process(post_process, dictionary)
    return UserReward(name, dictionary, post_process)


def load_function(spec: str):
    """The callable ``python:MODULE.FUNCTION`` names, MODULE imported from the working directory or
    PYTHONPATH; a ValueError names what is missing and where it was looked for."""
    module_name, _, function_name = spec[len(PREFIX):].rpartition(".")
    if not module_name or not function_name:
        raise ValueError(f"--reward {spec}: give python:MODULE.FUNCTION (e.g. python:my_rewards.length_ratio, "
                         "MODULE importable from the working directory or PYTHONPATH)")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise ValueError(f"--reward {spec}: no module {module_name!r} importable from the working directory "
                             f"({cwd}) or PYTHONPATH") from None
        raise ValueError(f"--reward {spec}: importing {module_name!r} failed: {err}") from err
    finally:
        if added:
            sys.path.remove(cwd)
    function = getattr(module, function_name, None)
    if function is None:
        raise ValueError(f"--reward {spec}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
                         f"{function_name!r}")
    if not callable(function):
        raise ValueError(f"--reward {spec}: {module_name}.{function_name} is a {type(function).__name__}, not a "
                         "function")
    return function


def _type_name(value) -> str:
    """The name of ``value``'s type, with its module unless a builtin's (``dict``, ``numpy.ndarray``)."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _is_real(value) -> bool:
    """Whether ``value`` is one real number: a Python or numpy int, float or bool, a fraction, or a 0-d tensor
    that is not complex."""
    if torch.is_tensor(value):
        return value.dim() == 0 and not value.is_complex()
    return isinstance(value, (numbers.Real, np.bool_))


class UserReward(SentenceReward):
    """``--reward python:MODULE.FUNCTION`` (see the module).  A call still running after ``slow_after`` seconds
    is named in the log (the class's 60; a test sets its instance's)."""

    wants_sources = True
    slow_after: float = 60.0

    def __init__(self, spec: str, dictionary, post_process: Optional[str] = None):
        super().__init__(dictionary, post_process)
        self.spec, self.function = spec, load_function(spec)
        self.needs_references = bool(getattr(self.function, "needs_references", True))
        self.said_scale = False  # whether the log has said that the rewards leave [0, 1]
        # the call in progress: (its start, its number of hypotheses, slow_after), or None
        self.running: Optional[Tuple[float, int, float]] = None
        self.watchdog: Optional[threading.Thread] = None  # the thread that watches the calls, while there is one
        self.watchdog_lock = threading.Lock()

    def __call__(self, tokens: Tensor, lengths: Tensor, target: Tensor, ref_lens: Tensor,
                 sources: Optional[List[str]] = None, target_lang: Optional[List[str]] = None) -> Tensor:
        hypotheses = self.words(tokens, lengths)
        references = self.words(target, ref_lens) if self.needs_references else None
        # the function gets copies: one that edits its lists (pops, clears) changes nothing the check counts
        values = self.call(list(hypotheses), references and list(references), sources and list(sources),
                           target_lang and list(target_lang))
        return self.checked(values, hypotheses).to(tokens.device)

    def call(self, hypotheses: List[str], references: Optional[List[str]], sources: Optional[List[str]],
             target_lang: Optional[List[str]]):
        """The function's answer, called in this thread, which waits for it; a function that raises is named in
        a RuntimeError.  The call is told to the watchdog (``watch``), started if none runs: what this costs
        the step is a clock read and a lock, not a thread."""
        running = (time.monotonic(), len(hypotheses), self.slow_after)
        with self.watchdog_lock:
            self.running = running
            if self.watchdog is None or not self.watchdog.is_alive():  # (not alive: in a forked child)
                self.watchdog = threading.Thread(target=self.watch, name=f"watchdog of --reward {self.spec}",
                                                 daemon=True)
                self.watchdog.start()
        try:
            return self.function(hypotheses, references, sources, target_lang)
        except Exception as err:
            raise RuntimeError(f"--reward {self.spec} raised {type(err).__name__}: {err}") from err
        finally:
            self.running = None

    def watch(self):
        """The watchdog thread: it sleeps until the running call has run ``slow_after`` seconds (a later call's
        start moves that on), logs a warning once for a call still running then (naming the reward, the time
        it has run and its number of hypotheses) and then looks again every ``slow_after`` (0.1 s at least),
        and ends when it wakes to find no call running (the next call starts another)."""
        warned = None
        while True:
            with self.watchdog_lock:
                running = self.running
                if running is None:
                    self.watchdog = None
                    return
            started, count, slow_after = running
            waited = time.monotonic() - started
            if waited >= slow_after and running is not warned:
                logger.warning(f"--reward {self.spec} is still running after {waited:.1f} s on {count} hypotheses: "
                               "training waits for it (a reward that never returns stops training here)")
                warned = running
            time.sleep(slow_after - waited if waited < slow_after else max(slow_after, 0.1))  # then polls

    def checked(self, values, hypotheses: List[str]) -> Tensor:
        """``values`` as B float32, or a ValueError naming the reward and what is wrong."""
        count = len(hypotheses)
        scores = self.numbers(values, count)
        if len(scores) != count:
            raise ValueError(f"--reward {self.spec} returned {len(scores)} values for {count} hypotheses; it must "
                             "return one number per hypothesis")
        bad = (~torch.isfinite(scores)).nonzero()
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"--reward {self.spec} returned {float(scores[i])} for hypothesis {i} "
                             f"({hypotheses[i]!r}); a reward must be a finite number")
        if not self.said_scale and bool(((scores < 0) | (scores > 1)).any()):
            self.said_scale = True
            logger.warning(f"--reward {self.spec} gives rewards outside [0, 1] (e.g. {float(scores.min()):g} to "
                           f"{float(scores.max()):g}): the learned baseline (--rl-baseline learned, a sigmoid) fits "
                           "only [0, 1]; the loo, self-critical and none baselines take any scale")
        return scores

    def numbers(self, values, count: int) -> Tensor:
        """``values`` as a 1-d float32 tensor (of any length), if they are a sequence of real numbers or a 1-d
        tensor of them (see the module); else a ValueError naming the reward, the type returned and what to
        return (``count`` values)."""
        name = _type_name(values)

        def refused(what: str, why: str = "") -> ValueError:
            return ValueError(f"--reward {self.spec} returned {what}; it must return {WANTED.format(count=count)}"
                              + (f" ({why})" if why else ""))

        if torch.is_tensor(values):
            if values.dim() != 1:
                raise refused(f"a {name} of shape {tuple(values.shape)}")
            if values.is_complex():
                raise refused(f"a {name} of dtype {values.dtype}")
            if values.is_meta:
                raise refused(f"a {name} on torch's 'meta' device", "it holds no values")
            return values.detach().float()
        if isinstance(values, (str, bytes, bytearray)):
            raise refused(f"a {name} ({values[:40]!r})", "a string would be read one character per hypothesis")
        if isinstance(values, Mapping):
            raise refused(f"a {name}", "a mapping's keys would be read, not its values")
        if not isinstance(values, Sequence):
            if not isinstance(values, np.ndarray):
                raise refused(f"a {name}")
            if values.ndim != 1:
                raise refused(f"a {name} of shape {values.shape}")
            if values.dtype.kind in "biuf":  # bool, int, unsigned, float
                return torch.from_numpy(values.astype(np.float32))
            if values.dtype.kind != "O":
                raise refused(f"a {name} of dtype {values.dtype}")
            # an array of Python objects: each checked below
        for i, value in enumerate(values):
            if not _is_real(value):
                raise refused(f"a {name} whose item {i} is a {_type_name(value)} ({value!r:.60})")
        return torch.tensor([float(v) for v in values], dtype=torch.float)
