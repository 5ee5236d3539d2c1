"""A recurrent decoder's teacher-forced pass on its shape bucket
(engine/device_modes/graphed_pass.py).  On the CPU, the padded pass run eagerly
(graphed_pass="buckets", the program the CUDA graphs record): a bucket's
padding (rows, steps, source length) changes no example's features and no
gradient, for the plugin's LSTM and fairseq's (one and two layers, bidirectional encoder),
in eval and training mode, inside an open REINFORCE block of gathered
embedding gradients; REINFORCE's loss and gradients are those of the
decoder's own passes.  On CUDA (skipped without one): replayed graphs equal
the eager pass over several buckets, read updated parameters, are captured
again when a parameter is replaced, accumulate gradients over batches
correctly, and run eagerly when a bucket's backward is still pending."""

import pytest
import torch
from helpers import _setup, assert_same_step, reinforce_step
from model_families import STATIC, encoder_inputs

from fairseq_smallvocab.engine import passes
from fairseq_smallvocab.engine.device_modes import DevicePlan, capture, graphed_pass
from fairseq_smallvocab.engine.settings import EngineSettings
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.output.gathered_grad import gathered_embedding_grads, suspended

RECURRENT = ["lstm_smallvocab", "lstm", "lstm_bidirectional"]


def _model(name, device="cpu", train=False):
    torch.manual_seed(0)
    model = restrict(STATIC[name]()).to(device)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.5)
    for module in model.modules():  # training mode without dropout's draws: the same numbers padded or not
        if hasattr(module, "p") and isinstance(module.p, float):
            module.p = 0.0
        if isinstance(module, torch.nn.RNNBase):
            module.dropout = 0.0
    model.train(train)
    for module in model.modules():  # as the step's eval_mode keeps them: cuDNN has no eval-mode RNN backward
        if isinstance(module, torch.nn.RNNBase):
            module.train()
    return model


def _settings(mode, **values) -> EngineSettings:
    """The engine's settings with the teacher-forced passes run as ``mode`` says."""
    return EngineSettings(graphed_pass=mode, **values)


def _features(model, tokens, encoder_out, settings, plan=None):
    """The teacher-forced pass as the plan of ``settings`` for the model on its device runs it (or ``plan``)."""
    plan = plan or passes.plan(settings, tokens.device, model)
    return plan.features(model.decoder, tokens, encoder_out)


def _pass(model, n, steps, mode, seed=0, backward=True, plan=None):
    """(features, gradient of every parameter) of the teacher-forced pass over random prefixes for 5 inputs
    of N rows each, through the encoder (whose outputs take the decoder's gradient back)."""
    model.zero_grad()
    encoder_out, tokens = encoder_inputs(model, n, steps, seed=seed)
    features, extra = _features(model, tokens, encoder_out, _settings(mode), plan)
    weights = torch.randn(features.shape, generator=torch.Generator().manual_seed(seed + 1)).to(features.device)
    if backward:
        (features * weights).sum().backward()
    return features.detach(), [None if p.grad is None else p.grad.clone() for p in model.parameters()], extra


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    for a, b in zip(got[1], want[1]):
        assert (a is None) == (b is None)
        if b is not None:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)  # (sums over padded shapes)


@pytest.mark.parametrize("name", RECURRENT)
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("n,steps", [(1, 5), (2, 9), (3, 1)])
def test_padding_to_a_bucket_changes_no_feature_and_no_gradient(name, train, n, steps):
    """Rows 5, 10, 15 -> 8, 12, 16; steps 5, 9, 1 -> 8, 12, 8; sources 7 -> 8: the padded pass gives every
    example's features and every parameter's gradient (the encoder's through the padded states, which
    tests that padded rows send no NaN back) as the decoder's own pass."""
    model = _model(name, train=train)
    want = _pass(model, n, steps, "off")
    got = _pass(model, n, steps, "buckets")
    assert got[0].shape == want[0].shape == (5 * n, steps, got[0].size(-1))
    _assert_same(got, want)
    assert got[2] is None  # the attention, which REINFORCE does not read, is not kept
    assert all(torch.isfinite(g).all() for g in got[1] if g is not None)


