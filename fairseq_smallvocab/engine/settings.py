"""How a REINFORCE step runs on the device: one frozen ``EngineSettings``.

The settings are data: what a user asked for ("auto" included); what runs on a device for a model is
decided once from them, by ``engine.passes.plan``.  The criterion builds them from its config
(``--rl-engine KEY=VALUE,...``, e.g. ``--rl-engine capture=buckets,stop_check_every=4``, and
``--rl-full-softmax``: ``EngineSettings.from_config``), logs them once when training starts, and its model's
plan (``RestrictedModel.plan_on``) hands them down with the sample request; every bucket of
the captured step and of the graphed pass keeps in its key the settings that
change what it captures (capture, compile and transposed_min_rows; the
graphed pass's mode).  Nothing in the engine reads a module global for these
choices, so two criteria (or the two arms of ``benchmark.py --ab``) switch
settings without writing any; their captures share each decoder's store and
its caps.  Passes without a sample request (CE training with another
criterion, validation, decoding) run the restricted model's plan, the one the criterion's settings made
(the default settings' where no criterion gave any).  None of the settings changes a loss: the tests compare
each against the eager loop.

Fields (each a key of ``--rl-engine`` but ``full_softmax``, the flag
``--rl-full-softmax``: the baseline users compare the small softmax against):

- ``capture``: the sampling step: "cuda-graphs" (captured per shape bucket and
  replayed per token on CUDA, eager elsewhere), "buckets" (the same bucketed
  step run eagerly, any device), "off" (the eager loop), "auto" (the default:
  "cuda-graphs" on one CUDA device without autocast, "off" elsewhere: ``engine.passes.plan``).
- ``compile``: ``torch.compile`` of the bucketed step: "off", "fuse"
  (inductor's kernels, captured as ``capture`` says), "reduce-overhead"
  (inductor's own graphs).
- ``graphed_pass``: a recurrent decoder's teacher-forced passes with
  gradient: "cuda-graphs" (replayed with their backward on CUDA), "buckets"
  (the same, eagerly), "off" (the decoder's own pass), "auto" (the default, as
  for ``capture``).
- ``full_softmax``: how the full softmax (no candidates) makes REINFORCE's
  log-probabilities: "plain" (the gold targets' B x T x |V| logits and
  log-softmax, the sampling loop's step probabilities kept for the
  scoring), "chunked" (``output.chunked_ce``: no (tokens x |V|) tensor, the
  logits of a chunk of examples made again in the backward; the best
  full-vocabulary practice, to compare the small softmax against).
- ``merged_pass``: the CE term's teacher-forced pass and the samples' scoring
  pass (and the encoder's two passes) run as one over the rows of both, the
  dropout drawn for the gold rows only (``merged_pass``); off by default until
  measured on a GPU, where it saves launches and sequential steps.
- ``static_state``: sample on a state made once per batch and written in
  place (False: fairseq's incremental state everywhere).
- ``stop_check_every``: the loop asks whether any row is still going every
  this many steps (on a GPU each question is a host sync).
- ``stored_probs_max_elements``: the most step distributions the sampling
  loop keeps for the gradient (B x T x K float32 entries); above it the
  logits are made again.
- ``transposed_min_rows``: the fewest decoding rows for which the union's
  scores are made transposed on the CPU (``output.union_scorer``).
- ``union_max_ratio``: the teacher-forced output layer scores the batch's
  candidate union with one product when it has at most this many words per
  candidate row (``output.restricted``).
- ``capture_max_buckets`` / ``capture_max_mib``, ``graphed_pass_max_buckets``
  / ``graphed_pass_max_mib``: how many buckets each kind of capture keeps per
  decoder, and the most memory they may hold (least recently used dropped
  first; the bucket in use is always kept).
- ``untested_cuda_modes``: run on a CUDA device a mode of ``UNTESTED_ON_CUDA``
  (below), one that has not passed its tests on a GPU; without it such a mode
  is refused there (``check_device``), naming its flag.  On the CPU those modes
  run as their tests say (CUDA graphs: eagerly), and nothing is refused.
"""

