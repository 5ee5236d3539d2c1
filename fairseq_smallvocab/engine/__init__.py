"""How a REINFORCE step runs on the device, behind one call
(``sampling.policy``): samples drawn inside each example's candidates and
scored with gradient.

- ``settings``: ``EngineSettings``, the one frozen object that says how a
  step runs (capture, compile, graphed passes, static state, memory caps);
- ``sampling``: the call (``policy``), the sampler (``sample``) and the
  scoring pass (``score``), with ``SampleRequest``;
- ``loop``: one step of the sampling loop and what it returns (``Samples``);
- ``families``: what the engine asks of a decoder family (registered
  adapters: ``transformer_state`` and ``recurrent_state`` for fairseq's
  decoders, ``models/`` for the plugin's);
- ``device_modes/``: the optional modes, off by default (the sampling step
  captured per shape bucket as CUDA graphs, a recurrent decoder's graphed
  teacher-forced pass, one merged pass for the CE term and the scores).

The algorithm that uses it (rewards, baselines, the loss) is ``reinforce/``.
"""

from fairseq_smallvocab.engine import recurrent_state, transformer_state  # noqa: F401  (register their families)
