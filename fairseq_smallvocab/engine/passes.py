"""How a step runs on a device, decided once: ``plan(settings, device, model)``.

The settings (``EngineSettings``) say what a user asked for, "auto" included; the plan says what runs, for one
model on one device, every condition asked once, when the model first meets the device:

- "auto" (capture, graphed_pass) becomes "cuda-graphs" on one CUDA device without autocast (their tests passed
  on a GPU, and they made the step faster there), "off" elsewhere (``why_auto_is_off``); "auto" never leaves
  this module;
- a mode asked for where it cannot run becomes "off", and the plan's notes say why (CUDA graphs off a CUDA
  device or under autocast; the captured sampling step for a decoder without a static state, or with
  ``static_state`` off; the graphed pass for a decoder with no recurrent pass; the merged pass where some
  module draws its dropout for every row); a mode not yet tested on a GPU is refused on one
  (``EngineSettings.check_device``);
- the decoder's family whose static state follows it (``families.follower``), or why none does (the
  sampling loop then steps fairseq's incremental state);
- the plan is the eager one (``eager.EagerPlan``: the decoder's own calls, the eager sampling loop, two
  teacher-forced passes) where no mode is left on, else the device plan (``device_modes.DevicePlan``) made
  of the modes that apply, and only those; that package is imported here, by name, only then (the default
  step on the CPU never loads it: ``tests/test_layout.py``).

The restricted model keeps the plan it runs (``RestrictedModel.plan_on``: made here the first time, and again
when the settings, the device or autocast change), so that REINFORCE's request, the CE term, validation and
decoding run the same plan.
"""

import importlib
from typing import Dict, List, Optional, Tuple

import torch

from fairseq_smallvocab.engine.eager import EagerPlan
from fairseq_smallvocab.engine.families import family_of, follower
from fairseq_smallvocab.engine.settings import AUTO, EngineSettings, flag

# the package of the device plan, imported by name where a mode is on (not on the default path)
DEVICE_MODES = "fairseq_smallvocab.engine.device_modes"


def why_auto_is_off(device, autocast: bool) -> str:
    """Why "auto" runs as "off" on ``device`` ("" where it captures): not a CUDA device, ``autocast`` (``--amp``:
    no graphs under it), or several processes (torch.distributed with a world
    size above 1: the modes' tests there need two GPUs, which no test machine has had)."""
    if device.type != "cuda":
        return f"{device} is not a CUDA device"
    if autocast:
        return "autocast is on (--amp)"
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1:
        return "several processes train (not yet tested with several GPUs)"
    return ""


def _capture_off(settings: EngineSettings, model) -> str:
    """Why the sampling step cannot run on shape buckets for ``model`` ("" where it can)."""
    if not settings.static_state:
        return f"{flag('static_state', 'off')} samples in fairseq's incremental state"
    why = follower(model.decoder)[1]
    return f"{type(model.decoder).__name__} has no static state ({why})" if why else ""


def _graphed_pass_off(model) -> str:
    """Why ``model``'s teacher-forced pass is not graphed ("" where it can be)."""
    family = family_of(model.decoder)
    if family is None or family.parts is None:
        return f"{type(model.decoder).__name__} has no recurrent pass to graph"
    why = family.why_not(model.decoder)
    return f"{type(model.decoder).__name__}: {why}" if why else ""


# what a CUDA-graph mode does, and what runs instead where it cannot
_WHAT = {"capture": ("the sampling step", "the eager sampling loop"),
         "graphed_pass": ("the teacher-forced passes", "the decoder's own passes")}


def _resolved(settings: EngineSettings, device, model, autocast: bool
              ) -> Tuple[EngineSettings, Dict[str, str], List[str]]:
    """``settings`` as they run on ``device`` for ``model`` (no "auto"; a mode that cannot run here "off"),
    {mode: why it is off} for each mode asked for (or "auto" on a CUDA device) that is off, and a warning for
    each CUDA-graph mode asked for where graphs cannot be captured (the user believes the step captured)."""
    notes, chosen, warnings = {}, {}, []
    auto_off = why_auto_is_off(device, autocast)
    no_graphs = f"CUDA graphs cannot be captured on {device}, not a CUDA device" if device.type != "cuda" else \
        "CUDA graphs cannot be captured under autocast (--amp)" if autocast else ""
    for name in AUTO:  # capture, graphed_pass: "auto" or a mode
        value = getattr(settings, name)
        if value == "auto":
            value = "off" if auto_off else "cuda-graphs"
            if auto_off and device.type == "cuda":  # (the CPU's default goes without saying)
                notes[name] = f"auto: {auto_off}"
        elif value == "cuda-graphs" and no_graphs:
            notes[name] = f"{no_graphs}, so it runs as off"
            what, instead = _WHAT[name]
            warnings.append(f"{flag(name, 'cuda-graphs')}: {no_graphs}, so {what} runs as {flag(name, 'off')} "
                            f"({instead}); 'buckets' runs the bucketed program eagerly on any device")
            value = "off"
        if value != "off":
            why = _capture_off(settings, model) if name == "capture" else _graphed_pass_off(model)
            if why:
                notes[name] = why
                value = "off"
        chosen[name] = value
    resolved = settings.changed(**chosen)
    if resolved.merged_pass:
        why = importlib.import_module(DEVICE_MODES).merged_pass.why_not(model, resolved)
        if why:
            notes["merged_pass"] = f"two teacher-forced passes: {why}"
            resolved = resolved.changed(merged_pass=False)
    return resolved, notes, warnings


def plan(settings: EngineSettings, device, model, autocast: Optional[bool] = None) -> EagerPlan:
    """How ``model``'s steps run on ``device`` with ``settings`` (see the module): the eager plan, or the device
    plan of the modes that apply; refuses a mode not yet tested on a GPU asked for on one.  ``autocast``: whether
    the steps run under autocast (None: as torch says now)."""
    device = torch.device(device)
    if autocast is None:
        autocast = device.type == "cuda" and torch.is_autocast_enabled("cuda")
    settings.check_device(device)
    resolved, notes, warnings = _resolved(settings, device, model, autocast)
    family, why = follower(model.decoder) if resolved.static_state else (None, "")
    if why:  # (a user whose sampling is slower than the benchmarks' learns why from the log, not the profiler)
        notes["static_state"] = f"{type(model.decoder).__name__} samples on fairseq's incremental state ({why})"
    kind = EagerPlan if resolved.capture == "off" and resolved.graphed_pass == "off" and not resolved.merged_pass \
        else importlib.import_module(DEVICE_MODES).DevicePlan
    return kind(resolved, device, settings, notes, autocast, warnings, family)
