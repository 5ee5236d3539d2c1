"""benchmark.py --sample-limit flat: every sample (and the greedy decode) exactly
--max-sample-len tokens, whatever the timed steps teach the model about eos
(``smallvocab_tools/bench/flat_limit.py``); the recipe's limit, the default,
samples as training does (eos drawn, the training criterion itself)."""

import pytest
import torch

from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceCriterion
from fairseq_smallvocab.engine import passes, sampling
from smallvocab_tools.bench.flat_limit import SamplesToTheLimit
from smallvocab_tools.bench.train_worker import train_worker
from smallvocab_tools.bench.workload import real_setup

LIMIT = 30


@pytest.fixture
def drawn(monkeypatch):
    """Every sample request the engine gets, with the lengths it drew (and the greedy decode's)."""
    seen, real = [], sampling.draw

    def draw(model, encoder_out, candidates, request, keep_graph):
        out = real(model, encoder_out, candidates, request, keep_graph)
        greedy = out.out.get("greedy")
        seen.append((request.to_limit, out.samples.lengths.tolist(),
                     None if greedy is None else greedy.lengths.tolist()))
        return out

    monkeypatch.setattr(sampling, "draw", draw)
    return seen


def _tiny(sample_limit, softmax, baseline, capture):
    """A configuration whose untrained model draws eos about one step in six to ten (|V| = 12 with the full
    softmax, K = 8 of 40 words with the small one): its samples end well before LIMIT unless eos is kept out."""
    small = softmax == "small"
    vocab = 40 if small else 12
    return {"device": "cpu", "mode": "reinforce", "softmax": softmax, "vocab_size": vocab, "src_vocab_size": vocab,
            "arch": "lstm_smallvocab", "layers": None, "K": 8 if small else 0, "d": 8, "batch": 6, "max_len": 6,
            "steps": 2, "warmup": 1, "threads": 1, "epoch_sentences": 100, "zipf": 0.0,
            "rl_samples": 2 if baseline == "loo" else 1, "rl_baseline": baseline, "sample_limit": sample_limit,
            "max_sample_len": LIMIT, "set": [f"capture={capture}"]}


@pytest.mark.parametrize("softmax, baseline, capture", [
    ("small", "loo", "off"), ("full", "self-critical", "off"), ("small", "self-critical", "buckets"),
    ("full", "learned", "buckets")])
def test_flat_limit_samples_run_to_the_limit_and_the_recipes_end_at_eos(drawn, softmax, baseline, capture):
    flat = train_worker(_tiny("flat", softmax, baseline, capture))
    assert flat["sample_limit"] == "flat" and flat["sample_len"] == LIMIT
    assert drawn and all(to_limit for to_limit, _, _ in drawn)
    for _, lengths, greedy in drawn:  # every row of every step, warm-up included
        assert set(lengths) == {LIMIT} and (greedy is None or set(greedy) == {LIMIT})
    assert (baseline == "self-critical") == all(greedy is not None for _, _, greedy in drawn)

    del drawn[:]
    recipe = train_worker(_tiny("recipe", softmax, baseline, capture))  # the default: as training samples
    assert not any(to_limit for to_limit, _, _ in drawn)
    lengths = [n for _, rows, _ in drawn for n in rows]
    assert min(lengths) < LIMIT / 3 and recipe["sample_len"] < 0.7 * LIMIT
    timed = lengths[len(lengths) // 3:]  # the record's: the 2 timed steps' samples, not the warm-up step's
    assert recipe["sample_len"] == round(sum(timed) / len(timed), 1)


@pytest.mark.parametrize("sample_limit, criterion", [("flat", SamplesToTheLimit),
                                                     ("recipe", SmallVocabReinforceCriterion)])
def test_real_batches_get_the_criterion_of_their_limit(tiny_bin, drawn, sample_limit, criterion):
    """--data: the flat limit's criterion runs the corpus's samples to the limit; the recipe's is the training
    criterion itself, as fairseq-train builds it (its samples limited by the source's length)."""
    cfg = {"device": "cpu", "mode": "reinforce", "softmax": "full", "K": 0, "d": 8, "batch": 8, "max_len": 50,
           "steps": 1, "warmup": 1, "threads": 1, "epoch_sentences": 100, "zipf": 0.0, "arch": "lstm_smallvocab",
           "rl_samples": 1, "rl_baseline": "learned", "sample_limit": sample_limit, "max_sample_len": 40,
           "data": str(tiny_bin), "candidates_dir": None, "captions": False, "checkpoint": None,
           "source_lang": "src", "target_lang": "tgt", "vocab_size": 0}
    _, built, _, _ = real_setup(dict(cfg), 1)
    assert type(built) is criterion
    record = train_worker(cfg)
    if sample_limit == "flat":
        assert record["sample_len"] == 40 and all(set(lengths) == {40} for _, lengths, _ in drawn)
    else:
        assert record["sample_len"] < 40 and not any(to_limit for to_limit, _, _ in drawn)


@pytest.mark.parametrize("k", [8, 0])
def test_samples_to_the_limit_are_scored_under_the_policy_they_were_drawn_from(k):
    """``SampleRequest.to_limit``: the samples' log-probabilities exclude eos as their draws did, whether the
    loop's kept probabilities give them or the scoring pass makes the logits again (stored_probs_max_elements
    0), and the greedy decode runs to the limit too; without it the same draws end at eos."""
    from smallvocab_tools.bench.workload import build_model, make_batch, synthetic_task

    cfg = {"vocab_size": 12, "src_vocab_size": 12, "threads": torch.get_num_threads(), "d": 8}
    model = build_model(cfg, synthetic_task(cfg))
    sample = make_batch(12, k, 6, 6, "cpu")
    net_input = dict(sample["net_input"])
    limits = torch.full((6,), LIMIT)

    def policy(to_limit, **settings):
        torch.manual_seed(3)
        request = sampling.SampleRequest(limits, greedy_too=True, to_limit=to_limit,
                                         plan=passes.plan(sampling.DEFAULT.changed(**settings), "cpu", model))
        return model(**net_input, sample_request=request)[1]

    kept, again = policy(True), policy(True, stored_probs_max_elements=0)
    assert kept["samples"].probs is not None and again["samples"].probs is None
    for out in (kept, again):
        assert set(out["samples"].lengths.tolist()) == set(out["greedy"].lengths.tolist()) == {LIMIT}
    assert torch.equal(kept["samples"].tokens, again["samples"].tokens)
    assert torch.allclose(kept["samples"].lprobs, again["samples"].lprobs, atol=1e-5)
    assert torch.isfinite(again["samples"].lprobs).all()
    assert min(policy(False)["samples"].lengths.tolist()) < LIMIT  # eos drawn: the training path's samples
