"""The restricted output layer: a softmax over each example's K candidates
instead of the whole target vocabulary (the paper's equation for
p(y_t | y_<t, x) with W and b gathered to the candidates' rows).

- ``restricted``: finding a model's output weights, the restricted logits and
  log-probabilities (``CandidateLogits``, ``CandidateLogProbs``) and the
  step-wise ``UnionScorer`` of sampling and beam search;
- ``gathered_grad``: one gradient tensor per embedding / output weight for a
  REINFORCE step's many uses of it."""
