"""reinforce_gleu: the policy gradient by hand, masking after eos, the learned
baseline's optimizer state through checkpoints, bad input, and real runs."""

import copy
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.data import Dictionary
from helpers import USER_DIR, candidate_batch, make_dictionary, run

from fairseq_smallvocab.criterions.reinforce_gleu import ReinforceGleuConfig, ReinforceGleuCriterion
from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
from fairseq_smallvocab.reinforce.rewards import gleu
from fairseq_smallvocab.reinforce.sampler import SampleRequest
from fairseq_smallvocab.restricted_model import restrict

V_SRC, V_TGT, B, T_SRC, T_TGT, K, D = 30, 50, 6, 6, 5, 14, 10


def _crit(task, **options):
    """The criterion as fairseq builds it: from its config (fairseq's defaults but for ``options``)."""
    return ReinforceGleuCriterion(task, ReinforceGleuConfig(**options))


def _setup(small=True, seed=0):
    torch.manual_seed(seed)
    src_dict, tgt_dict = make_dictionary(V_SRC), make_dictionary(V_TGT)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    model = restrict(LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=D, dropout=0.0), task))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.4)
        model.decoder.output_bias[2] = 3.0  # eos likely enough that samples end at different steps
    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    src = torch.randint(4, V_SRC, (B, T_SRC))
    src[:, -1] = eos
    tgt = torch.randint(4, 12, (B, T_TGT))  # a few words, so that samples share n-grams with the gold
    tgt[:, -1] = eos
    tgt[2, 3:] = torch.tensor([eos, pad])
    prev = torch.cat([torch.full((B, 1), eos), tgt[:, :-1]], 1).masked_fill(tgt.eq(pad), pad)
    net_input = {"src_tokens": src, "src_lengths": torch.full((B,), T_SRC), "prev_output_tokens": prev}
    if small:
        net_input["candidates"] = candidate_batch(K, V_TGT, gold=tgt, shuffle=False)
    sample = {"id": torch.arange(B), "net_input": net_input, "target": tgt, "nsentences": B,
              "ntokens": int(tgt.ne(pad).sum())}
    return model, task, sample


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("baseline,n", [("learned", 1), ("loo", 3)])
@pytest.mark.parametrize("keep_probs", [True, False])
def test_policy_gradient_equals_hand_computation(small, baseline, n, keep_probs, monkeypatch):
    """d L_r / d b_p (the output bias) = -(1/N) sum_b sum_j sum_t (R_bj - b_bjt) (onehot(y_bjt) - p_bjt),
    over the sampled steps up to and including eos, with p_bjt from a separate
    teacher-forced pass over the sampled sequence of example b alone.  The
    fresh learned baseline is b_t = sigmoid(0) = 0.5, so every step counts,
    rewarded or not; the leave-one-out baseline of sample j is the mean
    reward of the other N - 1 samples of the same input.  With the sampler's
    kept step distributions (the default) and without (the logits made again)."""
    from fairseq_smallvocab.reinforce import sampler

    if not keep_probs:
        monkeypatch.setattr(sampler, "STORED_PROBS_MAX_ELEMENTS", 0)
    model, task, sample = _setup(small)
    crit = _crit(task, rl_lambda=0.0, rl_baseline=baseline, max_sample_len=7, rl_samples=n)
    torch.manual_seed(6)
    loss, size, log = crit(model, sample)
    model.zero_grad()
    loss.backward()
    got = model.decoder.output_bias.grad.clone()

    torch.manual_seed(6)  # the same samples again
    with torch.no_grad():
        samples = model(**sample["net_input"], policy=SampleRequest(torch.full((B,), 7), num_samples=n))[1]["samples"]
    tokens, mask = samples.tokens, samples.mask
    assert tokens.size(0) == B * n and size == B
    d = task.target_dictionary
    eos, pad = d.eos(), d.pad()
    assert mask.any(1).all() and (~mask).any()  # some samples ended early: steps after eos are masked
    hand_rewards, grads = [], []
    for row in range(B * n):
        b = row // n  # the N samples of example b are rows b * N ... b * N + N - 1
        steps = int(mask[row].sum())
        ys = tokens[row, :steps].tolist()
        assert all(t == pad for t in tokens[row, steps:].tolist())
        assert eos not in ys[:-1]
        words = [t for t in ys if t != eos]
        ref = [t for t in sample["target"][b].tolist() if t not in (eos, pad)]
        hand_rewards.append(gleu(words, ref))
        prev = torch.tensor([[eos] + ys[:-1]])
        cands = sample["net_input"]["candidates"][b: b + 1] if small else None
        with torch.no_grad():
            logits = model(src_tokens=sample["net_input"]["src_tokens"][b: b + 1],
                           src_lengths=sample["net_input"]["src_lengths"][b: b + 1], prev_output_tokens=prev,
                           candidates=cands)[0][0]  # steps x K (or V)
        logits[:, [pad, d.bos()]] = float("-inf")
        p = F.softmax(logits, -1)
        ids = cands[0] if small else torch.arange(V_TGT)
        grad = torch.zeros(V_TGT)
        for t, y in enumerate(ys):
            onehot = torch.zeros(V_TGT)
            onehot[y] = 1.0
            grad += onehot - torch.zeros(V_TGT).index_add_(0, ids, p[t])
        grads.append(grad)
    want = torch.zeros(V_TGT)
    for row in range(B * n):
        if baseline == "learned":
            base = 0.5
        else:
            group = hand_rewards[row - row % n: row - row % n + n]
            base = (sum(group) - hand_rewards[row]) / (n - 1)
        want += -(hand_rewards[row] - base) * grads[row] / n
    assert log["reward"] == pytest.approx(sum(hand_rewards), abs=1e-5) and sum(hand_rewards) > 0
    assert log["finite_samples"] == B * n
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def _ranked_choices(monkeypatch, rank_of_row):
    """Replace the sampler's draw by a deterministic one: row r takes the
    ``rank_of_row(r)``-th most likely word of its step (so the same sample can
    be drawn in a batch of N samples per input and alone)."""
    from fairseq_smallvocab.reinforce import sampler

    def draw(logits, with_entropy=False, with_probs=False, probs_out=None):
        ranks = torch.tensor([rank_of_row(r) for r in range(logits.size(0))])
        choice = logits.argsort(-1, descending=True).gather(1, ranks.unsqueeze(1))
        if with_probs:  # as the real draw: the softmax written into probs_out when given
            probs = logits.softmax(-1) if probs_out is None else torch.softmax(logits, -1, out=probs_out)
            return choice, torch.zeros(logits.size(0)), probs
        return (choice, torch.zeros(logits.size(0))) if with_entropy else choice

    monkeypatch.setattr(sampler, "sample_categorical", draw)


