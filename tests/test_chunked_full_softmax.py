"""The chunked full softmax (output/chunked_ce.py, --rl-full-softmax chunked), the honest full-vocabulary
baseline: its CE equals fairseq's (plain and label-smoothed) in value and every gradient; a REINFORCE step
under it equals the plain full softmax's (loss and every parameter's gradient) for every model family, N
samples and each baseline, the CE control too; and no tensor of the step is as large as the gold tokens'
logits (tokens x |V|), which the plain step makes."""

import pytest
import torch
import torch.nn.functional as F
from helpers import _crit, assert_same_step, reinforce_step
from model_families import FAMILIES, family_setup
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_smallvocab.output.chunked_ce import full_cross_entropy
from fairseq_smallvocab.output.restricted import CandidateLogProbs
from fairseq_smallvocab.reinforce.objective import cross_entropy

PAD = 1


@pytest.fixture
def one_example_per_chunk(monkeypatch):
    """Chunks of one example's logits (T x |V|), so that the tiny batches here are made in several chunks."""
    monkeypatch.setattr(CandidateLogProbs, "CHUNK_ELEMENTS", 1)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_chunked_ce_is_fairseqs_ce_in_value_and_gradients(eps, bias, dtype, one_example_per_chunk):
    torch.manual_seed(0)
    bsz, steps, dim, vocab = 4, 5, 8, 60
    features = torch.randn(bsz, steps, dim, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, dim, dtype=dtype, requires_grad=True)
    b = torch.randn(vocab, dtype=dtype, requires_grad=True) if bias else None
    target = torch.randint(4, vocab, (bsz, steps))
    target[1, 3:] = PAD
    inputs = [features, weight] + ([b] if bias else [])
    got = full_cross_entropy(features, weight, b, target, eps, PAD)
    got_grads = torch.autograd.grad(got * 1.7, inputs)
    want = cross_entropy(F.log_softmax(F.linear(features, weight, b).float(), -1), target, eps, PAD)
    want_grads = torch.autograd.grad(want * 1.7, inputs)
    torch.testing.assert_close(got, want.to(got.dtype), atol=1e-5, rtol=1e-5)
    for a, w in zip(got_grads, want_grads):
        torch.testing.assert_close(a, w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("baseline, n", [("learned", 1), ("loo", 3), ("self-critical", 2)])
def test_a_reinforce_step_under_the_chunked_full_softmax_equals_the_plain_one(name, baseline, n,
                                                                             one_example_per_chunk):
    model, task, sample = family_setup(name)
    plain = reinforce_step(model, task, sample, baseline, n, label_smoothing=0.1)
    chunked = reinforce_step(model, task, sample, baseline, n, label_smoothing=0.1, rl_full_softmax="chunked")
    assert_same_step(chunked, plain)
    assert chunked[2]["steps"] == plain[2]["steps"] > 0 and chunked[2]["reward"] == plain[2]["reward"]


@pytest.mark.parametrize("name", ["lstm_smallvocab", "transformer"])
def test_the_ce_control_under_the_chunked_full_softmax_equals_the_plain_one(name, one_example_per_chunk):
    model, task, sample = family_setup(name)
    results = []
    for mode in ("plain", "chunked"):
        model.zero_grad()
        torch.manual_seed(1)  # the same dropout masks (the paper's LSTM keeps its dropout)
        loss, _, log = _crit(task, ce_weight=1.0, rl_baseline="none", label_smoothing=0.1,
                             rl_full_softmax=mode)(model, sample)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None], log))
    assert_same_step(results[1], results[0])
    assert results[1][2]["finite_samples"] == 0


class _Largest(TorchDispatchMode):
    """The most elements of any tensor |V| wide (a dimension of size ``vocab``) an operation makes inside the
    block."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.largest = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(x, torch.Tensor) and self.vocab in x.shape:
                self.largest = max(self.largest, x.numel())
        return out


@pytest.mark.parametrize("name", ["lstm_smallvocab", "transformer"])
def test_the_chunked_step_makes_no_tensor_as_large_as_the_tokens_logits(name, one_example_per_chunk):
    """The plain step makes the gold targets' B x T x |V| logits (and the sampled steps' kept probabilities);
    the chunked one |V|-wide tensors of at most one example's T x |V| at a time, the sampling loop's rows x
    |V| per step and the output layer's |V| x d weights and gradients."""
    model, task, sample = family_setup(name, copies=4)  # B x T above d: the weights smaller than B x T x |V|
    bsz, steps = sample["target"].shape
    vocab = len(task.target_dictionary)
    largest = {}
    for mode in ("plain", "chunked"):
        torch.manual_seed(1)
        with _Largest(vocab) as seen:
            loss, _, _ = _crit(task, ce_weight=0.3, rl_baseline="loo", rl_samples=2, max_sample_len=7,
                               rl_full_softmax=mode)(model, sample)
            loss.backward()
        largest[mode] = seen.largest
    assert largest["plain"] >= bsz * steps * vocab
    assert largest["chunked"] < bsz * steps * vocab
    assert largest["chunked"] <= max(2 * bsz * vocab, steps * vocab, model.output_weights()[0].numel())
