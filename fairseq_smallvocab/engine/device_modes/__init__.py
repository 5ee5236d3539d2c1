"""The device plan (``DevicePlan``): the eager plan with the device modes that apply to a model on a device,
chosen once by ``engine.passes.plan`` (which imports this package, by name, only where one is on).  The
captured sampling step and the graphed pass are on by default on one GPU ("auto"); the merged pass and
compilation are asked for (``--rl-engine`` keys, ``benchmark.py --ab NAME=A,B``):

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
against the eager plan (``tests/test_capture.py``, ``test_graphed_pass.py``,
``test_merged_pass.py``).
"""

from fairseq_smallvocab.engine.device_modes import capture, graphed_pass, merged_pass
from fairseq_smallvocab.engine.eager import EagerPlan, draws


class DevicePlan(EagerPlan):
    """The eager plan with the modes its settings leave on (``passes.plan`` turned off those that do not apply
    to the model on the device): the sampling loop on shape buckets (``capture``), the graphed teacher-forced
    pass (``graphed_pass``), the merged forward (``merged_pass``)."""

    name = "device"

    def on_buckets(self, request) -> bool:
        # (a forced first token, a multilingual task's, runs the eager loop)
        return self.settings.capture != "off" and request.first is None

    def features(self, decoder, prev_output_tokens, encoder_out):
        if self.settings.graphed_pass == "off":
            return super().features(decoder, prev_output_tokens, encoder_out)
        return graphed_pass.extract_features(decoder, prev_output_tokens, encoder_out, self.settings)

    def sample(self, model, encoder_out, candidates, request, greedy, keep_graph, keep_probs):
        if keep_graph or not self.on_buckets(request):
            return super().sample(model, encoder_out, candidates, request, greedy, keep_graph, keep_probs)
        steps, uniforms, store_probs = draws(model, candidates, request, greedy, keep_probs,
                                             lambda rows, steps: capture.loop_shape(model.decoder, rows, steps))
        return capture.sample(model, encoder_out, candidates, request, steps, uniforms, greedy, store_probs)

    def forward(self, model, net_input, prev_output_tokens, candidates, request, features_only):
        if not self.settings.merged_pass or request is None:
            return super().forward(model, net_input, prev_output_tokens, candidates, request, features_only)
        return merged_pass.run(model, net_input, prev_output_tokens, candidates, request,
                               keep_graph=model.sample_keeps_graph, features_only=features_only)
