"""--rl-objective risk (sequence-level risk over each input's distinct samples): the objective's gradient against
its formula, repeated samples counted once, the criterion's loss and every gradient against the candidates'
risk computed by hand from each sample scored alone under the full softmax masked to the example's candidates
(the small softmax) or the full softmax itself, the logs (reduced the same across workers), and bad settings."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import V_TGT, B, _crit, _setup, ranked_choices, same_reduced_values
from translation_helpers import mt_task

from fairseq_smallvocab.reinforce import objective
from fairseq_smallvocab.reinforce.config import SmallVocabReinforceConfig, check_config
from fairseq_smallvocab.reinforce.rewards import gleu


def test_expected_risk_gradient_is_q_times_the_cost_minus_the_expected_cost():
    """dL/ds_j = q_j (c_j - sum_k q_k c_k) over an example's distinct samples, 0 for a repeated one; and the
    length-normalised score's gradient is alpha / |y| on every counted step."""
    torch.manual_seed(0)
    n = 4
    reward = torch.rand(3 * n)
    keep = torch.ones(3 * n, dtype=torch.bool)
    keep[[2, 7]] = False  # repeats of an earlier sample of their example
    scores = torch.randn(3 * n, requires_grad=True)
    loss, q = objective.expected_risk(reward, scores, keep, n)
    loss.backward()
    want, want_loss = torch.zeros(3 * n), 0.0
    for b in range(3):
        rows = [r for r in range(b * n, b * n + n) if keep[r]]
        w = torch.softmax(scores.detach()[rows], 0)
        cost = 1 - reward[rows]
        mean = float((w * cost).sum())
        want_loss += mean
        for i, r in enumerate(rows):
            want[r] = w[i] * (cost[i] - mean)
            assert q[r].item() == pytest.approx(w[i].item(), abs=1e-6)
    assert loss.item() == pytest.approx(want_loss, abs=1e-6) and q[[2, 7]].eq(0).all()
    torch.testing.assert_close(scores.grad, want)

    lprobs = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    objective.candidate_scores(lprobs, mask, 0.5).sum().backward()
    torch.testing.assert_close(lprobs.grad, mask.float() * torch.tensor([[0.5 / 3], [0.5 / 5]]))


def test_distinct_keeps_the_first_of_equal_samples_of_each_example():
    pad = 1
    tokens = torch.tensor([[5, 6, 2, pad], [5, 6, 2, pad], [5, 2, pad, pad], [5, 6, 2, pad],  # example 0
                           [5, 6, 2, pad], [7, 2, pad, pad], [7, 2, pad, pad], [8, 9, 9, 2]])  # example 1
    assert objective.distinct(tokens, 4).tolist() == [True, False, True, False, True, True, False, True]


def _hand_risk(model, task, sample, samples, n, sharpness, small):
    """The risk of every example's distinct samples, each sample scored alone (its own teacher-forced pass) under
    the full softmax masked to the example's candidates (or the full softmax), pad and bos excluded as the
    sampler excludes them; with gradient.  Returns (risk, summed rewards, distinct samples)."""
    d = task.target_dictionary
    eos, pad = d.eos(), d.pad()
    tokens, mask = samples.tokens, samples.mask
    total, rewards, distinct = 0.0, 0.0, 0
    for b in range(B):
        seen, scores, costs = [], [], []
        for row in range(b * n, b * n + n):
            steps = int(mask[row].sum())
            ys = tokens[row, :steps].tolist()
            ref = [t for t in sample["target"][b].tolist() if t not in (eos, pad)]
            reward = gleu([t for t in ys if t != eos], ref)
            rewards += reward
            if ys in seen:
                continue
            seen.append(ys)
            prev = torch.tensor([[eos] + ys[:-1]])
            logits = model(src_tokens=sample["net_input"]["src_tokens"][b: b + 1],
                           src_lengths=sample["net_input"]["src_lengths"][b: b + 1], prev_output_tokens=prev)[0][0]
            allowed = torch.zeros(V_TGT, dtype=torch.bool)
            if small:
                allowed[sample["net_input"]["candidates"][b]] = True
            else:
                allowed[:] = True
            allowed[[pad, d.bos()]] = False
            lprobs = F.log_softmax(logits.masked_fill(~allowed, float("-inf")), -1)
            chosen = lprobs[torch.arange(steps), torch.tensor(ys)]
            scores.append(sharpness * chosen.sum() / steps)
            costs.append(1.0 - reward)
        distinct += len(seen)
        q = torch.softmax(torch.stack(scores), 0)
        total = total + (q * torch.tensor(costs)).sum()
    return total, rewards, distinct


