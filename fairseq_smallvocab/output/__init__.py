"""The restricted output layer: a softmax over each example's K candidates
instead of the whole target vocabulary (the paper's equation for
p(y_t | y_<t, x) with W and b gathered to the candidates' rows).

- ``weights``: finding a model's output weights (W, b) and checking that its
  output layer is that linear map;
- ``restricted``: the restricted logits and log-probabilities
  (``CandidateLogits``, ``CandidateLogProbs``) of training and REINFORCE;
- ``union_scorer``: the step-wise ``UnionScorer`` of sampling and beam search;
- ``gathered_grad``: one gradient tensor per embedding / output weight for a
  REINFORCE step's many uses of it."""
