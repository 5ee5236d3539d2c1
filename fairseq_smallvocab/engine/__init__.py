"""How a REINFORCE step runs on the device, behind one call
(``sampling.sample_and_score``): samples drawn inside each example's candidates and
scored with gradient.

- ``settings``: ``EngineSettings``, what a user asked for (capture, compile,
  graphed passes, static state, memory caps), data only;
- ``passes``: the plan (``plan(settings, device, model)``): what runs for one
  model on one device, "auto" and every condition decided once, kept on the
  model (``RestrictedModel.plan_on``) and carried by the sample request;
- ``eager``: the eager plan: the decoder's own passes, the sampling loop step
  by step, the forward as two passes;
- ``sampling``: the call (``sample_and_score``: ``draw``, then ``score``) with
  ``SampleRequest``, run as the request's plan says;
- ``loop``: one step of the sampling loop and what it returns (``Samples``);
- ``families``: what the engine asks of a decoder family (registered
  adapters: ``transformer_state`` and ``recurrent_state`` for fairseq's
  decoders, ``models/`` for the plugin's);
- ``slots``: tensors at fixed addresses, which the families' static states
  keep when made for a shape bucket;
- ``device_modes/``: the device plan, the eager plan with the modes that apply
  (the sampling step captured per shape bucket as CUDA graphs and a recurrent
  decoder's graphed teacher-forced pass, on by default on one GPU; one merged
  pass for the CE term and the scores, and compilation, asked for), loaded only
  where a plan turns a mode on.

The algorithm that uses it (rewards, baselines, the loss) is ``reinforce/``.
"""

from fairseq_smallvocab.engine import recurrent_state, transformer_state  # noqa: F401  (register their families)