def test_a_padded_row_attending_to_nothing_would_be_nan(monkeypatch):
    """The mutant the padding guards against: padded rows whose every source position is masked give NaN
    features, which the backward spreads into the weights' gradients (so the unmasked position matters)."""
    model = _model("lstm_smallvocab")
    pad_part = graphed_pass._pad_part

    def all_masked(x, part, rows, src_len):
        return graphed_pass.padded(x, {part.rows_dim: rows, part.src_dim: src_len}, True) if part.mask \
            else pad_part(x, part, rows, src_len)

    monkeypatch.setattr(graphed_pass, "_pad_part", all_masked)
    features, grads, _ = _pass(model, 1, 5, "buckets")
    assert torch.isfinite(features).all()  # the real rows are fine ...
    assert any(not torch.isfinite(g).all() for g in grads if g is not None)  # ... the gradients are not


def test_where_it_applies():
    lstm, transformer = _model("lstm_smallvocab"), _model("transformer")
    caption = _model("lstm_caption_smallvocab")
    cpu = torch.device("cpu")

    def mode(settings, model):
        return passes.plan(settings, cpu, model).settings.graphed_pass

    assert mode(EngineSettings(), lstm) == "off"  # "auto" on the CPU: off
    assert mode(_settings("cuda-graphs"), lstm) == "off"  # graphs are CUDA's
    buckets = _settings("buckets")
    assert mode(buckets, lstm) == mode(buckets, _model("lstm")) == "buckets"
    assert mode(buckets, transformer) == "off"  # its pass is not a loop over steps
    assert mode(buckets, caption) == "off"  # one nn.LSTM call over all steps
    assert "has no recurrent pass to graph" in passes.plan(buckets, cpu, caption).notes["graphed_pass"]
    encoder_out, tokens = encoder_inputs(lstm, 2, 6)
    assert _features(lstm, tokens, encoder_out, buckets)[1] is None  # the bucketed pass (no attention)
    with torch.no_grad():  # validation and decoding: the decoder's own
        assert _features(lstm, tokens, encoder_out, buckets)[1] is not None
    with pytest.raises(ValueError, match="--rl-engine graphed_pass must be one of auto, cuda-graphs, buckets, off, got "
                                         "'graphs'"):
        _settings("graphs")


def test_suspended_blocks_are_back_afterwards():
    """Inside ``suspended`` the embeddings look up plainly; afterwards the open block gathers again."""
    model = _model("lstm_smallvocab")
    embed = model.decoder.embed_tokens
    with gathered_embedding_grads(model):
        assert "forward" in embed.__dict__
        with suspended():
            assert "forward" not in embed.__dict__
            from fairseq_smallvocab.output import gathered_grad
            assert gathered_grad.active_route(embed.weight) is None
        assert "forward" in embed.__dict__
        ids = torch.tensor([[4, 5, 4]])
        embed(ids).sum().backward()
    want = torch.zeros_like(embed.weight)
    want[4], want[5] = 2.0, 1.0
    torch.testing.assert_close(embed.weight.grad, want)


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("baseline,n", [("learned", 1), ("loo", 3)])
def test_reinforce_loss_and_gradients_on_the_bucketed_passes(small, baseline, n, monkeypatch):
    """REINFORCE on the bucketed sampling step, whose samples a teacher-forced pass scores: with that pass
    and the CE pass bucketed too (inside the step's gathered embedding gradients), the same loss and
    gradients as with the decoder's own passes."""
    model, task, sample = _setup(small)
    results, passes = {}, []
    forward = graphed_pass._Pass.forward
    monkeypatch.setattr(graphed_pass._Pass, "forward", lambda self, *args: passes.append(self.decoder.training)
                        or forward(self, *args))
    for mode in ("off", "buckets"):
        results[mode] = reinforce_step(model, task, sample, baseline, n,
                                       rl_engine=f"capture=buckets,graphed_pass={mode}")
    assert_same_step(results["buckets"], results["off"])
    assert results["off"][2]["sample_len"] == results["buckets"][2]["sample_len"]
    assert passes == [True, False]  # bucketed: the CE pass (training mode) and the scoring pass (eval)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA graphs)")


