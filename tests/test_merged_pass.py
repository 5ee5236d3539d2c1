"""One teacher-forced pass for the CE term and the samples' scores (engine/device_modes/merged_pass.py,
--rl-engine merged_pass=on), against today's two passes: without dropout, the same loss and every parameter's
gradient from the same seed, for every model family, both softmaxes, N samples and each baseline; with
dropout, the same loss and gradients when the two passes are given the masks the merged pass drew for its
gold rows (and the sample rows are left alone); where it cannot apply, the two passes run and the log
says why."""

import logging

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same_step, reinforce_step
from model_families import FAMILIES, family_setup
from torch.overrides import TorchFunctionMode

from fairseq_smallvocab.engine.device_modes import merged_pass

RECURRENT = [name for name in FAMILIES if name.startswith("lstm")]
STEPS = [("learned", 1), ("loo", 3), ("self-critical", 2)]


def _no_dropout(model):
    for module in model.modules():
        if hasattr(module, "p") and isinstance(module.p, float):
            module.p = 0.0
        if isinstance(module, torch.nn.RNNBase):
            module.dropout = 0.0
    return model


def _both(model, task, sample, baseline, n, **flags):
    """(two passes, merged) REINFORCE steps from the same seed."""
    more = "".join(f",{key}={value}" for key, value in flags.items())
    return [reinforce_step(model, task, sample, baseline, n, rl_engine=f"merged_pass={mode}{more}")
            for mode in ("off", "on")]


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("baseline, n", STEPS)
@pytest.mark.parametrize("small", [True, False])
def test_without_dropout_the_merged_pass_gives_the_two_passes_step(name, baseline, n, small, monkeypatch):
    model, task, sample = family_setup(name, small=small)
    _no_dropout(model)
    runs = []
    monkeypatch.setattr(merged_pass, "run", _counted(merged_pass.run, runs))
    # a recurrent decoder's samples are scored by a pass where its sampling step is bucketed (as captured on
    # a GPU); without, its steps keep their graph and only the encoder's and the CE pass merge
    for capture in (["buckets", "off"] if name in RECURRENT else ["off"]):
        two, merged = _both(model, task, sample, baseline, n, capture=capture)
        assert_same_step(merged, two)
        assert merged[2]["reward"] == two[2]["reward"] and merged[2]["steps"] == two[2]["steps"] > 0
    assert len(runs) == (2 if name in RECURRENT else 1)


@pytest.mark.parametrize("name", ["transformer", "lstm"])
def test_the_merged_pass_serves_the_chunked_full_softmax_too(name, monkeypatch):
    """--rl-full-softmax chunked asks the forward for the decoder's states (features_only): the merged pass
    gives them, the same step as the two plain passes."""
    model, task, sample = family_setup(name)
    _no_dropout(model)
    runs = []
    monkeypatch.setattr(merged_pass, "run", _counted(merged_pass.run, runs))
    capture = ",capture=buckets" if name in RECURRENT else ""
    two = reinforce_step(model, task, sample, "loo", 2, rl_engine="merged_pass=off" + capture)
    merged = reinforce_step(model, task, sample, "loo", 2, rl_engine="merged_pass=on" + capture,
                            rl_full_softmax="chunked")
    assert_same_step(merged, two)
    assert len(runs) == 1


def _counted(function, calls):
    def counted(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)
    return counted


class _Recording(merged_pass.RowDropout):
    """The merged pass's masks drawn from a generator of their own (so that the global one feeds the
    sampling alike in both runs), each kept with the rows it applied to and its row dimension."""

    log = []
    generator = None

    def mask(self, x, p):
        mask = torch.empty(x.shape).bernoulli_(1.0 - p, generator=self.generator).to(x)
        _Recording.log.append((self.rows.clone(), self.row_dim(x), mask))
        return mask


