"""smallvocab_tools/bench/floor.py: the products a step makes, recorded with
their operands' layouts and counted in FLOPs, and replayed alone."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from smallvocab_tools.bench.floor import ProductRecorder, product_flops

aten = torch.ops.aten


def _layer_step(x, w, b, keys, values):
    """A linear layer, an attention-like pair of bmm / baddbmm, elementwise
    ops between them, forward and backward."""
    h = torch.nn.functional.linear(x, w, b).tanh()  # addmm
    scores = torch.baddbmm(torch.zeros(4, 3, 7), h.view(4, 3, 5), keys)  # (4, 3, 5) x (4, 5, 7)
    out = torch.bmm(scores.softmax(-1), values)  # (4, 3, 7) x (4, 7, 2)
    out.square().sum().backward()


def encoder_inputs():
    torch.manual_seed(0)
    return (torch.randn(12, 6, requires_grad=True), torch.randn(5, 6, requires_grad=True),
            torch.randn(5, requires_grad=True), torch.randn(4, 5, 7, requires_grad=True),
            torch.randn(4, 7, 2, requires_grad=True))


def test_flops_agree_with_torchs_counter_forward_and_backward():
    """The recorded FLOPs of a forward and backward equal torch's own
    FlopCounterMode's for the products both know (mm, addmm, bmm, baddbmm)."""
    recorder = ProductRecorder()
    with recorder:
        _layer_step(*encoder_inputs())
    counter = FlopCounterMode(display=False)
    with counter:
        _layer_step(*encoder_inputs())
    assert recorder.flops == counter.get_total_flops() > 0
    # by hand: the layer's product 2 x 12 x 6 x 5, its backward's two (input and weight gradients) as many
    assert product_flops(aten.addmm, (torch.empty(5), torch.empty(12, 6), torch.empty(6, 5))) == 720
    assert product_flops(aten.bmm, (torch.empty(4, 3, 7), torch.empty(4, 7, 2))) == 2 * 4 * 3 * 7 * 2
    assert product_flops(aten.addmm_, (torch.empty(12, 5), torch.empty(12, 6), torch.empty(6, 5))) == 720
    assert product_flops(aten.tanh, (torch.empty(3),)) is None


def test_flops_of_the_products_torchs_counter_does_not_know():
    """mv, addmv, addbmm, dot and the out= / in-place forms, by hand."""
    m, v = torch.randn(6, 4), torch.randn(4)
    batch1, batch2 = torch.randn(3, 6, 4), torch.randn(3, 4, 5)
    recorder = ProductRecorder()
    with recorder:
        torch.mv(m, v)
        torch.addmv(torch.zeros(6), m, v)
        torch.addbmm(torch.zeros(6, 5), batch1, batch2)
        torch.zeros(6, 5).addbmm_(batch1, batch2)
        torch.dot(v, v)
        torch.mm(m, torch.randn(4, 5), out=torch.empty(6, 5))
        torch.bmm(batch1, batch2, out=torch.empty(3, 6, 5))
        torch.zeros(6, 5).addmm_(m, torch.randn(4, 5))
    by_op = {str(entry[0]): entry[4] for entry in recorder.calls.values()}
    assert by_op == {"aten.mv.default": 2 * 6 * 4, "aten.addmv.default": 2 * 6 * 4,
                     "aten.addbmm.default": 2 * 3 * 6 * 4 * 5, "aten.addbmm_.default": 2 * 3 * 6 * 4 * 5,
                     "aten.dot.default": 2 * 4, "aten.mm.out": 2 * 6 * 4 * 5, "aten.bmm.out": 2 * 3 * 6 * 4 * 5,
                     "aten.addmm_.default": 2 * 6 * 4 * 5}