@pytest.mark.parametrize("small", [True, False])
def test_n_samples_give_the_average_of_n_single_sample_gradients(small, monkeypatch):
    """One batched pass with N samples per input == the mean of N runs with one
    sample each (the same N sequences), loss and every gradient, CE term included."""
    n, lam = 3, 0.3
    model, task, sample = _setup(small)
    params = [p for p in model.parameters() if p.requires_grad]

    def loss_and_grads(rl_samples):
        crit = _crit(task, rl_lambda=lam, rl_baseline="none", max_sample_len=7,
                                      rl_samples=rl_samples)
        model.zero_grad()
        loss, size, log = crit(model, sample)
        loss.backward()
        assert size == B
        return loss.detach(), [p.grad.clone() for p in params], log

    _ranked_choices(monkeypatch, lambda r: r % n)
    loss_n, grads_n, log_n = loss_and_grads(n)
    singles = []
    for j in range(n):
        _ranked_choices(monkeypatch, lambda r, j=j: j)
        singles.append(loss_and_grads(1))
    assert log_n["reward"] == pytest.approx(sum(log["reward"] for _, _, log in singles))
    assert len({round(log["reward"], 6) for _, _, log in singles}) > 1  # the N samples differ
    torch.testing.assert_close(loss_n, sum(loss for loss, _, _ in singles) / n)
    for i, grad in enumerate(grads_n):
        torch.testing.assert_close(grad, sum(g[i] for _, g, _ in singles) / n, atol=1e-6, rtol=1e-5)


def test_leave_one_out_baseline_by_hand():
    from fairseq_smallvocab.reinforce.baselines import LeaveOneOutBaseline

    rewards = torch.tensor([0.2, 0.5, 0.9, 0.0, 0.0, 0.6])  # two inputs, three samples each
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    got = LeaveOneOutBaseline().values(None, mask, rewards, None, 3)
    want = torch.tensor([(0.5 + 0.9) / 2, (0.2 + 0.9) / 2, (0.2 + 0.5) / 2, 0.3, 0.3, 0.0])
    torch.testing.assert_close(got, want.unsqueeze(1).expand(6, 3))
    with pytest.raises(ValueError, match="needs >= 2 samples per input"):
        LeaveOneOutBaseline().values(None, mask, rewards, None, 1)