class _Replay(TorchFunctionMode):
    """The two passes' dropout calls given, in order, the merged pass's masks of their rows (its gold rows,
    the leading positions of its padded lengths)."""

    def __init__(self, log):
        super().__init__()
        self.log = list(log)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            x, p, training, _ = merged_pass._dropout_args(*args, **kwargs)
            if training and p > 0:
                rows, (dim, per_row), mask = self.log.pop(0)
                index = (rows.nonzero().squeeze(1)[:, None] * per_row + torch.arange(per_row)).reshape(-1)
                mask = mask.index_select(dim, index.to(mask.device))[tuple(slice(0, size) for size in x.shape)]
                return x * mask * (1.0 / (1.0 - p))
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", ["transformer", "transformer_prenorm", "transformer_shared_all", "lstm",
                                  "lstm_tied"])
@pytest.mark.parametrize("baseline, n", STEPS)
def test_with_dropout_the_merged_pass_gives_the_two_passes_step_under_its_masks(name, baseline, n, monkeypatch):
    model, task, sample = family_setup(name, small=True)
    assert any(getattr(m, "p", 0) > 0 for m in model.modules())  # the families' dropout 0.1
    capture = ",capture=buckets" if name in RECURRENT else ""
    _Recording.log, _Recording.generator = [], torch.Generator().manual_seed(5)
    monkeypatch.setattr(merged_pass, "RowDropout", _Recording)
    merged = reinforce_step(model, task, sample, baseline, n, rl_engine="merged_pass=on" + capture)
    log = list(_Recording.log)
    assert log and all(rows.sum() < rows.numel() for rows, _, _ in log)  # some rows without dropout every time
    replay = _Replay(log)
    with replay:
        two = reinforce_step(model, task, sample, baseline, n, rl_engine="merged_pass=off" + capture)
    # as many dropout calls, in the same order (a recurrent decoder's merged pass also steps over the gold rows'
    # padding, at the end: calls the two passes do not make)
    assert replay.log == [] or name in RECURRENT
    assert_same_step(merged, two)


def test_sample_rows_are_left_alone_and_a_doubtful_row_dimension_is_refused():
    rows = torch.tensor([True, False, False] + [False] * 8)  # 11 rows, the first with dropout
    x = torch.ones(4, 11, 6)
    with merged_pass.RowDropout(rows):
        out = F.dropout(x, p=0.5, training=True)
        heads = F.dropout(torch.ones(22, 3, 5), p=0.5, training=True)  # 2 heads per row, rows first
        assert torch.equal(F.dropout(x, p=0.5, training=False), x)
    assert torch.equal(out[:, 1:], x[:, 1:]) and set(out[:, 0].unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(heads[2:], torch.ones(20, 3, 5))
    with pytest.raises(RuntimeError, match=r"a dropout input of shape \(11, 11, 6\) has no single dimension"):
        with merged_pass.RowDropout(rows):
            F.dropout(torch.ones(11, 11, 6), p=0.5, training=True)
    assert merged_pass._rows(6, [7]) == 11 and merged_pass._rows(30, [31, 5]) == 37
    assert merged_pass._rows(12, [22]) == 13


@pytest.mark.parametrize("name, options, reason", [
    ("lstm_smallvocab", {}, "LSTM's dropout between its layers is drawn inside it"),
    ("transformer", {"attention": 0.1}, "attention dropout is drawn inside torch's fused attention"),
    ("lstm", {"graphed_pass": "buckets"}, "the graphed pass replays its own program"),
])
def test_where_it_cannot_apply_the_two_passes_run_and_the_log_says_why(name, options, reason, caplog, monkeypatch):
    model, task, sample = family_setup(name, small=True)
    if options.pop("attention", None):
        for module in model.modules():
            if type(module).__name__ == "MultiheadAttention":
                module.dropout_module.p = 0.1
    runs = []
    monkeypatch.setattr(merged_pass, "run", _counted(merged_pass.run, runs))
    with caplog.at_level(logging.INFO):
        two, merged = _both(model, task, sample, "loo", 2, **options)
    assert runs == [] and any(reason in r.getMessage() for r in caplog.records)
    assert_same_step(merged, two)
