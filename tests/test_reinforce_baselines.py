"""smallvocab_reinforce's baselines: leave-one-out by hand, self-critical (the greedy
decode's reward), and the learned one: it fits the rewards, its Adam state round
trips through the criterion's state, it stays float32 under --fp16, and it reads
states saved before its first step and by the checkpoints of 0.1.  (Its state
through fairseq-train and across DDP workers: test_reinforce_cli.py.)"""

import copy

import pytest
import torch
from fairseq import utils
from helpers import B, D, _crit, _setup

from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.reinforce.rewards import gleu


def test_leave_one_out_baseline_by_hand():
    from fairseq_smallvocab.reinforce.objective import LeaveOneOutBaseline

    rewards = torch.tensor([0.2, 0.5, 0.9, 0.0, 0.0, 0.6])  # two inputs, three samples each
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    got = LeaveOneOutBaseline().values(None, mask, rewards, None, 3)
    want = torch.tensor([(0.5 + 0.9) / 2, (0.2 + 0.9) / 2, (0.2 + 0.5) / 2, 0.3, 0.3, 0.0])
    torch.testing.assert_close(got, want.unsqueeze(1).expand(6, 3))
    with pytest.raises(ValueError, match="needs >= 2 samples per input"):
        LeaveOneOutBaseline().values(None, mask, rewards, None, 1)


def test_learned_baseline_fits_rewards_and_its_adam_state_round_trips():
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned", baseline_lr=0.05)
    model.train()
    crit(model, sample)  # sized by the states, started at the batch's mean reward: now moved away from it
    crit.baseline.bias.fill_(3.0)  # sigmoid: 0.95
    first = last = None
    for _ in range(29):
        _, _, log = crit(model, sample)
        first = log["baseline_mse"] if first is None else first
        last = log["baseline_mse"]
    assert last < first / 4
    state = crit.state_dict()
    assert {"baseline.weight", "baseline.bias", "baseline._extra_state"} <= state.keys()
    assert state["baseline.weight"].shape == (D,)  # its size came from the model's states
    fresh = _crit(task, rl_baseline="learned", baseline_lr=0.05)
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.baseline.weight, crit.baseline.weight)
    torch.testing.assert_close(fresh.baseline.bias, crit.baseline.bias)
    a, b = crit.baseline._optimizer().state_dict(), fresh.baseline._optimizer().state_dict()
    assert a["state"][0]["step"] == b["state"][0]["step"] == 30
    torch.testing.assert_close(a["state"][0]["exp_avg_sq"], b["state"][0]["exp_avg_sq"])
    # the next steps are identical
    torch.manual_seed(9)
    crit(model, sample)
    torch.manual_seed(9)
    fresh(model, sample)
    torch.testing.assert_close(fresh.baseline.weight, crit.baseline.weight)
    # buffers, not parameters: fairseq never gives it to its main optimizer nor wraps it in DDP
    # (PyTorch's DDP rejects a module with no trainable parameter: --ddp-backend c10d would fail)
    assert list(crit.parameters()) == [] and not utils.has_parameters(crit)


def test_learned_baseline_stays_float32_when_fairseq_halves_the_criterion():
    """--fp16: fairseq's trainer calls criterion.half(); the baseline (buffers, its own Adam) stays float32
    (on CUDA it failed with 'expected scalar type Float but found Half')."""
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned").half()
    assert crit.baseline.weight.dtype == crit.baseline.bias.dtype == torch.float32
    model.train()
    _, _, log = crit(model, sample)
    assert log["baseline_mse"] > 0 and crit.baseline.weight.abs().sum() > 0  # it learned
    assert crit.baseline.weight.dtype == torch.float32
    adam = crit.baseline._optimizer()
    assert adam.param_groups[0]["params"][0] is crit.baseline.weight
    crit.to(torch.float64)  # any other move: still float32, the Adam state follows the new buffers
    crit(model, sample)
    assert crit.baseline.weight.dtype == torch.float32
    assert crit.baseline._optimizer().state_dict()["state"][0]["step"] == 2


def test_self_critical_baseline_is_the_greedy_reward():
    model, task, sample = _setup()
    with torch.no_grad():
        model.decoder.output_bias[2] = 0.0  # greedy decodes that do not stop at once
    crit = _crit(task, rl_baseline="self-critical", max_sample_len=8)
    _, _, log = crit(model, sample)
    with torch.no_grad():
        greedy = model(**sample["net_input"],
                       sample_request=SampleRequest(torch.full((B,), 8), greedy_too=True))[1]["greedy"]
    d = task.target_dictionary
    want = 0.0
    for b in range(B):
        ys = [t for t in greedy.tokens[b][greedy.mask[b]].tolist() if t != d.eos()]
        ref = [t for t in sample["target"][b].tolist() if t not in (d.eos(), d.pad())]
        want += gleu(ys, ref)
    assert log["greedy_reward"] == pytest.approx(want, abs=1e-6) and want > 0


