"""The REINFORCE scoring path's two gradient helpers against their plain
compositions: ``CandidateLogProbs`` (chosen log-probabilities under the
restricted softmax, chunked) and ``gathered_embedding_grads`` (step-by-step
lookups whose weight gradient is gathered into one tensor)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import candidate_batch
from torch import nn

from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads
from fairseq_smallvocab.output.restricted import (
    CandidateLogits,
    CandidateLogProbs,
    _routed,
    candidate_log_probs,
    restricted_logits,
)

EXCLUDED = [1, 0]  # pad and bos: positions equal ids for the specials
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"))]


def _composed(features, weight, bias, candidates, positions):
    """restricted logits -> -inf at the excluded -> log_softmax -> the chosen entries."""
    if candidates is None:
        logits = F.linear(features, weight, bias)
    else:
        logits = torch.einsum("btd,bkd->btk", features, weight[candidates])
        if bias is not None:
            logits = logits + bias[candidates].unsqueeze(1)
    excluded = torch.isin(torch.arange(logits.size(-1), device=logits.device),
                          torch.tensor(EXCLUDED, device=logits.device))
    logits = logits.float().masked_fill(excluded, float("-inf"))
    return F.log_softmax(logits, -1).gather(-1, positions.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_candidate_log_probs_equal_the_composition_values_and_gradients(small, with_bias, device, monkeypatch):
    monkeypatch.setattr(CandidateLogProbs, "CHUNK_ELEMENTS", 7 * 40)  # several chunks, the last one short
    monkeypatch.setattr(CandidateLogProbs, "MAX_EXAMPLES", 2)
    gen = torch.Generator().manual_seed(0)
    bsz, steps, dim, vocab, k = 5, 7, 6, 60, 20
    features = torch.randn(bsz, steps, dim, generator=gen, dtype=torch.double, requires_grad=True)
    weight = torch.randn(vocab, dim, generator=gen, dtype=torch.double, requires_grad=True)
    bias = torch.randn(vocab, generator=gen, dtype=torch.double, requires_grad=True) if with_bias else None
    candidates = candidate_batch(k, vocab, bsz=bsz) if small else None
    width = k if small else vocab
    positions = torch.randint(2, width, (bsz, steps), generator=gen)
    grad = torch.randn(bsz, steps, generator=gen, dtype=torch.double)
    if device != "cpu":
        features, weight, bias, candidates, positions, grad = (
            x if x is None else x.detach().to(device).requires_grad_(x.requires_grad)
            for x in (features, weight, bias, candidates, positions, grad))
    inputs = [x for x in (features, weight, bias) if x is not None]

    got = candidate_log_probs(features, weight, bias, candidates, positions, EXCLUDED)
    want = _composed(features, weight, bias, candidates, positions)
    assert got.dtype == torch.float and torch.allclose(got.double(), want.double(), atol=1e-5)
    got_grads = torch.autograd.grad(got, inputs, grad.float())
    want_grads = torch.autograd.grad(want, inputs, grad.to(want.dtype))
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == torch.double and torch.allclose(g, w.double(), atol=1e-5)
    # the excluded words get no probability: their output rows get no gradient from the softmax
    rows = EXCLUDED if not small else candidates[:, EXCLUDED].unique()
    assert got_grads[1][rows].abs().max() == 0 and (not with_bias or got_grads[2][rows].abs().max() == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("small", [True, False])
def test_candidate_log_probs_from_kept_probabilities_equal_the_composition(small, device):
    """The sampler's kept softmax and chosen log-probabilities give the composition's values and gradients."""
    gen = torch.Generator().manual_seed(2)
    bsz, steps, dim, vocab, k = 9, 6, 5, 50, 16
    # a transposed view, as a Transformer's decoder states are
    features = torch.randn(steps, bsz, dim, generator=gen).to(device).transpose(0, 1).requires_grad_()
    weight = torch.randn(vocab, dim, generator=gen).to(device).requires_grad_()
    bias = torch.randn(vocab, generator=gen).to(device).requires_grad_()
    candidates = candidate_batch(k, vocab, bsz=bsz).to(device) if small else None
    positions = torch.randint(2, k if small else vocab, (bsz, steps), generator=gen).to(device)
    with torch.no_grad():  # what the sampler keeps: each step's softmax, the drawn words' log p
        if small:
            logits = torch.einsum("btd,bkd->btk", features, weight[candidates]) + bias[candidates].unsqueeze(1)
        else:
            logits = F.linear(features, weight, bias)
        logits[:, :, EXCLUDED] = float("-inf")
        probs = logits.softmax(-1)
        chosen = logits.log_softmax(-1).gather(-1, positions.unsqueeze(-1)).squeeze(-1)
    grad = torch.randn(bsz, steps, generator=gen).to(device)
    got = candidate_log_probs(features, weight, bias, candidates, positions, EXCLUDED, probs=probs, chosen=chosen)
    want = _composed(features, weight, bias, candidates, positions)
    assert torch.allclose(got, want, atol=1e-5)
    for g, w in zip(torch.autograd.grad(got, (features, weight, bias), grad),
                    torch.autograd.grad(want, (features, weight, bias), grad)):
        assert torch.allclose(g, w, atol=1e-5)
    with pytest.raises(ValueError, match="probs and chosen go together"):
        candidate_log_probs(features, weight, bias, candidates, positions, EXCLUDED, probs=probs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_candidate_logits_in_several_chunks_equal_the_composition(with_bias, device, monkeypatch):
    """The teacher-forced restricted layer, chunk by chunk (its buffers reused by every chunk, the last one
    short): the values and gradients of baddbmm(b[c], s, W[c]^T)."""
    monkeypatch.setattr(CandidateLogits, "CHUNK", 2)
    gen = torch.Generator().manual_seed(3)
    bsz, steps, dim, vocab, k = 5, 4, 6, 40, 9
    features = torch.randn(bsz, steps, dim, generator=gen, dtype=torch.double).to(device).requires_grad_()
    weight = torch.randn(vocab, dim, generator=gen, dtype=torch.double).to(device).requires_grad_()
    bias = torch.randn(vocab, generator=gen, dtype=torch.double).to(device).requires_grad_() if with_bias else None
    candidates = candidate_batch(k, vocab, bsz=bsz).to(device)
    inputs = [x for x in (features, weight, bias) if x is not None]
    got = CandidateLogits.apply(features, weight, bias, candidates)
    want = torch.einsum("btd,bkd->btk", features, weight[candidates])
    if with_bias:
        want = want + bias[candidates].unsqueeze(1)
    assert torch.allclose(got, want)
    grad = torch.randn(bsz, steps, k, generator=gen, dtype=torch.double).to(device)
    for g, w in zip(torch.autograd.grad(got, inputs, grad), torch.autograd.grad(want, inputs, grad)):
        assert torch.allclose(g, w)


def test_candidate_log_probs_gradcheck():
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(3, 4, 5, generator=gen, dtype=torch.double, requires_grad=True)
    weight = torch.randn(30, 5, generator=gen, dtype=torch.double, requires_grad=True)
    bias = torch.randn(30, generator=gen, dtype=torch.double, requires_grad=True)
    candidates = candidate_batch(12, 30, bsz=3)
    positions = torch.randint(2, 12, (3, 4), generator=gen)

    def f(features, weight, bias):  # float32 softmax inside: compare in double through a float64 copy of it
        return CandidateLogProbs.apply(features, weight, bias, candidates, positions, EXCLUDED).double()

    assert torch.autograd.gradcheck(f, (features, weight, bias), eps=1e-3, atol=1e-3, rtol=1e-3)


class _Steps(nn.Module):
    """A toy recurrent use: one lookup per step (pad included), the weight also used as an output layer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(40, 8, padding_idx=1)
        self.other = nn.Embedding(40, 8, max_norm=1.0)  # not plain: keeps nn.Embedding's own forward

    def forward(self, ids):
        h = torch.zeros(ids.size(0), 8, dtype=torch.double, device=ids.device)
        for t in range(ids.size(1)):
            h = torch.tanh(h + self.embed(ids[:, t]).double() + self.other(ids[:, t]).double())
        return (F.linear(h.float(), self.embed.weight) ** 2).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_gathered_embedding_grads_equal_the_plain_gradient(device):
    torch.manual_seed(0)
    model = _Steps()
    ids = torch.randint(0, 40, (6, 9))
    ids[0, 3] = ids[2, 5] = 1  # padding: no gradient to its row, as F.embedding
    ids[:, 4] = 7  # one word at every row of a step
    model, ids = model.to(device), ids.to(device)
    model(ids).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with gathered_embedding_grads(model):
        assert "forward" in model.embed.__dict__ and "forward" not in model.other.__dict__
        loss = model(ids)
    assert "forward" not in model.embed.__dict__  # restored
    loss.backward(retain_graph=True)
    got = [p.grad.clone() for p in model.parameters()]
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-6)
    assert got[0].abs().sum() > 0 and got[1].abs().sum() > 0
    loss.backward()  # a second backward through the retained graph adds the same again
    assert torch.allclose(model.embed.weight.grad, 2 * want[0], atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gathered_gradient_of_a_low_precision_weight_accumulates_in_float32(dtype):
    """A half or bfloat16 weight (fairseq's --fp16 / --bf16) whose gradient is
    gathered: the uses of one frequent word add up in float32 and the weight
    gets the sum in its own dtype, through the embedding lookups and the
    restricted output layer's routed backward alike.  Added in the weight's
    dtype, a sum of ones stops growing at 256 (bfloat16) or 2048 (half)."""
    embed = nn.Embedding(50, 4).to(dtype)
    steps, rows = 3000, 3000
    with gathered_embedding_grads(embed):
        outs = [embed(torch.tensor([5])) for _ in range(steps)]  # one use per step, as a kept sampling graph's
        assert _routed(torch.zeros(1, dtype=dtype), embed.weight)[2] is not None  # the output layer's too
        cands = torch.tensor([[7, 8, 9]]).expand(rows, 3)
        logits = restricted_logits(torch.ones(rows, 1, 4, dtype=dtype), embed.weight, None, cands)
    loss = sum(o.float().sum() for o in outs) + 0.1 * logits.float()[:, :, 0].sum()
    loss.backward()
    grad = embed.weight.grad
    assert grad.dtype == dtype
    assert torch.equal(grad[5], torch.full((4,), float(steps)).to(dtype))
    assert ((grad[7].double() - 0.1 * rows).abs() < 0.01 * 0.1 * rows).all()  # dz = 0.1 in each of 3,000 rows
    assert grad[8].abs().sum() == 0 and grad[[0, 6, 9]].abs().sum() == 0


def test_gathered_embedding_grads_leave_lookups_without_gradient_plain():
    model = _Steps()
    with gathered_embedding_grads(model), torch.no_grad():
        out = model.embed(torch.tensor([[2, 3]]))
    assert out.grad_fn is None and torch.equal(out, model.embed.weight[[2, 3]].unsqueeze(0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_output_layer_gradients_of_low_precision_weights_add_up_in_float32_outside_a_block(dtype, monkeypatch):
    """CE training (``CandidateLogits``) and a chosen words' backward outside a
    gathering block (``CandidateLogProbs``, small and full) with a half or
    bfloat16 weight and bias: one frequent word's row and bias gradients,
    3,000 examples of dz = 0.1 in chunks of 16, add up in float32 within the
    call and reach the parameters in their dtype (within 0.5%: the final
    rounding).  Summed in the weight's dtype they drifted: 334 for 300
    (bfloat16 weight), 32 (bfloat16 bias), 256 (half bias); the full softmax's
    2,976 for 2,940.  (Gradients of several separate uses outside a
    block are still summed by autograd in the weight's dtype.)"""
    rows = 3000
    weight = torch.zeros(50, 4, dtype=dtype, requires_grad=True)
    bias = torch.zeros(50, dtype=dtype, requires_grad=True)
    cands = torch.stack([torch.tensor([7, 10 + i % 30, 45]) for i in range(rows)])  # word 7 in every list
    logits = CandidateLogits.apply(torch.ones(rows, 1, 4, dtype=dtype), weight, bias, cands, None, None)
    (0.1 * logits.float()[:, :, 0]).sum().backward()
    assert weight.grad.dtype == bias.grad.dtype == dtype
    assert ((weight.grad[7].double() - 0.1 * rows).abs() < 0.005 * 0.1 * rows).all()
    assert abs(bias.grad[7].double() - 0.1 * rows) < 0.005 * 0.1 * rows
    # the chosen words' log-probabilities: a zero weight gives p = 1/K, dz = g (onehot - p); the full
    # softmax in chunks of 16 examples too
    monkeypatch.setattr(CandidateLogProbs, "CHUNK_ELEMENTS", 16 * 50)
    for candidates, width in ((cands, 3), (None, 50)):
        weight.grad = bias.grad = None
        features = torch.ones(rows, 1, 4, dtype=dtype)
        positions = torch.zeros(rows, 1, dtype=torch.long) if candidates is not None else torch.full((rows, 1), 7)
        lp = CandidateLogProbs.apply(features, weight, bias, candidates, positions, [], None, None, None, None)
        lp.sum().backward()
        want = rows * (1 - 1 / width)  # word 7 is chosen everywhere
        assert weight.grad.dtype == dtype
        assert ((weight.grad[7].double() - want).abs() < 0.005 * want).all(), (candidates is None, weight.grad[7])
        assert abs(bias.grad[7].double() - want) < 0.005 * want
