"""A forced first token (SampleRequest.first: a multilingual model's target language token, which fairseq's
decoding forces as a prefix): every sample and greedy decode of a row starts with it, under the small and the
full softmax, and it is no action: the policy gradient leaves out that step (its reward and baseline stay)."""

import pytest
import torch
from helpers import B, _crit, _setup

from fairseq_smallvocab.engine.eager import EAGER
from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.reinforce import objective


def _first(sample, small):
    """Each row's forced first token: a word of its candidates (its position there) for the small softmax,
    an id for the full one; row 1 is left free (-1)."""
    first = torch.full((B,), 7 if small else 9, dtype=torch.long)
    first[1] = -1
    return first


@pytest.mark.parametrize("small", [True, False])
def test_every_sample_and_greedy_decode_starts_with_the_forced_token(small):
    model, task, sample = _setup(small=small)
    first = _first(sample, small)
    request = SampleRequest(torch.full((B,), 6), num_samples=3, greedy_too=True, first=first)
    model.eval()
    torch.manual_seed(0)
    out = model(**sample["net_input"], sample_request=request)[1]
    candidates = sample["net_input"].get("candidates")
    want = first if candidates is None else candidates.gather(1, first.clamp(min=0).view(-1, 1)).view(-1)
    for name, n in (("samples", 3), ("greedy", 1)):
        tokens = out[name].tokens[:, 0].view(B, n)
        forced = torch.arange(B) != 1
        assert tokens[forced].eq(want[forced].view(-1, 1)).all(), name


def test_the_forced_step_leaves_the_policy_gradient(monkeypatch):
    model, task, sample = _setup(small=True)
    candidates = sample["net_input"]["candidates"]
    assert _crit(task, rl_samples=2).sample_request(model, sample, EAGER).first is None  # a task that forces nothing
    task.first_tokens = lambda s: candidates[:, 7]  # the task gives ids; the request takes their positions
    seen = {}
    original = objective.policy_gradient

    def recording(advantages, lprobs, mask, n):
        seen.update(advantages=advantages, mask=mask)
        return original(advantages, lprobs, mask, n)

    monkeypatch.setattr(objective, "policy_gradient", recording)
    crit = _crit(task, ce_weight=0.3, rl_baseline="loo", max_sample_len=7, rl_samples=2)
    assert crit.sample_request(model, sample, EAGER).first.tolist() == [7] * B
    torch.manual_seed(3)
    crit(model, sample)
    advantages, mask = seen["advantages"], seen["mask"]
    assert not mask[:, 0].any()  # step 0 chose nothing: out of the policy gradient
    assert advantages[:, 0].ne(0).any()  # ... though its reward and baseline are there
    assert mask[:, 1:].sum() > 0 and (advantages[:, 1:].ne(0) <= mask[:, 1:]).all()