def test_learned_baseline_state_saved_before_its_first_step_restores_an_unfitted_baseline():
    """A state saved before any batch (weight of size 0, no Adam state), loaded into a fitted baseline,
    gives back the unfitted one: its next step equals a fresh baseline's (benchmark.py --ab restores
    such a snapshot between the two settings it compares)."""
    from fairseq_smallvocab.reinforce.objective import LearnedBaseline

    states, mask, rewards = torch.randn(3, 4, D), torch.ones(3, 4, dtype=torch.bool), torch.rand(3)
    used = LearnedBaseline(lr=0.1)
    before = copy.deepcopy(used.state_dict())
    for _ in range(3):
        used.learn(states, mask, rewards)
    used.load_state_dict(before)
    assert used.weight.numel() == 0 and used._adam is None
    fresh = LearnedBaseline(lr=0.1)
    for baseline in (used, fresh):
        baseline.learn(states, mask, rewards)
    assert torch.equal(used.weight, fresh.weight) and torch.equal(used.bias, fresh.bias)
    assert used._optimizer().state_dict()["state"][0]["step"] == 1


def test_learned_baseline_reads_the_state_of_checkpoints_written_before_the_baselines_module():
    """Checkpoints of 0.1 saved the criterion's buffers as baseline_weight / baseline_bias (and the Adam
    state) under the task's "reinforce_gleu.baseline"; the baseline module reads them, and its size comes
    from the saved weight (before any batch)."""
    from fairseq_smallvocab.reinforce.objective import LearnedBaseline

    old = LearnedBaseline(lr=0.1)
    old.learn(torch.randn(3, 4, D), torch.ones(3, 4, dtype=torch.bool), torch.rand(3))
    state = old.state_dict()
    legacy = {"baseline_weight": state["weight"], "baseline_bias": state["bias"],
              "_extra_state": state["_extra_state"]}
    fresh = LearnedBaseline(lr=0.1)
    assert fresh.weight.numel() == 0  # sized by the first states or by a checkpoint
    fresh.load_state_dict(legacy)
    assert torch.equal(fresh.weight, old.weight) and torch.equal(fresh.bias, old.bias)
    assert fresh._optimizer().state_dict()["state"][0]["step"] == 1
    with pytest.raises(ValueError, match=f"decoder states of size {D}, this model's are 3"):
        fresh.values(torch.randn(2, 5, 3), torch.ones(2, 5, dtype=torch.bool), torch.rand(2))


def test_a_fresh_learned_baseline_starts_at_the_first_batchs_mean_reward():
    """Not at sigmoid(0) = 0.5, far above early GLEU rewards (0.02-0.05): every advantage
    would be negative for many updates.  Non-finite rewards are left out of the mean, the
    start is kept inside (0.01, 0.99), and a baseline restored from a checkpoint is not reset."""
    from fairseq_smallvocab.reinforce.objective import LearnedBaseline

    features, mask = torch.zeros(4, 3, 5), torch.ones(4, 3, dtype=torch.bool)
    rewards = torch.tensor([0.02, 0.04, float("nan"), 0.06])
    base = LearnedBaseline(lr=0.1)
    got = base.values(features, mask, rewards)
    torch.testing.assert_close(got, torch.full((4, 3), 0.04))
    assert LearnedBaseline().values(features, mask, torch.zeros(4))[0, 0].item() == pytest.approx(0.01)
    assert LearnedBaseline().values(features, mask, torch.ones(4))[0, 0].item() == pytest.approx(0.99)
    restored = LearnedBaseline()
    restored.load_state_dict(base.state_dict())
    torch.testing.assert_close(restored.values(features, mask, torch.ones(4)), got)  # its own bias, not 0.99


def test_a_baseline_whose_weights_overflow_stops_with_its_flag():
    from fairseq_smallvocab.reinforce.objective import LearnedBaseline

    base = LearnedBaseline(lr=1.0)
    features, mask = torch.ones(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    base.values(features, mask, torch.tensor([0.2, 0.4]))
    assert base.learn(features, mask, torch.tensor([0.2, 0.4]))["baseline_mse"] >= 0
    base.weight[0] = float("inf")  # what a step too large for float32 leaves
    with pytest.raises(FloatingPointError, match=r"no longer finite .*--baseline-lr 1\): lower --baseline-lr"):
        base.learn(features, mask, torch.tensor([0.2, 0.4]))