import math
from dataclasses import dataclass, fields, replace

from fairseq_smallvocab.output.restricted import UNION_MAX_RATIO
from fairseq_smallvocab.output.union_scorer import TRANSPOSED_MIN_ROWS

CAPTURE_MODES = ("auto", "cuda-graphs", "buckets", "off")
COMPILE_MODES = ("off", "fuse", "reduce-overhead")
GRAPHED_PASS_MODES = ("auto", "cuda-graphs", "buckets", "off")
# the modes that "auto" picks on one CUDA device (each passed its tests on a GPU and made the REINFORCE step
# faster there: docs/results.md#device-modes-on-a-gpu); "off" elsewhere
AUTO = ("capture", "graphed_pass")
FULL_SOFTMAX_MODES = ("plain", "chunked")
_CHOICES = {"capture": CAPTURE_MODES, "compile": COMPILE_MODES, "graphed_pass": GRAPHED_PASS_MODES,
            "full_softmax": FULL_SOFTMAX_MODES}
_AT_LEAST_ONE = ("stop_check_every", "capture_max_buckets", "capture_max_mib", "graphed_pass_max_buckets",
                 "graphed_pass_max_mib")
_ON_OFF = {"on": True, "true": True, "off": False, "false": False}

# the device modes that have not passed their tests on a GPU, and what was seen there: on a CUDA device each is
# refused unless ``untested_cuda_modes`` (docs/results.md#device-modes-on-a-gpu says what ran where)
UNTESTED_ON_CUDA = {
    ("compile", "fuse"): "its tests passed on a GPU, but the base Transformer's benchmark step failed to compile "
                         "there and has not run since",
    ("compile", "reduce-overhead"): "its tests passed on a GPU, but no benchmark step has run with it",
}


# the one setting with a flag of its own; the others are keys of --rl-engine
OWN_FLAG = {"full_softmax": "--rl-full-softmax"}


def flag(name: str, value=None) -> str:
    """How a user sets ``name`` (to ``value``): ``--rl-engine name=value``, or its own flag."""
    if name in OWN_FLAG:
        return OWN_FLAG[name] + ("" if value is None else f" {value}")
    return f"--rl-engine {name}" + ("" if value is None else f"={value}")


@dataclass(frozen=True)
class EngineSettings:
    """How a step runs on the device (see the module); hashable, so it is part of bucket keys."""

    capture: str = "auto"
    compile: str = "off"
    graphed_pass: str = "auto"
    full_softmax: str = "plain"
    merged_pass: bool = False
    static_state: bool = True
    stop_check_every: int = 1
    stored_probs_max_elements: int = 2 ** 28
    transposed_min_rows: int = TRANSPOSED_MIN_ROWS
    union_max_ratio: float = UNION_MAX_RATIO
    capture_max_buckets: int = 16
    capture_max_mib: int = 2048
    graphed_pass_max_buckets: int = 32
    graphed_pass_max_mib: int = 4096
    untested_cuda_modes: bool = False

    def __post_init__(self):
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{flag(name)} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        for name in _AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        if self.stored_probs_max_elements < 0 or self.transposed_min_rows < 0:
            raise ValueError(f"{flag('stored_probs_max_elements')} and {flag('transposed_min_rows')} must be "
                             f">= 0, got {self.stored_probs_max_elements} and {self.transposed_min_rows}")
        if not 0 < self.union_max_ratio < math.inf:
            raise ValueError(f"{flag('union_max_ratio')} must be a finite number > 0, got {self.union_max_ratio}")

    @classmethod
    def from_config(cls, cfg) -> "EngineSettings":
        """From a criterion config's ``rl_engine`` ("KEY=VALUE,...", ``parse_engine``) and ``rl_full_softmax``
        (missing or None: the defaults)."""
        given = parse_engine(getattr(cfg, "rl_engine", None) or "")
        full_softmax = getattr(cfg, "rl_full_softmax", None)
        if full_softmax is not None:
            given["full_softmax"] = str(full_softmax)
        return cls(**given)

    def untested_on(self, device) -> list:
        """The modes of these settings that would run untested on ``device`` (a CUDA device), each as
        "--rl-engine name=value (what was seen)"; none where ``untested_cuda_modes`` is on."""
        if self.untested_cuda_modes or getattr(device, "type", str(device)) != "cuda":
            return []
        return [f"{flag(name, value)} ({seen})" for (name, value), seen in UNTESTED_ON_CUDA.items()
                if getattr(self, name) == value]

    def check_device(self, device) -> None:
        """Refuses, naming the flags, a mode that has not passed its tests on a GPU asked for on a CUDA
        device (``UNTESTED_ON_CUDA``)."""
        untested = self.untested_on(device)
        if untested:
            raise ValueError(f"{'; '.join(untested)}: not yet passed its tests on a GPU, so it is not run on "
                             f"{device}; leave it at its default, or pass {flag('untested_cuda_modes', 'on')} to run "
                             "it anyway (its results unchecked)")

    def changed(self, **values) -> "EngineSettings":
        """A copy with ``values`` (names of fields) changed."""
        return replace(self, **values)

    def describe(self) -> str:
        """The settings as one line for the log: ``name=value`` each, those off their default marked."""
        default = DEFAULT
        return ", ".join(f"{f.name}={_show(getattr(self, f.name))}"
                         + ("" if getattr(self, f.name) == getattr(default, f.name) else " (set)")
                         for f in fields(self))


