"""The seam between a step and the device: the passes a step runs, each with
its plain eager implementation as the default (``Passes``), and the other
implementations registered by name.

The passes, and who calls them:

- ``features``: a teacher-forced decoder pass (the CE term's, in
  ``models.restricted``'s forward; the samples' scoring, ``sampling.score``);
- ``samples_on_buckets`` / ``sample_on_bucket``: whether the sampling loop
  runs on a shape bucket instead of the eager loop, and that loop
  (``sampling.sample``);
- ``merged_forward``: the restricted model's forward with a sample request
  as one pass over the gold and the sample rows (None: the two passes of the
  default path);
- ``say_what_runs``: at a step's first batch, what runs on this device.

``of(settings)`` gives the implementation the settings name
(``EngineSettings.passes``): "eager" unless a device mode is on, then
"device", which ``engine/device_modes/`` registers.  That package is
imported by its name here, only when settings name it: the default path never
loads it (``tests/test_layout.py`` checks both).  The criterion asks once,
when it is built, so that a missing implementation stops fairseq-train at
start-up.
"""

import importlib
from typing import Dict, Optional

from fairseq_smallvocab.engine.settings import EngineSettings


class Passes:
    """The eager passes: the decoder's own calls (the default)."""

    name = "eager"

    def features(self, decoder, prev_output_tokens, encoder_out, settings: EngineSettings):
        """``decoder.extract_features`` over ``prev_output_tokens``: (states, the decoder's extra output)."""
        return decoder.extract_features(prev_output_tokens, encoder_out)

    def samples_on_buckets(self, decoder, encoder_out, device, settings: EngineSettings) -> bool:
        """Whether ``sampling.sample`` runs ``sample_on_bucket`` instead of its eager loop."""
        return False

    def sample_on_bucket(self, model, encoder_out, candidates, request, steps, uniforms, greedy: bool,
                         store_probs: bool):
        raise NotImplementedError("the eager passes sample in sampling.sample's own loop")

    def merged_forward(self, model, net_input: dict, prev_output_tokens, candidates, request, keep_graph: bool,
                       features_only: bool) -> Optional[tuple]:
        """The forward with a sample request as one pass, or None: the default path's two passes."""
        return None

    def say_what_runs(self, settings: EngineSettings, device) -> None:
        """At a step's first batch on ``device``: a mode not yet tested there is refused (``check_device``)."""
        settings.check_device(device)


_REGISTERED: Dict[str, Passes] = {Passes.name: Passes()}
# the implementations that register themselves when imported, by the name the settings give them
_PROVIDERS = {"device": "fairseq_smallvocab.engine.device_modes"}


def register(passes: Passes) -> Passes:
    """Make ``passes`` the implementation of its ``name``."""
    _REGISTERED[passes.name] = passes
    return passes


def of(settings: EngineSettings) -> Passes:
    """The passes ``settings`` name (their provider imported the first time)."""
    name = settings.passes
    if name not in _REGISTERED and name in _PROVIDERS:
        importlib.import_module(_PROVIDERS[name])
    if name not in _REGISTERED:
        raise ValueError(f"no passes registered as {name!r} (registered: {', '.join(sorted(_REGISTERED))})")
    return _REGISTERED[name]