@pytest.mark.parametrize("small", [True, False])
def test_constant_reward_with_leave_one_out_leaves_only_the_ce_term(small):
    """Every sample rewarded 1, the others' mean is 1: zero advantage, so the
    loss and its gradients are lambda * CE alone."""
    model, task, sample = _setup(small)
    crit = _crit(task, rl_lambda=0.3, rl_baseline="loo", rl_samples=4, reward="constant")
    loss, _, log = crit(model, sample)
    assert log["rl"] == 0.0 and log["reward"] == 4 * B and log["baseline"] == log["steps"] > 0
    model.zero_grad()
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (0.3 * _crit(task, rl_lambda=1.0, rl_baseline="none")(model, sample)[0]).backward()
    for g, want in zip(got, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(g, want)


@pytest.mark.parametrize("small", [True, False])
def test_n_samples_stay_inside_their_example_candidates_and_temperature_explores(small):
    model, task, sample = _setup(small)
    d = task.target_dictionary
    lens = torch.full((B,), 7)
    cold, hot = ({"samples": None} for _ in range(2))
    for out, temp in ((cold, 1e-4), (hot, 3.0)):
        torch.manual_seed(2)
        out.update(model(**sample["net_input"], policy=SampleRequest(lens, num_samples=4, temperature=temp,
                                                                     greedy_too=True))[1])
    for row in range(B * 4):
        allowed = set(sample["net_input"]["candidates"][row // 4].tolist()) if small else set(range(V_TGT))
        steps = hot["samples"].mask[row]
        assert set(hot["samples"].tokens[row][steps].tolist()) <= allowed - {d.pad(), d.bos()}
    def sequences(out):
        return [out.tokens[r][out.mask[r]].tolist() for r in range(out.tokens.size(0))]

    # near-zero temperature: every sample is the greedy decode, and says so
    greedy = [seq for seq in sequences(cold["greedy"]) for _ in range(4)]
    assert sequences(cold["samples"]) == greedy and cold["samples"].is_greedy.all()
    # a hot one: is_greedy says exactly which samples equal the greedy decode; the entropy is higher
    same = [seq == want for seq, want in zip(sequences(hot["samples"]), greedy)]
    assert hot["samples"].is_greedy.tolist() == same and 0 < sum(same) < len(same)
    per_step = [x["samples"].entropy.sum() / x["samples"].mask.sum() for x in (cold, hot)]
    assert per_step[0] < 0.01 < 1.0 < per_step[1]


def test_sampling_entropy_equals_the_softmax_entropy():
    from fairseq_smallvocab.reinforce.sampler import sample_categorical

    logits = torch.randn(5, 9) * 3
    logits[:, [1, 4]] = float("-inf")  # excluded words (pad, bos)
    logits[3] = float("-inf")
    logits[3, 6] = 2.0  # one word left: entropy 0
    _, entropy = sample_categorical(logits.clone(), with_entropy=True)
    p = F.softmax(logits, -1)
    want = -(p * F.log_softmax(logits, -1)).nan_to_num(0.0).sum(-1)
    torch.testing.assert_close(entropy, want, atol=1e-5, rtol=1e-5)
    _, entropy_too, probs = sample_categorical(logits.clone(), with_entropy=True, with_probs=True)
    torch.testing.assert_close(entropy_too, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(probs, p, atol=1e-6, rtol=1e-5)  # the softmax the sampler keeps for scoring
    kept = torch.full((5, 3, 9), -1.0)  # the sampler's B x T x K buffer: step 1 written in place, the rest untouched
    _, entropy_kept, probs = sample_categorical(logits.clone(), with_entropy=True, with_probs=True,
                                                probs_out=kept[:, 1])
    assert probs.data_ptr() == kept[:, 1].data_ptr()
    torch.testing.assert_close(kept[:, 1], p, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(entropy_kept, want, atol=1e-5, rtol=1e-5)
    assert kept[:, 0].eq(-1).all() and kept[:, 2].eq(-1).all()


def test_logged_metrics_of_several_samples():
    from fairseq.logging import metrics

    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=3, reward="chrf", max_sample_len=7)
    logs = [crit(model, sample)[2] for _ in range(2)]
    with metrics.aggregate() as agg:
        ReinforceGleuCriterion.reduce_metrics(logs)
        got = agg.get_smoothed_values()
    samples = sum(log["finite_samples"] for log in logs)
    assert samples == 2 * 3 * B
    assert got["reward"] == pytest.approx(100 * sum(log["reward"] for log in logs) / samples, abs=0.01)
    assert got["greedy_frac"] == pytest.approx(sum(log["greedy_samples"] for log in logs) / samples, abs=1e-3)
    assert got["entropy"] == pytest.approx(sum(log["entropy"] for log in logs) / sum(log["steps"] for log in logs),
                                           abs=1e-3)
    assert 0 < got["reward_std"] == pytest.approx(100 * sum(log["reward_std"] for log in logs) / (2 * B), abs=0.01)


def test_bad_rl_settings_are_named_at_start_up():
    _, task, _ = _setup()
    cases = [(dict(rl_samples=0), r"--rl-samples must be >= 1"),
             (dict(rl_baseline="loo"), r"--rl-baseline loo needs --rl-samples >= 2"),
             (dict(reward="rouge"), r"unknown reward 'rouge': --reward must be one of gleu, bleu, chrf, constant"),
             (dict(sample_temperature=0.0), r"--sample-temperature must be a finite number > 0"),
             (dict(sample_temperature=-1.0), r"--sample-temperature must be a finite number > 0"),
             (dict(sample_temperature=float("inf")), r"--sample-temperature must be a finite number > 0, got inf"),
             (dict(sample_temperature=float("nan")), r"--sample-temperature must be a finite number > 0, got nan"),
             (dict(reward_post_process="sentencepeice"), r"--reward-post-process 'sentencepeice' is not a fairseq "
                                                         r"post-processing; choose one of 'sentencepiece'"),
             (dict(gleu_detok="sentencepiece", reward_post_process="subword_nmt"), r"--gleu-detok .* disagree")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            _crit(task, **kwargs)


def test_a_temperature_whose_scaled_logits_overflow_is_refused():
    """tau = 1e-45: logits / tau are not finite, and every sample would be one
    word repeated to the limit (entropy nan, exit 0 before); a model whose own
    logits are not finite still has its batch skipped, not refused."""
    model, task, sample = _setup()
    with pytest.raises(ValueError, match=r"--sample-temperature 1e-45 makes the logits divided by it overflow"):
        _crit(task, rl_baseline="none", sample_temperature=1e-45)(model.train(), sample)
    _, _, log = _crit(task, rl_baseline="none", sample_temperature=0.5)(model, sample)
    assert log["nonfinite"] == 0 and log["entropy"] > 0
    with torch.no_grad():
        model.decoder.output_bias.fill_(float("nan"))
    _, _, log = _crit(task, rl_baseline="none", sample_temperature=0.5)(model, sample)
    assert log["nonfinite"] == 1


def test_samples_that_cannot_fit_in_memory_are_refused_before_drawing(monkeypatch):
    """--rl-samples 10000 died after 44 s with a bare allocation error: the
    scoring pass's size is estimated first."""
    from fairseq_smallvocab.criterions import reinforce_gleu

    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=10000)
    rows, steps = B * 10000, sample["target"].size(1)
    monkeypatch.setattr(reinforce_gleu, "_available_memory", lambda device: 8 * rows * steps * K - 1)
    drawn = []
    monkeypatch.setattr(model, "sample_and_score", lambda *a, **k: drawn.append(1))
    with pytest.raises(MemoryError, match=rf"--rl-samples 10000 with this batch of {B} sentences makes "
                                          rf"{rows:,} sampled sequences.*lower --rl-samples"):
        crit(model.train(), sample)
    assert not drawn
    monkeypatch.setattr(reinforce_gleu, "_available_memory", lambda device: 8 * rows * steps * K)
    with pytest.raises(TypeError):  # past the check: the stand-in sampler returns nothing
        crit(model, sample)
    assert drawn
    assert reinforce_gleu._available_memory(torch.device("cpu")) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (cuDNN's LSTM)")
@pytest.mark.parametrize("baseline,n", [("learned", 1), ("loo", 2)])
def test_reinforce_backward_on_cuda(baseline, n):
    """On a GPU the encoder's nn.LSTM runs through cuDNN, whose backward refuses
    a forward made in eval mode: the policy's forward must not be one."""
    model, task, sample = _setup(True)
    model, sample = model.cuda().train(), utils.move_to_cuda(sample)
    crit = _crit(task, rl_baseline=baseline, rl_samples=n, max_sample_len=7).cuda()
    loss, _, log = crit(model, sample)
    loss.backward()
    assert log["nonfinite"] == 0 and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                         if p.grad is not None)


def test_ce_term_and_mixing():
    model, task, sample = _setup()
    only_ce = _crit(task, rl_lambda=1.0, rl_baseline="none")
    loss, _, log = only_ce(model, sample)
    lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    target = model.get_targets(sample, model(**sample["net_input"]))
    ce = F.nll_loss(lprobs.view(-1, K), target.view(-1), ignore_index=1, reduction="sum")
    torch.testing.assert_close(loss, ce)
    torch.manual_seed(3)
    mixed, _, mlog = _crit(task, rl_lambda=0.25, rl_baseline="none")(model, sample)
    torch.testing.assert_close(mixed, 0.25 * mlog["ce"] + 0.75 * mlog["rl"])


def test_empty_samples_get_zero_reward_without_crashing():
    model, task, sample = _setup()
    with torch.no_grad():
        model.decoder.output_bias[task.target_dictionary.eos()] = 100.0  # eos first, every time
    crit = _crit(task, rl_baseline="learned")
    loss, _, log = crit(model, sample)
    assert log["reward"] == 0.0 and log["sample_len"] == 0 and log["steps"] == B and torch.isfinite(loss)
    loss.backward()


def test_nonfinite_batches_are_skipped_and_counted(monkeypatch):
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned")
    monkeypatch.setattr(crit, "rewards", lambda *a: torch.full((B,), float("nan")))
    loss, _, log = crit(model, sample)
    assert log["nonfinite"] == 1 and loss.item() == 0.0
    model.zero_grad()
    loss.backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.parameters())
    assert crit.baseline.weight.abs().sum() == 0 and crit.baseline._adam is None  # nor did the baseline learn


def test_bad_settings_are_named():
    _, task, _ = _setup()
    for value in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"--rl-lambda must be in \[0, 1\]"):
            _crit(task, rl_lambda=value)


def test_learned_baseline_fits_rewards_and_its_adam_state_round_trips():
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned", baseline_lr=0.05)
    model.train()
    first = last = None
    for _ in range(30):
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


def test_nonfinite_batches_do_not_pull_the_logged_averages(monkeypatch):
    from fairseq.logging import metrics

    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned")
    model.train()
    torch.manual_seed(3)
    _, _, good = crit(model, sample)
    monkeypatch.setattr(crit, "rewards", lambda *a: torch.full((B,), float("nan")))
    _, _, bad = crit(model, sample)
    assert bad.keys() == good.keys()  # fairseq sums logging outputs key by key (across workers too)

    def reduced(logs):
        summed = {key: sum(log[key] for log in logs) for key in logs[0]}  # as fairseq's trainer sums them
        with metrics.aggregate(new_root=True) as agg:
            ReinforceGleuCriterion.reduce_metrics([summed])
            return agg.get_smoothed_values()

    alone, mixed = reduced([good]), reduced([good, bad, bad])
    assert mixed["nonfinite"] == 2 and alone["nonfinite"] == 0
    for key in ("loss", "ce", "rl_loss", "reward", "baseline", "sample_len", "baseline_mse"):
        assert mixed[key] == alone[key], key
    assert alone["reward"] > 0 and alone["ce"] > 0
    # nothing to average when every batch was skipped: the loss is inf, never a best checkpoint's score (without
    # a loss fairseq logs its placeholder -1, which ranked best)
    assert reduced([bad]) == {"nonfinite": 1, "loss": float("inf")}


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


def test_clip_norm_on_cpu_gradients_when_a_gpu_is_visible(monkeypatch):
    """fairseq 0.12 computes the norm on the GPU whenever one is visible, also for --cpu training, and then
    fails to scale the CPU gradients (seen on an H100: every fairseq-train --cpu --clip-norm). The plugin's
    replacement keeps the norm on the CPU there: the same norm and clipping as torch's."""
    from fairseq import utils as fairseq_utils

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn_like(p) * 5
    expected = [p.grad.clone() for p in params]
    twins = [torch.nn.Parameter(torch.zeros_like(g)) for g in expected]
    for twin, g in zip(twins, expected):
        twin.grad = g.clone()
    want = torch.nn.utils.clip_grad_norm_(twins, 1.0)  # torch's own, for comparison
    scaled = [twin.grad for twin in twins]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    norm = fairseq_utils.clip_grad_norm_(params, 1.0)
    assert norm.device.type == "cpu" and norm.item() == pytest.approx(want.item(), rel=1e-6)
    for p, g in zip(params, scaled):
        torch.testing.assert_close(p.grad, g)


def test_self_critical_baseline_is_the_greedy_reward():
    model, task, sample = _setup()
    with torch.no_grad():
        model.decoder.output_bias[2] = 0.0  # greedy decodes that do not stop at once
    crit = _crit(task, rl_baseline="self-critical", max_sample_len=8)
    _, _, log = crit(model, sample)
    with torch.no_grad():
        greedy = model(**sample["net_input"], policy=SampleRequest(torch.full((B,), 8), greedy_too=True))[1]["greedy"]
    d = task.target_dictionary
    want = 0.0
    for b in range(B):
        ys = [t for t in greedy.tokens[b][greedy.mask[b]].tolist() if t != d.eos()]
        ref = [t for t in sample["target"][b].tolist() if t not in (d.eos(), d.pad())]
        want += gleu(ys, ref)
    assert log["greedy_reward"] == pytest.approx(want, abs=1e-6) and want > 0


MT = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--embed-dim", "16",
      "--batch-size", "32", "--cpu", "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
      "--no-epoch-checkpoints", "--log-interval", "1"]


@pytest.fixture(scope="module")
def ce_checkpoint(tiny_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("ce")
    run(["fairseq-train", tiny_bin, *MT, "--small-vocab-size", "0", "--criterion", "cross_entropy",
         "--optimizer", "adam", "--lr", "0.01", "--max-epoch", "2", "--save-dir", save])
    return save / "checkpoint_best.pt"


@pytest.mark.slow
def test_fairseq_train_fine_tunes_and_resumes_with_the_baseline_state(tiny_bin, ce_checkpoint, tmp_path):
    rl = [*MT, "--small-vocab-size", "0", "--criterion", "reinforce_gleu", "--optimizer", "sgd", "--lr", "0.01",
          "--save-dir", tmp_path / "rl", "--max-sample-len", "20"]
    run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "1", "--finetune-from-model", ce_checkpoint])
    def baseline_state():
        ckpt = torch.load(tmp_path / "rl" / "checkpoint_last.pt", weights_only=True)
        assert ckpt["criterion"] is None  # no parameters: fairseq neither saves nor wraps the criterion
        return ckpt["extra_state"]["TranslationSmallVocabTask"]["reinforce_gleu.baseline"]

    state = baseline_state()
    steps = state["_extra_state"]["adam"]["state"][0]["step"]
    assert steps > 0 and state["weight"].abs().sum() > 0
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "2", "--batch-splits", "2"])  # resumes
    log = out.stdout + out.stderr
    assert "Loaded checkpoint" in log and "reward" in log and "baseline_mse" in log
    assert "restored reinforce_gleu.baseline from the checkpoint" in log
    state2 = baseline_state()
    # the resumed epoch continued the saved Adam: the same updates, each now two chunks (--batch-splits 2)
    # with one baseline step each; a fresh baseline would count 2 * steps
    assert state2["_extra_state"]["adam"]["state"][0]["step"] == steps + 2 * steps

    # resumed with another baseline: the saved one is not restored, and the log says so
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "3", "--rl-baseline", "loo", "--rl-samples", "2"])
    assert "the checkpoint holds reinforce_gleu.baseline, which this run does not use" in out.stdout + out.stderr

    # resumed from weights gone to NaN: every batch is skipped, and nothing replaces the saved checkpoints
    last = tmp_path / "rl" / "checkpoint_last.pt"
    ckpt = torch.load(last, weights_only=False)
    for value in ckpt["model"].values():
        value.fill_(float("nan"))
    torch.save(ckpt, last)
    saved = {p.name: p.read_bytes() for p in (tmp_path / "rl").glob("checkpoint*.pt")}
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "4", "--rl-baseline", "loo", "--rl-samples", "2"],
              check=False)
    assert out.returncode != 0 and "was skipped because its reward or loss was not finite" in out.stderr
    assert re.search(r"valid on 'valid' subset \| nonfinite \d+ \| loss inf", out.stdout)  # not fairseq's -1
    assert {p.name: p.read_bytes() for p in (tmp_path / "rl").glob("checkpoint*.pt")} == saved


