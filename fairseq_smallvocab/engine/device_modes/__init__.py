"""The engine's optional device modes: each off by default, each switched on
by one of ``EngineSettings``' fields (the criterion's ``--rl-*`` flags,
``benchmark.py --ab NAME=A,B``), and each, once on, run instead of a part of
the default path (``engine/sampling.py``, ``restricted_model.py``), which
asks the mode's ``applies`` and otherwise runs the decoder's own calls:

- ``capture``: the sampling step per shape bucket, replayed as a CUDA graph
  (``capture`` "cuda-graphs") or run eagerly on the bucket's padded tensors
  ("buckets", the CPU oracle), optionally ``torch.compile``d (``compile``);
- ``graphed_pass``: a recurrent decoder's teacher-forced pass and its
  backward captured per shape bucket (``graphed_pass``);
- ``merged_pass``: one encoder and one decoder pass for the CE term and the
  samples' scores, dropout drawn per row (``merged_pass``);
- ``buckets``: what the captures share (shape buckets, their store, padding,
  a capture's errors named; ``Slots``, the front of a bucket's tensors that
  each batch is loaded into, also the decoder families' static states').

A CUDA mode is refused on a GPU until it has passed its tests there
(``settings.UNTESTED_ON_CUDA``); each is tested on the CPU against the
default path (``tests/test_capture.py``, ``test_graphed_pass.py``,
``test_merged_pass.py``).
"""