# where the bucketed pass runs: eagerly replayed on the CPU, as CUDA graphs on a GPU
WHERE = [("cpu", "buckets"), pytest.param("cuda", "cuda-graphs", marks=cuda)]


@pytest.mark.parametrize("device,mode", WHERE)
@pytest.mark.parametrize("name", RECURRENT)
@pytest.mark.parametrize("train", [False, True])
def test_replays_equal_the_eager_pass_over_buckets_and_updates(device, mode, name, train):
    """Replays give the decoder's own features and gradients for batches of three buckets, for another batch
    of a bucket already made, after an in-place update of every parameter (read where they are), and after
    a parameter is replaced (a new address: the bucket is made, on CUDA captured, again)."""
    model = _model(name, device, train=train)
    graphed_pass.forget(model.decoder)

    def check(n, steps, seed=0):
        _assert_same(_pass(model, n, steps, mode, seed=seed),
                     _pass(model, n, steps, "off", seed=seed))

    for n, steps in ((1, 4), (3, 9), (5, 30)):
        check(n, steps)
    entries = dict(graphed_pass._BUCKETS.of(model.decoder))
    assert len(entries) == 3 and all(entry.captured == (mode == "cuda-graphs") for entry in entries.values())
    check(3, 9, seed=1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    check(3, 9)
    assert dict(graphed_pass._BUCKETS.of(model.decoder)) == entries  # the same buckets
    first = next(model.decoder.parameters())
    first.data = first.data.clone()  # a new address
    check(3, 9)
    assert any(graphed_pass._BUCKETS.of(model.decoder)[key] is not entries[key] for key in entries
               if key in graphed_pass._BUCKETS.of(model.decoder))


def _replayed(features) -> bool:
    """Whether ``features`` come from a bucket's replay (under the slices back to the batch's shape)."""
    node = features.grad_fn
    while node.name() == "SliceBackward0":
        node = node.next_functions[0][0]
    return node.name() == "_ReplayBackward"


def _two_batches(model, mode, backward_each: bool):
    """(features of two batches of one bucket, whether each was replayed, every parameter's gradient summed
    over both): a backward after each batch (``backward_each``: fairseq's --update-freq accumulates so), or
    both forwards before one backward."""
    model.zero_grad(set_to_none=True)
    outs = []
    for seed in (0, 1):
        encoder_out, tokens = encoder_inputs(model, 2, 6, seed=seed)
        outs.append(_features(model, tokens, encoder_out, _settings(mode))[0])
        if backward_each:
            outs[-1].square().sum().backward()
    replayed = [_replayed(out) for out in outs]
    if not backward_each:
        (outs[0].square().sum() + outs[1].sum()).backward()
    return outs, replayed, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("device,mode", WHERE)
def test_gradients_accumulate_over_replays_of_one_bucket(device, mode):
    """Two batches of one bucket, backward after each, no zeroing in between (fairseq's --update-freq): the
    sum of both batches' gradients, not the second's twice (the bucket's gradients are copied out); and the
    first batch's features are still its own after the second replay (so is the output)."""
    model = _model("lstm_smallvocab", device)
    graphed_pass.forget(model.decoder)
    got, replayed, got_grads = _two_batches(model, mode, backward_each=True)
    want, _, want_grads = _two_batches(model, "off", backward_each=True)
    assert replayed == [True, True] and len(graphed_pass._BUCKETS.of(model.decoder)) == 1
    assert len(got_grads) == len(want_grads)
    for a, b in zip(got + got_grads, want + want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("device,mode", WHERE)
def test_a_bucket_waiting_for_its_backward_runs_eagerly(device, mode):
    """Two forwards of one bucket before either backward: the second must not overwrite the first's saved
    activations, so it runs eagerly; both gradients are right, and the bucket is free again after."""
    model = _model("lstm_smallvocab", device)
    graphed_pass.forget(model.decoder)
    _, replayed, got = _two_batches(model, mode, backward_each=False)
    _, _, want = _two_batches(model, "off", backward_each=False)
    assert replayed == [True, False]
    (entry,) = graphed_pass._BUCKETS.of(model.decoder).values()
    assert not entry.busy()  # its backward ran
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("device,mode", WHERE)
def test_a_bucket_dropped_before_its_backward_still_gives_its_gradients(device, mode):
    """One bucket kept at most: the second batch's bucket drops the first's while the first's backward is
    still to come; that backward still reads the first bucket's own activations (the replay keeps it)."""
    model = _model("lstm_smallvocab", device)
    graphed_pass.forget(model.decoder)

    def two(mode):
        settings = _settings(mode, graphed_pass_max_buckets=1)
        model.zero_grad(set_to_none=True)
        outs = [_features(model, tokens, encoder_out, settings)[0]
                for encoder_out, tokens in (encoder_inputs(model, 2, 6, seed=0), encoder_inputs(model, 3, 20, seed=1))]
        (outs[0].square().sum() + outs[1].sum()).backward()
        return outs, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    got, got_grads = two(mode)
    assert [_replayed(out) for out in got] == [True, True] and len(graphed_pass._BUCKETS.of(model.decoder)) == 1
    want, want_grads = two("off")
    assert len(got_grads) == len(want_grads)
    for a, b in zip(got + got_grads, want + want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@cuda
def test_half_precision_replays_equal_the_eager_pass():
    """fairseq's --fp16 casts the model (no autocast): the bucket is captured in half precision (its key
    says so) and replays the eager half-precision pass."""
    model = _model("lstm_smallvocab", "cuda").half()
    graphed_pass.forget(model.decoder)

    def check(seed):
        got = _pass(model, 3, 9, "cuda-graphs", seed=seed)
        want = _pass(model, 3, 9, "off", seed=seed)
        torch.testing.assert_close(got[0], want[0], atol=2e-2, rtol=2e-2)
        for a, b in zip(got[1], want[1]):
            assert (a is None) == (b is None)
            if b is not None:
                assert a.dtype == torch.half
                torch.testing.assert_close(a.float(), b.float(), atol=5e-2, rtol=5e-2)

    check(0)
    check(1)  # a replay
    (entry,) = graphed_pass._BUCKETS.of(model.decoder).values()
    assert entry.captured and torch.half in next(iter(graphed_pass._BUCKETS.of(model.decoder)))


@pytest.mark.parametrize("device,mode", WHERE)
def test_a_second_backward_through_a_replay_is_refused(device, mode):
    """``retain_graph=True`` and a second backward: the bucket may hold a later batch's activations by then,
    so it says so instead of returning gradients of something else."""
    model = _model("lstm_smallvocab", device)
    encoder_out, tokens = encoder_inputs(model, 2, 6)
    loss = _features(model, tokens, encoder_out, _settings(mode))[0].sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second backward through a replayed pass.*--rl-engine graphed_pass=off"):
        loss.backward()


def test_a_capture_that_fails_names_the_flag_that_runs_without_one(monkeypatch):
    """A pass whose capture fails (on CUDA; here its failure is made on the CPU) says which flag runs the
    decoder's own pass instead, the original error chained."""
    model = _model("lstm_smallvocab", train=True)
    error = RuntimeError("operation not permitted when stream is capturing")

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(graphed_pass._Bucket, "__init__", fail)
    # the plan a CUDA device gets (made here on the CPU)
    on_cuda = DevicePlan(_settings("cuda-graphs", capture="off"), torch.device("cpu"), EngineSettings(), {}, False)
    with pytest.raises(RuntimeError, match=r"^preparing a CUDA graph \(warm-up and capture\) failed \(RuntimeError: "
                                           r"operation not permitted .*\); --rl-engine graphed_pass=off") as raised:
        _pass(model, 2, 6, "cuda-graphs", plan=on_cuda)
    assert raised.value.__cause__ is error
    with pytest.raises(RuntimeError) as raised:  # the bucketed pass that runs eagerly: its own errors
        _pass(model, 2, 6, "buckets")
    assert raised.value is error


def _on_cuda(small):
    """The REINFORCE step's model, task and batch on CUDA, no pass captured yet (``_steps`` captures its
    sampling step)."""
    from fairseq import utils

    model, task, sample = _setup(small)
    model.cuda()
    graphed_pass.forget(model.decoder)
    return model, task, utils.move_to_cuda(sample)


def _steps(model, task, sample, mode):
    """Two REINFORCE steps (seeds 6 and 7), the sampling step captured, with the teacher-forced passes run
    as ``mode`` says."""
    return [reinforce_step(model, task, sample, "loo", 3, seed=seed,
                           rl_engine=f"capture=cuda-graphs,graphed_pass={mode}")
            for seed in (6, 7)]


@cuda
@pytest.mark.parametrize("small", [True, False])
def test_reinforce_step_on_cuda_graphs_equals_the_eager_passes(small):
    """The whole REINFORCE step on CUDA, the sampling step captured: its CE pass (training mode) and its
    scoring pass (eval) replayed as graphs inside the step's gathered embedding gradients give the loss and
    gradients of the decoder's own passes, for two batches in a row (the second replays)."""
    model, task, sample = _on_cuda(small)
    want = _steps(model, task, sample, "off")
    for got, expected in zip(_steps(model, task, sample, "cuda-graphs"), want):
        assert_same_step(got, expected)
    assert [key[3] for key in graphed_pass._BUCKETS.of(model.decoder)] == [True, False]  # one bucket each


@cuda
def test_dropout_in_a_replayed_training_pass_draws_afresh_and_follows_the_seed():
    """A replay draws new dropout masks (not the capture's again); the same seed gives the same masks, and
    the masks the eager padded pass draws ("buckets": the same kernels in the same order, so the same offsets
    into the generator's stream).  Only the decoder drops: the encoder's outputs are the same every time, so
    what changes is the replay's own draw."""
    model = _model("lstm_smallvocab", "cuda", train=True)
    for module in model.decoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.3
    graphed_pass.forget(model.decoder)

    def features(seed=None, mode="cuda-graphs"):
        if seed is not None:
            torch.manual_seed(seed)
        return _pass(model, 2, 6, mode, backward=False)[0]

    features()  # the capture
    first, again, seeded, reseeded = features(), features(), features(3), features(3)
    assert not torch.equal(first, again)
    torch.testing.assert_close(seeded, reseeded)
    features(mode="buckets")  # the eager bucket made
    torch.testing.assert_close(features(3, mode="buckets"), seeded)


@cuda
def test_a_capture_while_another_thread_pins_memory():
    """fairseq-train's DataLoader pins batches in a thread of its own: its pinned allocations during a capture
    (torch empties the pinned cache when one starts) must break neither the capture nor that thread
    (buckets.CAPTURE_ERROR_MODE), for the sampling step and the teacher-forced passes alike."""
    import threading

    model, task, sample = _on_cuda(True)
    stop, errors, pinned = threading.Event(), [], [0]

    def pin():
        try:
            while not stop.is_set():
                torch.empty(1 << 18).pin_memory()
                pinned[0] += 1
        except Exception as error:  # noqa: BLE001 (reported by the test)
            errors.append(error)

    want = _steps(model, task, sample, "off")
    capture.forget(model.decoder)  # both kinds of graph captured while the thread pins
    thread = threading.Thread(target=pin)
    thread.start()
    try:  # the first step captures both kinds of graph, the second replays them
        for got, expected in zip(_steps(model, task, sample, "cuda-graphs"), want):
            assert_same_step(got, expected)
    finally:
        stop.set()
        thread.join()
    assert not errors and pinned[0] > 0
    buckets = graphed_pass._BUCKETS.of(model.decoder).values()
    assert buckets and all(entry.captured for entry in buckets) and capture._BUCKETS.of(model.decoder)