@pytest.mark.slow
def test_fairseq_train_with_several_samples_a_sacrebleu_reward_and_temperature(tiny_bin, ce_checkpoint, tmp_path):
    """--rl-samples 3 --rl-baseline loo --reward chrf --sample-temperature 0.8 through fairseq-train: the
    new metrics are logged, a resumed run continues (the leave-one-out baseline keeps no state), and bad
    settings stop fairseq-train at start-up with the criterion's message."""
    rl = [*MT, "--small-vocab-size", "0", "--criterion", "reinforce_gleu", "--optimizer", "sgd", "--lr", "0.01",
          "--save-dir", tmp_path / "rl", "--max-sample-len", "20", "--rl-samples", "3", "--rl-baseline", "loo",
          "--reward", "chrf", "--sample-temperature", "0.8"]
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "1", "--finetune-from-model", ce_checkpoint])
    log = out.stdout + out.stderr
    values = {key: float(re.findall(rf"\| {key} ([-\d.]+)", log)[-1])
              for key in ("reward", "reward_std", "greedy_frac", "entropy", "baseline")}
    assert 0 < values["reward"] < 100 and values["reward_std"] > 0 and 0 <= values["greedy_frac"] <= 1
    assert values["entropy"] > 0 and "baseline_mse" not in log
    ckpt = torch.load(tmp_path / "rl" / "checkpoint_last.pt", weights_only=False)
    assert "reinforce_gleu.baseline" not in str(ckpt["extra_state"].get("TranslationSmallVocabTask", {}))
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "2"])
    assert "Loaded checkpoint" in out.stdout + out.stderr and "epoch 002" in out.stdout + out.stderr
    for flags, message in ((["--rl-samples", "1"], "--rl-baseline loo needs --rl-samples >= 2"),
                           (["--reward", "rouge"], "invalid choice: 'rouge'")):  # the others: test_bad_rl_settings
        bad = run(["fairseq-train", tiny_bin, *rl, *flags, "--max-epoch", "3"], check=False)
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr[-2000:]


