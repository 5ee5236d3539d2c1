"""The engine's device modes: the captured sampling step and graphed pass on
by default on a GPU ("auto", resolved per device: ``EngineSettings.on``),
the others off; each switched by one of ``EngineSettings``' fields (the
criterion's ``--rl-engine`` keys, ``benchmark.py --ab NAME=A,B``).
Settings with one on name the "device"
passes (``EngineSettings.passes``), which ``engine.passes.of`` imports this
package for; ``DevicePasses`` below plugs the modes into the seam's passes,
each mode run where it applies and the eager pass otherwise:

- ``capture``: the sampling step per shape bucket, replayed as a CUDA graph
  (``capture`` "cuda-graphs") or run eagerly on the bucket's padded tensors
  ("buckets", the CPU oracle), optionally ``torch.compile``d (``compile``);
- ``graphed_pass``: a recurrent decoder's teacher-forced pass and its
  backward captured per shape bucket (``graphed_pass``);
- ``merged_pass``: one encoder and one decoder pass for the CE term and the
  samples' scores, dropout drawn per row (``merged_pass``);
- ``buckets``: what the captures share (shape buckets, their store, padding,
  a capture's errors named).

A CUDA mode is refused on a GPU until it has passed its checks there
(``settings.UNTESTED_ON_CUDA``: the compile modes); each is tested on the CPU
against the default path (``tests/test_capture.py``, ``test_graphed_pass.py``,
``test_merged_pass.py``).
"""

import logging

from fairseq_smallvocab.engine import passes
from fairseq_smallvocab.engine.device_modes import capture, graphed_pass, merged_pass
from fairseq_smallvocab.engine.device_modes.buckets import autocast_on
from fairseq_smallvocab.engine.settings import flag

logger = logging.getLogger(__name__)


class DevicePasses(passes.Passes):
    """The seam's passes with the device modes the settings switch on."""

    name = "device"

    def features(self, decoder, prev_output_tokens, encoder_out, settings):
        return graphed_pass.extract_features(decoder, prev_output_tokens, encoder_out, settings)

    def samples_on_buckets(self, decoder, encoder_out, device, settings) -> bool:
        return capture.applies(decoder, encoder_out, device, settings)

    def sample_on_bucket(self, model, encoder_out, candidates, request, steps, uniforms, greedy, store_probs):
        return capture.sample(model, encoder_out, candidates, request, steps, uniforms, greedy, store_probs)

    def merged_forward(self, model, net_input, prev_output_tokens, candidates, request, keep_graph, features_only):
        if not merged_pass.applies(model, request.settings):
            return None
        return merged_pass.run(model, net_input, prev_output_tokens, candidates, request, keep_graph=keep_graph,
                               features_only=features_only)

    def say_what_runs(self, settings, device) -> None:
        """Refuses an untested mode on a CUDA device; a CUDA-only mode asked for where it cannot run (no CUDA
        device, or under autocast) runs as off, and the log says so rather than leave the user believing the
        step is captured."""
        super().say_what_runs(settings, device)
        if device.type == "cuda" and not autocast_on(device):
            return
        where = f"under autocast on {device}" if device.type == "cuda" else f"on {device}, not a CUDA device"
        for name, what, instead in (("capture", "the sampling step", "the eager sampling loop"),
                                    ("graphed_pass", "the teacher-forced passes", "the decoder's own passes")):
            if getattr(settings, name) == "cuda-graphs":
                logger.warning(f"{flag(name, 'cuda-graphs')}: CUDA graphs cannot be captured {where}, "
                               f"so {what} runs as {flag(name, 'off')} ({instead}); 'buckets' runs the "
                               "bucketed program eagerly on any device")


passes.register(DevicePasses())