def test_each_distinct_call_is_kept_once_with_its_count_and_its_operands_layout():
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    recorder = ProductRecorder()
    with recorder:
        for _ in range(5):
            torch.mm(x, w).relu()
        torch.mm(w.t(), x.t())  # another layout: another entry
        torch.mm(x, w[:, :1].expand(16, 3))  # an expanded operand (stride 0) stays expanded
    assert recorder.product_calls == 7 and len(recorder.calls) == 3
    counts = sorted(entry[3] for entry in recorder.calls.values())
    assert counts == [1, 1, 5]
    assert recorder.flops == 5 * 2 * 8 * 16 * 32 + 2 * 32 * 16 * 8 + 2 * 8 * 16 * 3
    assert recorder.other["aten.relu"] == 5
    for func, _, _, _, _ in recorder.calls.values():
        assert func.overloadpacket is aten.mm
    (_, (a, b), _, _, _), (_, (at, bt), _, _, _), (_, (_, be), _, _, _) = recorder.calls.values()
    assert torch.equal(a, x) and torch.equal(b, w) and a.data_ptr() != x.data_ptr()  # a copy, not the tensor
    assert at.stride() == w.t().stride() and bt.stride() == x.t().stride() and torch.equal(at, w.t())
    assert be.stride() == (32, 0) and torch.equal(be, w[:, :1].expand(16, 3))
    x.zero_()  # later changes to the step's tensors do not reach the copies
    assert not torch.equal(a, x)
    big = torch.randn(100, 16)
    with recorder:
        torch.mm(big[90:], w)  # a late slice: only the rows it reads are copied
    (_, (tail, _), _, _, _), = [entry for entry in recorder.calls.values() if entry[1][0].shape == (10, 16)]
    assert torch.equal(tail, big[90:]) and tail.untyped_storage().nbytes() == 10 * 16 * 4


def test_replay_runs_every_recorded_call_as_often_as_it_ran():
    recorder = ProductRecorder()
    with recorder:
        _layer_step(*encoder_inputs())
        _layer_step(*encoder_inputs())
    again = ProductRecorder()
    with again:
        recorder.replay()
    assert again.product_calls == recorder.product_calls and again.flops == recorder.flops
    assert sum(again.other.values()) == 0  # nothing but the products
    assert {key: entry[3] for key, entry in again.calls.items()} == {key: entry[3]
                                                                      for key, entry in recorder.calls.items()}
    top = recorder.table(2)
    assert len(top) == 2 and top[0][3] >= top[1][3] and top[0][2] == 2


def test_lstm_layer_and_fused_attention_are_products():
    """oneDNN's LSTM layer (the paper's encoder on the CPU) and the CPU's
    fused attention count, with the formulas of floor.py's header."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 32)
    recorder = ProductRecorder()
    with recorder:
        out, _ = lstm(torch.randn(5, 3, 16))
        out.sum().backward()
        q = torch.randn(2, 4, 10, 8, requires_grad=True)
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
    names = {str(entry[0].overloadpacket): entry[4] for entry in recorder.calls.values()}
    if "aten.mkldnn_rnn_layer" not in names:
        pytest.skip("this torch runs the LSTM without oneDNN")
    lstm_forward = 2 * 5 * 3 * (4 * 32) * (16 + 32)
    assert names["aten.mkldnn_rnn_layer"] == lstm_forward
    assert names["aten.mkldnn_rnn_layer_backward"] == 2 * lstm_forward
    attention = 2 * 2 * (2 * 4) * 10 * 10 * 8  # scores and weighted sum
    assert names["aten._scaled_dot_product_flash_attention_for_cpu"] == attention
    # backward: the scores again, then the gradients of scores, values, queries and keys (torch's count)
    assert names["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == 5 * attention // 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the products replayed as a CUDA graph)")
def test_products_replay_as_one_cuda_graph(monkeypatch):
    """On CUDA the products replay as one captured graph (their GPU time, not a Python loop's launches): the
    calls, attention's CUDA kernels and their backward included, capture, and the timed replay is the graph's: an
    ``out=`` product's tensor, zeroed after every eager run of the calls, holds the product after it."""
    torch.manual_seed(0)
    x, w = torch.randn(12, 6, device="cuda", requires_grad=True), torch.randn(5, 6, device="cuda", requires_grad=True)
    q = torch.randn(2, 4, 10, 8, device="cuda", requires_grad=True)
    out = torch.empty(12, 5, device="cuda")
    recorder = ProductRecorder()
    with recorder:
        h = torch.nn.functional.linear(x, w).tanh()
        torch.bmm(h.view(4, 3, 5), h.view(4, 3, 5).transpose(1, 2)).sum().backward()
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
        torch.mm(x.detach(), w.detach().t(), out=out)
    names = {str(entry[0].overloadpacket) for entry in recorder.calls.values()}
    assert any("attention" in name and "backward" in name for name in names), names
    stored = next(entry[2]["out"] for entry in recorder.calls.values() if "out" in entry[2])
    eager = ProductRecorder._run

    def eager_then_zeroed(self):
        eager(self)
        if not torch.cuda.is_current_stream_capturing():
            stored.zero_()

    monkeypatch.setattr(ProductRecorder, "_run", eager_then_zeroed)
    assert recorder.replay(torch.cuda.synchronize, graph=True) > 0
    torch.testing.assert_close(stored, x.detach() @ w.detach().t())
