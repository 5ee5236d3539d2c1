"""smallvocab_reinforce's samples, rewards and logged metrics: N samples per input stay
inside their example's candidates and the temperature explores, the sampler's
entropy and kept softmax, GLEU on detokenized words, and the metrics logged over
several samples and over skipped (non-finite) batches."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from helpers import V_TGT, B, _crit, _setup

from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceCriterion
from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.reinforce.rewards import gleu


@pytest.mark.parametrize("small", [True, False])
def test_n_samples_stay_inside_their_example_candidates_and_temperature_explores(small):
    model, task, sample = _setup(small)
    d = task.target_dictionary
    lens = torch.full((B,), 7)
    cold, hot = ({"samples": None} for _ in range(2))
    for out, temp in ((cold, 1e-4), (hot, 3.0)):
        torch.manual_seed(2)
        out.update(model(**sample["net_input"], sample_request=SampleRequest(lens, num_samples=4, temperature=temp,
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
    from fairseq_smallvocab.engine.loop import sample_categorical

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
        SmallVocabReinforceCriterion.reduce_metrics(logs)
        got = agg.get_smoothed_values()
    samples = sum(log["finite_samples"] for log in logs)
    assert samples == 2 * 3 * B
    assert got["reward"] == pytest.approx(100 * sum(log["reward"] for log in logs) / samples, abs=0.01)
    assert got["greedy_frac"] == pytest.approx(sum(log["greedy_samples"] for log in logs) / samples, abs=1e-3)
    assert got["entropy"] == pytest.approx(sum(log["entropy"] for log in logs) / sum(log["steps"] for log in logs),
                                           abs=1e-3)
    assert 0 < got["reward_std"] == pytest.approx(100 * sum(log["reward_std"] for log in logs) / (2 * B), abs=0.01)


def test_nonfinite_batches_do_not_pull_the_logged_averages(monkeypatch):
    from fairseq.logging import metrics

    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="learned")
    model.train()
    torch.manual_seed(3)
    _, _, good = crit(model, sample)
    words = (torch.full((B,), 3), torch.full((B,), 4))
    monkeypatch.setattr(crit, "rewards", lambda *a: (torch.full((B,), float("nan")), None, words))
    _, _, bad = crit(model, sample)
    assert bad.keys() == good.keys()  # fairseq sums logging outputs key by key (across workers too)

    def reduced(logs):
        summed = {key: sum(log[key] for log in logs) for key in logs[0]}  # as fairseq's trainer sums them
        with metrics.aggregate(new_root=True) as agg:
            SmallVocabReinforceCriterion.reduce_metrics([summed])
            return agg.get_smoothed_values()

    alone, mixed = reduced([good]), reduced([good, bad, bad])
    assert mixed["nonfinite"] == 2 and alone["nonfinite"] == 0
    for key in ("loss", "ce", "rl_loss", "reward", "baseline", "sample_len", "len_ratio", "baseline_mse"):
        assert mixed[key] == alone[key], key
    assert alone["reward"] > 0 and alone["ce"] > 0
    # nothing to average when every batch was skipped: the loss is inf, never a best checkpoint's score (without
    # a loss fairseq logs its placeholder -1, which ranked best)
    assert reduced([bad]) == {"nonfinite": 1, "loss": float("inf")}


def test_gleu_on_detokenized_words_for_subword_data():
    """--reward-post-process sentencepiece scores words: differently split but equal
    sentences get reward 1."""
    d = Dictionary()
    for piece in ["\u2581the", "\u2581th", "e", "\u2581cat", "\u2581sat"]:
        d.add_symbol(piece)
    ids = {d[i]: i for i in range(len(d))}
    task = SimpleNamespace(target_dictionary=d)
    hyp = torch.tensor([[ids["\u2581the"], ids["\u2581cat"], ids["\u2581sat"]]])
    ref = torch.tensor([[ids["\u2581th"], ids["e"], ids["\u2581cat"], ids["\u2581sat"], d.eos()]])
    drawn, batch = SimpleNamespace(tokens=hyp, lengths=torch.tensor([3])), {"target": ref, "net_input": {}}
    plain, _, _ = _crit(task, rl_baseline="none").rewards(batch, drawn, None, 1)
    words, _, _ = _crit(task, rl_baseline="none", reward_post_process="sentencepiece").rewards(batch, drawn, None, 1)
    assert words.tolist() == [1.0] and plain.item() == pytest.approx(gleu([1, 2, 3], [4, 5, 2, 3]))
