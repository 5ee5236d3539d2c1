"""Each example's K candidate target words, as the generator sees them.

- ``space``: the B x K row convention (fairseq's special symbols at their own
  ids first, then the example's words), gold ids to candidate positions, the
  batch's union, the default K (1000 above 10K target words, else 500);
- ``source``: where a split's lists come from (``--vocab-predictor`` with its
  cache, ``--candidates-dir`` exports, the predictor a checkpoint records)
  and the checks that they belong to this very split;
- ``fit``: whether K fits an evaluated split: K, |V| and the share of its
  reference words outside the candidates, logged, with a warning and the fix;
- ``dataset``: ``CandidateDataset``, which adds each batch's rows to its
  ``net_input``;
- ``multilingual``: the rows of multilingual batches, predicted step by step
  by each row's pair's predictor, with the row's target language token."""
