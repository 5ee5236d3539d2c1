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
float per hypothesis, as a list (or any sequence of numbers) or a 1-d tensor
on any device; a function may batch its work on a GPU.  A function that
raises, returns the wrong number of values or a value that is not a finite
number is named in the error, with the hypothesis at fault.

The learned baseline is a sigmoid, so it fits rewards in [0, 1]; the
leave-one-out, self-critical and no baseline take any scale.
"""

import importlib
import logging
import os
import sys
from typing import List, Optional

import torch
from torch import Tensor

from fairseq_smallvocab.reinforce.rewards import SentenceReward, build_reward, check_post_process

logger = logging.getLogger(__name__)

PREFIX = "python:"


def build(name: str, dictionary, post_process: Optional[str] = None, max_order: int = 4) -> SentenceReward:
    """The reward ``--reward`` names: ``python:MODULE.FUNCTION`` (``UserReward``), or one of the built-in ones
    (``rewards.build_reward``)."""
    if not name.startswith(PREFIX):
        return build_reward(name, dictionary, post_process, max_order)
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


class UserReward(SentenceReward):
    """``--reward python:MODULE.FUNCTION`` (see the module)."""

    wants_sources = True

    def __init__(self, spec: str, dictionary, post_process: Optional[str] = None):
        super().__init__(dictionary, post_process)
        self.spec, self.function = spec, load_function(spec)
        self.needs_references = bool(getattr(self.function, "needs_references", True))
        self.said_scale = False  # whether the log has said that the rewards leave [0, 1]

    def __call__(self, tokens: Tensor, lengths: Tensor, target: Tensor, ref_lens: Tensor,
                 sources: Optional[List[str]] = None, target_lang: Optional[List[str]] = None) -> Tensor:
        hypotheses = self.words(tokens, lengths)
        references = self.words(target, ref_lens) if self.needs_references else None
        try:
            values = self.function(hypotheses, references, sources, target_lang)
        except Exception as err:
            raise RuntimeError(f"--reward {self.spec} raised {type(err).__name__}: {err}") from err
        return self.checked(values, hypotheses).to(tokens.device)

    def checked(self, values, hypotheses: List[str]) -> Tensor:
        """``values`` as B float32, or a ValueError naming the reward and what is wrong."""
        count = len(hypotheses)
        if torch.is_tensor(values):
            if values.dim() != 1:
                raise ValueError(f"--reward {self.spec} returned a tensor of shape {tuple(values.shape)}; it must "
                                 f"return one float per hypothesis ({count}), a list or a 1-d tensor")
            scores = values.detach().float()
        else:
            try:
                scores = torch.tensor([float(v) for v in values], dtype=torch.float)
            except (TypeError, ValueError) as err:
                raise ValueError(f"--reward {self.spec} returned {type(values).__name__} ({err}); it must return one "
                                 f"float per hypothesis ({count}), a list or a 1-d tensor") from None
        if len(scores) != count:
            raise ValueError(f"--reward {self.spec} returned {len(scores)} values for {count} hypotheses; it must "
                             "return one float per hypothesis")
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
