"""The vocabulary predictor in use (the paper's section 3): what it scores and
how its top-K lists are made and stored.

- ``scoring``: the predictor's scores over the target vocabulary and the
  top-K lists (with every gold word forced in for training);
- ``inference``: loading a trained predictor and running it over a split or
  over fairseq-interactive's lines, in bounded memory;
- ``lists``: the list file format (``SPLIT.kK.npy`` with its ``.json``), the
  dictionary fingerprint and the digest of the split the lists were made from.

The predictor's model, task and criterion are fairseq's registered
``vocab_predictor``, ``vocab_prediction`` and ``vocab_prediction_bce`` (in
``models/``, ``tasks/``, ``criterions/``)."""