@pytest.mark.slow
def test_reinforce_raises_the_reward_on_a_tiny_learnable_task():
    """Copying 3-5 words: after a short CE warm-up, 300 REINFORCE steps (pure
    RL, learned baseline, Adam 0.003) raise the mean sample GLEU on held-out
    batches.  (At Adam 0.01 pure RL is unstable here: over seeds 0-5 of this
    setting the reward fell in 2 runs; at 0.003 it rose by 0.012-0.030 in all.)"""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add overhead
    try:
        _learn_to_copy()
    finally:
        torch.set_num_threads(threads)


def _learn_to_copy():
    torch.manual_seed(0)
    d = make_dictionary(24)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    model = restrict(LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=32, dropout=0.0), task))

    def batch(n=32):
        length = int(torch.randint(3, 6, (1,)))
        src = torch.cat([torch.randint(4, 24, (n, length)), torch.full((n, 1), d.eos())], 1)
        prev = torch.cat([torch.full((n, 1), d.eos()), src[:, :-1]], 1)
        return {"id": torch.arange(n), "target": src.clone(), "nsentences": n, "ntokens": n * (length + 1),
                "net_input": {"src_tokens": src, "src_lengths": torch.full((n,), length + 1),
                              "prev_output_tokens": prev}}

    rl = _crit(task, rl_lambda=0.0, rl_baseline="learned", baseline_lr=0.01, max_sample_len=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def train(criterion, steps):
        for _ in range(steps):
            loss, n, _ = criterion(model, batch())
            optimizer.zero_grad()
            (loss / n).backward()
            optimizer.step()

    def held_out_reward():
        rng = torch.get_rng_state()
        torch.manual_seed(7)
        model.eval()
        with torch.no_grad():
            total = sum(log["reward"] / n for _, n, log in (rl(model, batch()) for _ in range(16)))
        model.train()
        torch.set_rng_state(rng)
        return total / 16

    train(_crit(task, rl_lambda=1.0, rl_baseline="none"), 60)  # CE warm-up
    for group in optimizer.param_groups:
        group["lr"] = 0.003
    before = held_out_reward()
    train(rl, 300)
    after = held_out_reward()
    assert after > before + 0.01, (before, after)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_two(tiny_bin, ce_ckpt, save, extra, model=MT):
    """Two fairseq-train workers (ranks 0 and 1) of one distributed run
    (fine-tuning ``ce_ckpt``, or from scratch when None)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    port = _free_port()
    exe = str(Path(sys.executable).parent / "fairseq-train")
    procs = []
    for rank in (0, 1):
        args = [exe, str(tiny_bin), *map(str, model), "--small-vocab-size", "0", "--criterion", "reinforce_gleu",
                "--optimizer", "sgd", "--lr", "0.01", "--max-epoch", "1", "--batch-size", "16",
                *(["--finetune-from-model", str(ce_ckpt)] if ce_ckpt else []), "--save-dir", str(save),
                "--max-sample-len", "30",
                "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-world-size", "2",
                "--distributed-rank", str(rank), "--distributed-no-spawn", "--device-id", str(rank), *extra]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(os.environ, OMP_NUM_THREADS="1")))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    return outs


def _valid_stats(out):
    """The first validation's logged values, as {name: text}."""
    line = re.search(r"valid on 'valid' subset \| (.*)", out).group(1)
    return dict(part.strip().split(" ", 1) for part in line.split(" | "))


@pytest.mark.slow
def test_distributed_data_parallel_on_cpu_with_gloo_validates_as_one_process(tiny_bin, ce_checkpoint, predictor,
                                                                              tmp_path):
    """fairseq's DDP with 2 CPU processes: gloo, --ddp-backend legacy_ddp (PyTorch's
    DDP wrapper wants devices), fine-tuning from a checkpoint (rank 0 broadcasts
    it through torch.load: the plugin's allow-list covers that too), inside
    predicted vocabularies, validating: fairseq sums the workers' logging outputs
    as tensors there, and the teacher-forced validation numbers equal a single
    process's on the same data and weights (learning rate 0)."""
    small = ["--small-vocab-size", "100", "--vocab-predictor", predictor, "--candidates-dir", tmp_path / "cands",
             "--lr", "0"]
    one = run(["fairseq-train", tiny_bin, *MT, "--criterion", "reinforce_gleu", "--optimizer", "sgd",
               "--max-epoch", "1", "--batch-size", "16", "--max-sample-len", "30", "--finetune-from-model",
               ce_checkpoint, "--save-dir", tmp_path / "one", *small])  # also writes the lists both workers read
    outs = _launch_two(tiny_bin, ce_checkpoint, tmp_path / "rl",
                       ["--cpu", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", *small])
    assert "initialized host" in outs[1] and "as rank 1" in outs[1]
    assert re.search(r"train \| epoch 001 .*baseline_mse .*bsz 3\d", outs[0])  # 2 x 16 sentences per update
    assert (tmp_path / "rl" / "checkpoint_last.pt").exists()
    single, both = _valid_stats(one.stdout + one.stderr), _valid_stats(outs[0])
    for key in ("ce", "gold_outside_cands"):
        assert float(both[key]) == float(single[key]), (key, single, both)
    assert float(single["gold_outside_cands"]) > 0  # valid lists are the predictor's own: some gold words miss


TRANSFORMER_MT = [*MT[:4], "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                  "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                  "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                  "--share-decoder-input-output-embed", *MT[8:]]


@pytest.mark.slow
def test_distributed_reinforce_on_a_transformer_with_gloo(tiny_bin, tmp_path):
    """The generic sampler through fairseq's DDP: a stock transformer, 2 CPU processes."""
    assert MT[4:8] == ["--arch", "lstm_smallvocab", "--embed-dim", "16"]
    outs = _launch_two(tiny_bin, None, tmp_path / "rl", ["--cpu", "--distributed-backend", "gloo",
                                                         "--ddp-backend", "legacy_ddp"], model=TRANSFORMER_MT)
    assert re.search(r"train \| epoch 001 .*reward .*baseline_mse .*bsz 3\d", outs[0])
    assert (tmp_path / "rl" / "checkpoint_last.pt").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (PyTorch DDP, NCCL)")
def test_distributed_data_parallel_on_gpus(tiny_bin, ce_checkpoint, tmp_path):
    _launch_two(tiny_bin, ce_checkpoint, tmp_path / "rl", ["--rl-baseline", "self-critical"])


def _baseline_worker(rank, port, out):
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    _, task, _ = _setup()
    crit = _crit(task, rl_baseline="learned", baseline_lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each worker sees other states and rewards
    for _ in range(3):
        crit.baseline.learn(torch.randn(4, 3, D, generator=gen), torch.ones(4, 3), torch.rand(4, generator=gen))
    torch.save(crit.state_dict()["baseline.weight"], out / f"w{rank}.pt")
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_learned_baseline_stays_identical_across_workers(tmp_path):
    torch.multiprocessing.spawn(_baseline_worker, args=(_free_port(), tmp_path), nprocs=2, join=True)
    w0, w1 = torch.load(tmp_path / "w0.pt"), torch.load(tmp_path / "w1.pt")
    assert w0.abs().sum() > 0 and torch.equal(w0, w1)


def test_gleu_on_detokenized_words_for_subword_data():
    """--gleu-detok sentencepiece scores words: differently split but equal
    sentences get reward 1."""
    d = Dictionary()
    for piece in ["\u2581the", "\u2581th", "e", "\u2581cat", "\u2581sat"]:
        d.add_symbol(piece)
    ids = {d[i]: i for i in range(len(d))}
    task = SimpleNamespace(target_dictionary=d)
    hyp = torch.tensor([[ids["\u2581the"], ids["\u2581cat"], ids["\u2581sat"]]])
    ref = torch.tensor([[ids["\u2581th"], ids["e"], ids["\u2581cat"], ids["\u2581sat"], d.eos()]])
    plain = _crit(task, rl_baseline="none").rewards(hyp, torch.tensor([3]), ref)
    words = _crit(task, rl_baseline="none", gleu_detok="sentencepiece").rewards(
        hyp, torch.tensor([3]), ref)
    assert words.tolist() == [1.0] and plain.item() == pytest.approx(gleu([1, 2, 3], [4, 5, 2, 3]))


def test_learned_baseline_state_saved_before_its_first_step_restores_an_unfitted_baseline():
    """A state saved before any batch (weight of size 0, no Adam state), loaded into a fitted baseline,
    gives back the unfitted one: its next step equals a fresh baseline's (benchmark.py --ab restores
    such a snapshot between the two settings it compares)."""
    from fairseq_smallvocab.reinforce.baselines import LearnedBaseline

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
    from fairseq_smallvocab.reinforce.baselines import LearnedBaseline

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
