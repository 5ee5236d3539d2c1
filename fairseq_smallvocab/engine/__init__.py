"""How a REINFORCE step runs on the device, behind one call
(``sampling.sample_and_score``): samples drawn inside each example's candidates and
scored with gradient.

- ``settings``: ``EngineSettings``, the one frozen object that says how a
  step runs (capture, compile, graphed passes, static state, memory caps);
- ``sampling``: the call (``sample_and_score``), the sampler (``sample``) and the
  scoring pass (``score``), with ``SampleRequest``;
- ``loop``: one step of the sampling loop and what it returns (``Samples``);
- ``families``: what the engine asks of a decoder family (registered
  adapters: ``transformer_state`` and ``recurrent_state`` for fairseq's
  decoders, ``models/`` for the plugin's);
- ``passes``: the seam between a step and the device: the passes a step
  runs (teacher-forced, the sampling loop, the forward with a request), the
  decoder's own eager calls by default, another registered implementation
  where the settings name one;
- ``slots``: tensors at fixed addresses, which the families' static states
  keep when made for a shape bucket;
- ``device_modes/``: the optional modes, off by default, plugged into
  ``passes`` and loaded only when settings ask for one (the sampling step
  captured per shape bucket as CUDA graphs, a recurrent decoder's graphed
  teacher-forced pass, one merged pass for the CE term and the scores).

The algorithm that uses it (rewards, baselines, the loss) is ``reinforce/``.
"""

from fairseq_smallvocab.engine import recurrent_state, transformer_state  # noqa: F401  (register their families)
