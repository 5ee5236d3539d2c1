"""REINFORCE inside the candidates (the paper's section 2.2), the algorithm
apart from the device engine (``engine/``), read in the order a step runs:

- ``config``: the ``smallvocab_reinforce`` criterion's options and their checks;
- ``samples``: each sample's length limit, and the memory check before any
  is drawn (the engine draws and scores them: ``engine.sampling.sample_and_score``);
- ``rewards``: sentence rewards (GLEU, BLEU, chrF, constant);
- ``baselines``: learned, leave-one-out, self-critical, none;
- ``by_language``: a multilingual task's reward per target language (logged);
- ``objective``: the loss, as pure functions (the CE term, the advantage,
  the policy gradient, their mix).

The criterion that runs them per batch, sample -> reward -> baseline ->
loss -> log, is ``criterions/smallvocab_reinforce.py``."""