@pytest.mark.parametrize("small", [True, False])
def test_risk_loss_and_gradients_equal_each_sample_scored_alone_on_the_masked_full_softmax(small, monkeypatch):
    """The criterion's loss, lambda CE + (1 - lambda) risk, and the gradient of every parameter, from one batched
    pass over N samples per input with repeats among them, equal the risk computed by hand from the same samples
    each scored alone under the full softmax masked to the candidates (the small softmax's oracle) and the CE
    term; a repeated sample counts once."""
    n, lam, alpha = 4, 0.3, 2.0
    model, task, sample = _setup(small)
    params = [p for p in model.parameters() if p.requires_grad]
    ranked_choices(monkeypatch, lambda r: [0, 1, 0, 2][r % n])  # samples 0 and 2 of each input are one
    crit = _crit(task, ce_weight=lam, rl_objective="risk", risk_sharpness=alpha, max_sample_len=7, rl_samples=n)
    model.zero_grad()
    loss, size, log = crit(model, sample)
    loss.backward()
    got = [p.grad.clone() for p in params]
    assert size == B and log["distinct"] <= 3 * B

    from fairseq_smallvocab.engine.sampling import SampleRequest
    with torch.no_grad():
        samples = model(**sample["net_input"],
                        sample_request=SampleRequest(torch.full((B,), 7), num_samples=n))[1]["samples"]
    assert samples.mask.any(1).all() and (~samples.mask).any()  # samples of several lengths
    model.zero_grad()
    ce = _crit(task, ce_weight=1.0)(model, sample)[0]
    risk, rewards, distinct = _hand_risk(model, task, sample, samples, n, alpha, small)
    want_loss = lam * ce + (1 - lam) * risk
    want_loss.backward()
    assert log["distinct"] == distinct and log["reward"] == pytest.approx(rewards, abs=1e-5) and rewards > 0
    assert log["risk"] == pytest.approx(risk.item(), abs=1e-5) and "baseline" not in log
    torch.testing.assert_close(loss.detach(), want_loss.detach(), atol=1e-5, rtol=1e-5)
    for g, p in zip(got, params):
        torch.testing.assert_close(g, p.grad, atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in got)


def test_a_step_on_the_risk_lowers_the_risk_of_its_samples():
    """A small step of plain SGD along the criterion's gradient (risk alone, lambda 0) lowers the expected cost of
    the samples it was computed on: the candidates' weight moves towards the cheaper ones."""
    from fairseq_smallvocab.engine.sampling import SampleRequest

    n = 6
    model, task, sample = _setup(True)
    crit = _crit(task, ce_weight=0.0, rl_objective="risk", max_sample_len=7, rl_samples=n)
    torch.manual_seed(4)
    loss, _, log = crit(model, sample)
    model.zero_grad()
    loss.backward()
    torch.manual_seed(4)  # the same draws: the same samples
    with torch.no_grad():
        samples = model(**sample["net_input"],
                        sample_request=SampleRequest(torch.full((B,), 7), num_samples=n))[1]["samples"]
        before = _hand_risk(model, task, sample, samples, n, 1.0, True)[0]
        assert before.item() == pytest.approx(log["risk"], abs=1e-5)
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
        after = _hand_risk(model, task, sample, samples, n, 1.0, True)[0]
    assert after < before - 1e-4


def test_risk_logs_reduce_as_one_process_does(tiny_bin):
    """risk (x 100, per input) and distinct (distinct samples per input) from two workers' batches, summed as
    fairseq's distributed trainer sums them or not; no baseline is logged."""
    task = mt_task(tiny_bin, small_vocab_size=40)
    model, _, sample = _setup()
    crit = _crit(task, rl_objective="risk", rl_samples=3, max_sample_len=9)
    logs = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        logs.append(crit(model.eval(), sample)[2])
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    sentences = sum(log["nsentences"] for log in logs)
    assert values["risk"] == pytest.approx(100 * sum(log["risk"] for log in logs) / sentences, abs=0.01)
    assert values["distinct"] == pytest.approx(sum(log["distinct"] for log in logs) / sentences, abs=0.01)
    assert 1 <= values["distinct"] <= 3 and 0 < values["risk"] <= 100 and "baseline" not in values