# the settings of a run that gives none (the defaults above)
DEFAULT = EngineSettings()


def _show(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


NAMES = tuple(f.name for f in fields(EngineSettings))


def _convert(name: str, text: str):
    """``text`` as a value of setting ``name``, by its type; a ValueError says what the setting takes."""
    kind = type(getattr(EngineSettings(), name))
    try:
        if kind is bool:
            return _ON_OFF[text.lower()]
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except (KeyError, ValueError):
        raise ValueError("on or off" if kind is bool else f"an {kind.__name__}" if kind is int
                         else f"a {kind.__name__}") from None
    if name in _CHOICES and text not in _CHOICES[name]:
        raise ValueError(f"one of {', '.join(_CHOICES[name])}")
    return text


def parse(name: str, text: str):
    """``text`` as a value of setting ``name`` (its type: on/off for a flag, a number, a mode's name); a
    ValueError names the setting and what it takes."""
    if name not in NAMES:
        raise ValueError(f"no setting {name!r}; the settings are {', '.join(NAMES)}")
    text = text.strip()
    try:
        return _convert(name, text)
    except ValueError as what:
        raise ValueError(f"{name}={text}: {name} takes {what}") from None


def parse_engine(text: str) -> dict:
    """``--rl-engine``'s "KEY=VALUE,..." as {setting: value} (``parse`` each; spaces around either ignored); a
    ValueError names the bad item, the keys and what they take."""
    given = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"--rl-engine {item!r}: give KEY=VALUE items, comma-separated "
                             f"(e.g. capture=buckets,stop_check_every=4); the keys are {', '.join(ENGINE_KEYS)}")
        if name in OWN_FLAG:
            raise ValueError(f"--rl-engine {name}: set it with {OWN_FLAG[name]}")
        if name not in ENGINE_KEYS:
            raise ValueError(f"--rl-engine: no key {name!r}; the keys are {', '.join(ENGINE_KEYS)}")
        if name in given:
            raise ValueError(f"--rl-engine gives {name} twice: give each key once")
        try:
            given[name] = parse(name, value)
        except ValueError as what:
            raise ValueError(f"--rl-engine: {what}") from None
    return given


ENGINE_KEYS = tuple(name for name in NAMES if name not in OWN_FLAG)


def keys_help() -> str:
    """``--rl-engine``'s keys for its help, each with what it takes and its default (from the fields)."""
    def takes(name: str, default) -> str:
        if name in _CHOICES:
            return "|".join(_CHOICES[name])
        return "on|off" if isinstance(default, bool) else type(default).__name__

    return ", ".join(f"{name} ({takes(name, getattr(DEFAULT, name))}, default {_show(getattr(DEFAULT, name))})"
                     for name in ENGINE_KEYS)
