"""lstm_smallvocab, restricted as the tasks restrict it: the small-softmax
output equals the full softmax masked to the same candidates
(log-probabilities, loss, gradient), one code path; the architecture's own
incremental decoding and reordering; the restricted output layer's pieces."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from helpers import make_dictionary, translation_batch

from fairseq_smallvocab.candidates.space import candidate_positions
from fairseq_smallvocab.engine.loop import sample_categorical
from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.output.restricted import CandidateLogits

V_SRC, V_TGT, B, T_SRC, T_TGT, K = 40, 60, 5, 7, 6, 16


@pytest.fixture()
def setup():
    torch.manual_seed(0)
    src_dict, tgt_dict = make_dictionary(V_SRC), make_dictionary(V_TGT)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    model = restrict(LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=12, layers=2, dropout=0.0), task))
    with torch.no_grad():  # far from the small initialization, so that attention is sharp and matters
        for param in model.parameters():
            param.normal_(0, 0.5)
    model.eval()
    lengths = torch.tensor([7, 5, 7, 3, 6])
    src, prev, tgt, cands = translation_batch(lengths, T_SRC, T_TGT, K, V_SRC, tgt_dict)
    return model, src, lengths, prev, tgt, cands, tgt_dict


def _masked_full(model, src, lengths, prev, cands):
    """The oracle: full-vocabulary logits restricted to the candidates."""
    full, _ = model(src, lengths, prev)
    return full.gather(2, cands.unsqueeze(1).expand(-1, full.size(1), -1))


def test_small_logprobs_equal_masked_full_softmax(setup):
    model, src, lengths, prev, _, cands, _ = setup
    small, extra = model(src, lengths, prev, candidates=cands)
    assert small.shape == (B, T_TGT, K)
    oracle = F.log_softmax(_masked_full(model, src, lengths, prev, cands), dim=-1)
    got = model.get_normalized_probs((small, extra), log_probs=True)
    torch.testing.assert_close(got, oracle, atol=1e-5, rtol=0)


def test_full_softmax_is_the_same_code_without_candidates(setup):
    model, src, lengths, prev, _, cands, _ = setup
    full, extra = model(src, lengths, prev)
    assert full.shape == (B, T_TGT, V_TGT) and extra["candidates"] == []
    all_ids = torch.arange(V_TGT).expand(B, -1)
    everything, _ = model(src, lengths, prev, candidates=all_ids)
    torch.testing.assert_close(everything, full, atol=1e-5, rtol=0)


def test_targets_map_to_candidate_positions(setup):
    model, src, lengths, prev, tgt, cands, d = setup
    small = model(src, lengths, prev, candidates=cands)
    mapped = model.get_targets({"target": tgt}, small)
    assert torch.equal(cands.gather(1, mapped), tgt)  # every gold word is a candidate here
    assert torch.equal(mapped.eq(d.pad()), tgt.eq(d.pad()))  # pad keeps its id: ignore_index works
    assert torch.equal(model.get_targets({"target": tgt}, model(src, lengths, prev)), tgt)
    outside = torch.tensor([[V_TGT - 1]])
    row = torch.tensor([[0, 1, 2, 3, 10]])
    assert candidate_positions(row, outside, d.unk()).item() == d.unk()
    rows = torch.tensor([[0, 1, 2, 3, 10, 7], [0, 1, 2, 3, 5, 40]])  # unsorted rows; gaps, both ends
    targets = torch.tensor([[7, 10, 5, 11, 2], [40, 5, 41, 6, 1]])
    assert candidate_positions(rows, targets, d.unk()).tolist() == [[5, 4, 3, 3, 2], [5, 4, 3, 3, 1]]


def test_loss_and_output_gradient_equal_masked_full_softmax(setup):
    model, src, lengths, prev, tgt, cands, d = setup
    pad = d.pad()

    def loss_and_grads(small):
        model.zero_grad()
        if small:
            out = model(src, lengths, prev, candidates=cands)
            lprobs = model.get_normalized_probs(out, log_probs=True)
            target = model.get_targets({"target": tgt}, out)
        else:
            lprobs = F.log_softmax(_masked_full(model, src, lengths, prev, cands), dim=-1)
            target = candidate_positions(cands, tgt, d.unk())
        loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=pad, reduction="sum")
        loss.backward()
        return (loss.detach(), model.decoder.embed_tokens.weight.grad.clone(),
                model.decoder.output_bias.grad.clone(), model.encoder.lstm.weight_hh_l0.grad.clone())

    small, full = loss_and_grads(True), loss_and_grads(False)
    torch.testing.assert_close(small[0], full[0], atol=1e-5, rtol=1e-6)
    for a, b in zip(small[1:], full[1:]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # the output bias of a word that is nobody's candidate gets no gradient
    never = sorted(set(range(V_TGT)) - set(cands.flatten().tolist()))
    assert never and small[2][never].abs().max() == 0


def test_incremental_decoding_matches_full_forward(setup):
    model, src, lengths, prev, _, cands, _ = setup
    full, _ = model(src, lengths, prev)
    encoder_out = model.encoder(src, lengths)
    state = {}
    steps = [model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)[0] for t in range(T_TGT)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_reordering_for_beam_search_keeps_states_with_their_example(setup):
    model, src, lengths, _, _, cands, _ = setup
    encoder_out = model.encoder(src, lengths)
    order = torch.tensor([4, 4, 0, 2])
    reordered = model.encoder.reorder_encoder_out(encoder_out, order)
    assert torch.equal(reordered["encoder_out"][0], encoder_out["encoder_out"][0][:, order])
    assert torch.equal(reordered["final_hidden"][0], encoder_out["final_hidden"][0][:, order])


def test_padding_does_not_change_the_output(setup):
    model, src, lengths, prev, _, cands, d = setup
    b = 3  # its source has 3 tokens and 4 of left padding
    alone, _ = model(src[b:b + 1, -3:], lengths[b:b + 1], prev[b:b + 1], candidates=cands[b:b + 1])
    batched, _ = model(src, lengths, prev, candidates=cands)
    torch.testing.assert_close(alone[0], batched[b], atol=1e-5, rtol=0)


def test_initialization_as_the_paper():
    task = SimpleNamespace(source_dictionary=make_dictionary(V_SRC), target_dictionary=make_dictionary(V_TGT))
    model = LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=8, layers=1), task)
    lstm = model.encoder.lstm
    assert lstm.weight_ih_l0.abs().max() <= 0.1 and lstm.weight_hh_l0_reverse.abs().max() <= 0.1
    assert torch.equal(lstm.bias_hh_l0[8:16], torch.ones(8)) and lstm.bias_ih_l0.abs().sum() == 0
    assert torch.equal(model.decoder.cells[0].bias_hh[8:16], torch.ones(8))
    assert model.decoder.attention.weight.abs().sum() == 0
    assert model.decoder.output_bias.abs().sum() == 0
    # the output layer is the target embedding (tied)
    s = torch.randn(1, 1, 8)
    torch.testing.assert_close(model.decoder.output_layer(s)[0, 0], model.decoder.embed_tokens.weight @ s[0, 0])


def test_incremental_state_reordered_mid_decoding_matches_full_forward(setup):
    model, src, lengths, prev, _, cands, _ = setup
    order = torch.tensor([4, 4, 0, 2, 1])
    expected, _ = model(src[order], lengths[order], prev[order])
    encoder_out = model.encoder(src, lengths)
    state, steps = {}, []
    for t in range(T_TGT):
        if t == 2:  # as beam search does between steps
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
            model.decoder.reorder_incremental_state(state, order)
            steps = [s[order] for s in steps]
        tokens = prev[order] if t >= 2 else prev
        steps.append(model.decoder(tokens[:, : t + 1], encoder_out, incremental_state=state)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-5, rtol=0)


def test_sample_categorical_draws_from_the_softmax():
    """Inverse transform sampling has the distribution of softmax(logits):
    frequencies of 200,000 draws per row within 5 standard errors, -inf never
    drawn, the first and last words reachable."""
    torch.manual_seed(3)
    rows = torch.tensor([[float("-inf"), 2.0, float("-inf"), 0.5, 1.0, -1.0, 3.0],
                         [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, float("-inf")],
                         [-20.0, float("-inf"), 1.0, 1.0, 1.0, 1.0, 1.0]])
    n = 200_000
    draws = sample_categorical(rows.repeat_interleave(n, 0)).view(len(rows), n)
    assert draws.shape == (len(rows), n) and draws.dtype == torch.long
    probs = F.softmax(rows, -1)
    for row, p in zip(draws, probs):
        freq = torch.bincount(row, minlength=rows.size(1)).double() / n
        assert (freq[p == 0] == 0).all()
        err = (p.double() * (1 - p.double()) / n).sqrt()
        assert ((freq - p.double()).abs() <= 5 * err + 1e-12).all(), (freq, p)
    assert (draws[1] == 0).any() and (draws[1] == 5).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_candidate_logits_take_half_precision_states_as_amp_gives_them(dtype):
    """--amp: the decoder states arrive in half precision, the output weights in float32 (it failed on CUDA
    with 'Input dtypes must be the same'). Values as in float32 from the same states; each gradient in
    its input's dtype."""
    torch.manual_seed(0)
    feats = torch.randn(5, 3, 8).to(dtype).requires_grad_()
    weight = torch.randn(30, 8, requires_grad=True)
    bias = torch.randn(30, requires_grad=True)
    cands = torch.stack([torch.randperm(30)[:7] for _ in range(5)])
    out = CandidateLogits.apply(feats, weight, bias, cands)
    ref_feats = feats.detach().float().requires_grad_()
    ref = torch.baddbmm(bias[cands].unsqueeze(1), ref_feats, weight[cands].transpose(1, 2))
    torch.testing.assert_close(out, ref.detach())
    grad = torch.randn_like(ref)
    out.backward(grad)
    w_grad, b_grad = weight.grad.clone(), bias.grad.clone()
    weight.grad = bias.grad = None
    ref.backward(grad)
    assert feats.grad.dtype == dtype and weight.grad.dtype == bias.grad.dtype == torch.float32
    torch.testing.assert_close(feats.grad.float(), ref_feats.grad.to(dtype).float())
    torch.testing.assert_close(w_grad, weight.grad)
    torch.testing.assert_close(b_grad, bias.grad)
