"""REINFORCE inside the candidates (the paper's section 2.2), the algorithm
apart from the device engine (``engine/``: what a step asks of it, each
sample's length limit and the memory check, in ``engine/request.py``; the
samples drawn and scored by ``engine.sampling.sample_and_score``), read in
the order a step runs:

- ``config``: the ``smallvocab_reinforce`` criterion's options and their checks;
- ``rewards``: sentence rewards (GLEU, BLEU, chrF, constant); ``user_reward``:
  ``--reward`` resolved, a function of the user's included;
- ``objective``: the baselines (learned, leave-one-out, self-critical,
  none), then the loss as pure functions (the CE term, the advantage, the
  policy gradient, risk's expected cost, their mix);
- ``logs``: what a batch logs and its reduction across workers (a
  multilingual task's reward per target language too).

The criterion that runs them per batch, sample -> reward -> baseline ->
loss -> log, is ``criterions/smallvocab_reinforce.py``."""