@pytest.mark.parametrize("options,message", [
    (dict(rl_objective="risk", rl_samples=1), "--rl-objective risk needs --rl-samples >= 2"),
    (dict(rl_objective="risk", rl_samples=2, risk_sharpness=0.0),
     r"--risk-sharpness must be a finite number in \(0, 634\], got 0"),
    (dict(rl_objective="risk", rl_samples=2, risk_sharpness=math.inf), "--risk-sharpness"),
    (dict(rl_objective="mrt"), "--rl-objective must be reinforce or risk"),
])
def test_bad_risk_settings_are_refused_naming_the_flag(options, message):
    with pytest.raises(ValueError, match=message):
        check_config(SmallVocabReinforceConfig(**options))


def test_risk_takes_no_baseline_whatever_rl_baseline_says():
    """Risk needs no baseline: the leave-one-out baseline's N >= 2 or a learned baseline's state do not apply."""
    _, task, _ = _setup()
    crit = _crit(task, rl_objective="risk", rl_samples=2, rl_baseline="learned")
    assert type(crit.baseline).__name__ == "NoBaseline"


@pytest.mark.parametrize("small", [True, False])
def test_beam_candidates_are_the_searchs_n_best_and_their_risk_equals_the_hand_computation(small):
    """--risk-candidates beam: each example's N candidates are the N best hypotheses of the plugin's beam search of
    width N inside its candidates (fairseq's generator on the example alone), distinct, best first; the loss and
    every gradient equal the risk computed by hand from them, each scored alone on the masked full softmax."""
    from fairseq_smallvocab.models.generation import BeamRequest, SmallVocabSequenceGenerator

    n, lam, alpha = 3, 0.2, 1.5
    model, task, sample = _setup(small)
    params = [p for p in model.parameters() if p.requires_grad]
    crit = _crit(task, ce_weight=lam, rl_objective="risk", risk_candidates="beam", risk_sharpness=alpha,
                 max_sample_len=7, rl_samples=n)
    model.zero_grad()
    loss, _, log = crit(model, sample)
    loss.backward()
    got = [p.grad.clone() for p in params]
    assert log["distinct"] == n * B and "greedy_samples" not in log and "entropy" not in log
    with torch.no_grad():
        samples = model(**sample["net_input"], sample_request=BeamRequest(torch.full((B,), 7), num_samples=n))[1][
            "samples"]
    net = sample["net_input"]
    for b in range(B):
        alone = {k: net[k][b: b + 1] for k in ("src_tokens", "src_lengths")}
        if small:
            alone["candidates"] = net["candidates"][b: b + 1]
        generator = SmallVocabSequenceGenerator([model], task.target_dictionary, beam_size=n, max_len_a=0,
                                                max_len_b=6)
        want = [h["tokens"].tolist() for h in generator.generate([model], {"net_input": alone})[0]]
        rows = [samples.tokens[r][samples.mask[r]].tolist() for r in range(b * n, b * n + n)]
        assert rows == want and len({tuple(r) for r in rows}) == n
        if small:
            assert set(sum(rows, [])) <= set(net["candidates"][b].tolist())
    model.zero_grad()
    ce = _crit(task, ce_weight=1.0)(model, sample)[0]
    risk, _, distinct = _hand_risk(model, task, sample, samples, n, alpha, small)
    want_loss = lam * ce + (1 - lam) * risk
    want_loss.backward()
    assert distinct == n * B and log["risk"] == pytest.approx(risk.item(), abs=1e-5)
    torch.testing.assert_close(loss.detach(), want_loss.detach(), atol=1e-5, rtol=1e-5)
    for g, p in zip(got, params):
        torch.testing.assert_close(g, p.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("options,message", [
    (dict(rl_objective="reinforce", risk_candidates="beam", rl_samples=2), "--risk-candidates beam is risk's"),
    (dict(rl_objective="risk", risk_candidates="beam", rl_samples=2, sample_temperature=0.5),
     "--sample-temperature does not apply to --risk-candidates beam"),
    (dict(rl_objective="risk", risk_candidates="beam", rl_samples=2, rl_engine="merged_pass=on"),
     "--rl-engine merged_pass=on merges the CE pass with drawing samples"),
])
def test_beam_candidates_outside_risk_or_with_a_temperature_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        check_config(SmallVocabReinforceConfig(**options))


def test_a_sharpness_whose_scores_would_overflow_is_refused_naming_the_flag():
    """--risk-sharpness 1e38 passed its check, then every candidate's score (alpha times its mean log-probability)
    overflowed to -inf, every batch was skipped as non-finite and the run's stop blamed --lr. The largest accepted
    sharpness keeps the scores of candidates as unlikely as a softmax can draw finite in half precision."""
    from fairseq_smallvocab.reinforce.config import MAX_RISK_SHARPNESS

    for alpha in (1e38, MAX_RISK_SHARPNESS * 1.01):
        with pytest.raises(ValueError, match=r"--risk-sharpness must be a finite number in \(0, 6\d\d\]") as err:
            check_config(SmallVocabReinforceConfig(rl_objective="risk", rl_samples=2, risk_sharpness=alpha))
        assert f"got {alpha:g}" in str(err.value)
    check_config(SmallVocabReinforceConfig(rl_objective="risk", rl_samples=2, risk_sharpness=MAX_RISK_SHARPNESS))
    # the lowest per-step log-probability of a word a float32 softmax can draw (its probability the smallest
    # float32 above 0), at every step: the score stays finite in float16 and so does its gradient
    lprobs = torch.full((2, 3), math.log(2.0 ** -149), requires_grad=True)
    mask = torch.ones(2, 3, dtype=torch.bool)
    scores = objective.candidate_scores(lprobs, mask, MAX_RISK_SHARPNESS)
    assert torch.isfinite(scores.half()).all()
    risk, _ = objective.expected_risk(torch.tensor([0.2, 0.7]), scores, torch.ones(2, dtype=torch.bool), 2)
    risk.backward()
    assert torch.isfinite(lprobs.grad.half()).all()


def test_risk_whose_candidates_are_all_one_sentence_warns_once(monkeypatch, caplog):
    """Every input's N samples the same sentence (distinct = 1): the risk has no gradient, which the log said
    nowhere; a warning says so once with what to do, except for the constant control reward (which never has
    one), and nothing is said while the candidates differ."""
    import logging

    model, task, sample = _setup(True)
    ranked_choices(monkeypatch, lambda r: 0)  # every sample the greedy one
    crit = _crit(task, ce_weight=0.0, rl_objective="risk", max_sample_len=7, rl_samples=3)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            _, _, log = crit(model.train(), sample)
    assert log["distinct"] == B
    said = [r.getMessage() for r in caplog.records if "same sentence" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "3 candidates" in said[0] and "no gradient" in said[0] and "--rl-samples" in said[0]
    assert "--sample-temperature" in said[0] and "--risk-candidates beam" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _crit(task, ce_weight=0.0, rl_objective="risk", max_sample_len=7, rl_samples=3, reward="constant")(
            model, sample)
        ranked_choices(monkeypatch, lambda r: r % 3)  # three different samples per input
        _crit(task, ce_weight=0.0, rl_objective="risk", max_sample_len=7, rl_samples=3)(model, sample)
    assert "same sentence" not in caplog.text


@pytest.mark.parametrize("small", [True, False])
def test_a_beam_as_wide_as_the_vocabulary_is_refused_naming_rl_samples(small):
    """--risk-candidates beam searches with a beam of --rl-samples, which keeps at most K - 1 hypotheses (|V| - 1
    without candidates): a wider one was refused naming --beam, a flag the user never gave (K), or failed in the
    decoder with a batch size mismatch (|V|)."""
    model, task, sample = _setup(small)
    width = sample["net_input"]["candidates"].size(1) if small else len(task.target_dictionary)
    crit = _crit(task, rl_objective="risk", risk_candidates="beam", max_sample_len=7, rl_samples=width)
    with pytest.raises(ValueError, match=rf"--rl-samples {width} \(--risk-candidates beam's width\)") as err:
        crit(model, sample)
    assert "--beam" not in str(err.value) and f"--rl-samples {width - 1} or less" in str(err.value)
