"""The captured sampling step (engine/device_modes/capture.py).  On the CPU, the
bucketed step with its device step index run eagerly (capture="buckets",
the program a CUDA graph records): a bucket's padding (rows, steps, source
length, candidate union) changes no example's sample, probabilities or
entropy, for every model family, in and out of candidates, sampled and
greedy; a bucket takes the next batch without leaking the last; REINFORCE's
loss and gradients are those of the eager loop.  On CUDA (skipped without
one): graph replay equals the eager loop for the same draws over several
buckets, reads updated parameters, is captured again when a parameter is
replaced, and syncs with the host nowhere inside the loop."""

import gc
import weakref

import pytest
import torch
from helpers import B, _setup, assert_same_step, candidate_batch, reinforce_step
from model_families import STATIC, TRANSFORMERS, encoder_inputs

from fairseq_smallvocab.engine import passes
from fairseq_smallvocab.engine import sampling as sampler
from fairseq_smallvocab.engine.device_modes import DevicePlan, capture, graphed_pass
from fairseq_smallvocab.engine.device_modes.buckets import BucketStore, bucket
from fairseq_smallvocab.engine.families import follower
from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.engine.settings import EngineSettings
from fairseq_smallvocab.engine.transformer_state import TransformerStaticState
from fairseq_smallvocab.models.restricted import restrict

FIELDS = ("tokens", "positions", "mask", "lengths", "is_greedy")


def _model(name, device="cpu"):
    torch.manual_seed(0)
    model = restrict(STATIC[name]()).eval().to(device)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.5)
    return model


def _draw(model, encoder_out, candidates, max_lens, mode, seed=1, settings=sampler.DEFAULT, plan=None, **options):
    """``sampler.sample`` under the plan of ``settings`` with their capture ``mode`` (or under ``plan``)."""
    plan = plan or passes.plan(settings.changed(capture=mode), max_lens.device, model)
    torch.manual_seed(seed)
    with torch.no_grad():
        return sampler.sample(model, encoder_out, candidates, SampleRequest(max_lens, plan=plan), **options)


def _assert_same(a, b):
    for field in FIELDS:
        want = getattr(b, field)
        assert (getattr(a, field) is None) if want is None else torch.equal(getattr(a, field), want), field
    if b.entropy is not None:
        torch.testing.assert_close(a.entropy, b.entropy, atol=1e-5, rtol=1e-5)
    for field in ("probs", "chosen_lprobs"):  # the steps that count (fairseq masks ended rows' pad keys)
        want = getattr(b, field)
        assert (getattr(a, field) is None) == (want is None), field
        if want is not None:
            torch.testing.assert_close(getattr(a, field)[b.mask], want[b.mask], atol=1e-5, rtol=1e-5)


def test_buckets_round_up_two_per_octave():
    assert [bucket(n) for n in (0, 1, 8, 9, 12, 13, 16, 17, 24, 25, 100, 128, 129)] == \
        [8, 8, 8, 12, 12, 16, 16, 24, 24, 32, 128, 128, 192]
    assert [bucket(n, floor=500) for n in (10, 500, 501, 513)] == [500, 500, 512, 768]


@pytest.mark.parametrize("name", list(STATIC))
@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("greedy", [False, True])
def test_a_buckets_padding_changes_no_example(name, small, greedy):
    """15 rows (bucket 16), at most 9 steps (bucket 12), sources of 7 (bucket 8), the union padded: the same
    samples as the eager loop, with the same uniform draws."""
    model = _model(name)
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    rows = tokens.size(0)
    candidates = candidate_batch(12, len(model.decoder.dictionary), bsz=rows) if small else None
    max_lens = torch.tensor([6, 3, 9, 1, 5] * 3).view(3, 5).t().reshape(-1)
    options = dict(greedy=greedy, keep_probs=True)
    got = _draw(model, encoder_out, candidates, max_lens, "buckets", **options)
    want = _draw(model, encoder_out, candidates, max_lens, "off", **options)
    _assert_same(got, want)
    assert want.tokens.size(1) > 1 or greedy  # (greedy decodes of this model end at once)
    (entry,) = capture._BUCKETS.of(model.decoder).values()
    assert entry.loop.tokens.shape == (16, 13) and entry.slots.src_len == 8 and entry.graph is None


@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab", "lstm"])
def test_a_bucket_takes_the_next_batch_without_the_last(name):
    """A second, smaller batch of the same bucket (fewer rows, other sources and length bounds, another union):
    what it draws is what the eager loop draws for it alone; one bucket serves both."""
    model = _model(name)
    vocab = len(model.decoder.dictionary)
    big, _ = encoder_inputs(model, 3, 1)
    other = model.encoder.reorder_encoder_out(encoder_inputs(model, 3, 1, seed=5, width=5)[0],
                                           torch.arange(13))
    batches = [(big, candidate_batch(12, vocab, bsz=15), torch.full((15,), 9)),
               (other, candidate_batch(12, vocab, bsz=13), torch.tensor([11, 2, 5, 1, 3] * 2 + [4, 6, 2]))]
    capture._BUCKETS.drop(model.decoder)
    for encoder_out, candidates, max_lens in batches:
        got = _draw(model, encoder_out, candidates, max_lens, "buckets", keep_probs=True)
        want = _draw(model, encoder_out, candidates, max_lens, "off", keep_probs=True)
        _assert_same(got, want)
    assert len(capture._BUCKETS.of(model.decoder)) == 1


@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab"])
def test_a_dropped_model_takes_its_buckets_along(name):
    """The buckets are weakly keyed by the decoder and hold it weakly: a model the caller drops is freed
    with its buckets (and, on CUDA, their graphs and memory), not kept for the rest of the process."""
    model = _model(name)
    encoder_out, _ = encoder_inputs(model, 3, 1)
    _draw(model, encoder_out, None, torch.full((15,), 4), "buckets")
    decoder = weakref.ref(model.decoder)
    assert len(capture._BUCKETS.of(decoder())) == 1
    del model, encoder_out
    gc.collect()
    assert decoder() is None


@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab"])
@pytest.mark.parametrize("small", [True, False])
def test_a_batch_loaded_again_into_its_bucket_keeps_its_union(name, small, monkeypatch):
    """On CUDA a new bucket's first batch is loaded, the step captured, and the batch loaded again: the second
    load must copy the batch's union rows and positions, not the bucket's slots into themselves (the CPU
    stand-in: every load done twice)."""
    model = _model(name)
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    candidates = candidate_batch(12, len(model.decoder.dictionary), bsz=tokens.size(0)) if small else None
    max_lens = torch.full((tokens.size(0),), 9)
    load = capture._Bucket.load

    def twice(self, *args):
        load(self, *args)
        load(self, *args)

    monkeypatch.setattr(capture._Bucket, "load", twice)
    capture._BUCKETS.drop(model.decoder)
    got = _draw(model, encoder_out, candidates, max_lens, "buckets", keep_probs=True)
    want = _draw(model, encoder_out, candidates, max_lens, "off", keep_probs=True)
    _assert_same(got, want)


def test_a_bucket_keeps_probabilities_only_within_the_limit_at_its_padded_size():
    """15 rows x 9 steps x 12 candidates fit the limit; the bucket's 16 x 12 x 12 do not: the bucket keeps none
    (scoring makes the logits again), and draws the same samples."""
    model = _model("transformer")
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    candidates = candidate_batch(12, len(model.decoder.dictionary), bsz=15)
    max_lens = torch.full((15,), 9)
    limit = EngineSettings(stored_probs_max_elements=15 * 9 * 12)
    capture._BUCKETS.drop(model.decoder)
    got = _draw(model, encoder_out, candidates, max_lens, "buckets", settings=limit, keep_probs=True)
    want = _draw(model, encoder_out, candidates, max_lens, "off", settings=limit, keep_probs=True)
    assert got.probs is None and want.probs is not None
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    limit = EngineSettings(stored_probs_max_elements=16 * 12 * 12)
    got = _draw(model, encoder_out, candidates, max_lens, "buckets", settings=limit, keep_probs=True)
    _assert_same(got, want)


@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab"])
@pytest.mark.parametrize("small", [True, False])
def test_a_buckets_bytes_count_every_tensor_it_keeps(name, small):
    """What ``capture_max_mib`` weighs: the slots (the union's too, made at the first load), the keys and
    values, the loop's tensors."""
    model = _model(name)
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    candidates = candidate_batch(12, len(model.decoder.dictionary), bsz=tokens.size(0)) if small else None
    capture._BUCKETS.drop(model.decoder)
    _draw(model, encoder_out, candidates, torch.full((tokens.size(0),), 9), "buckets", keep_probs=True)
    (entry,) = capture._BUCKETS.of(model.decoder).values()
    state = entry.state  # a recurrent state's keys and values are slots; a Transformer's are its own lists
    cache = state.keys + state.values if isinstance(state, TransformerStaticState) else []
    kept = [*entry.slots.slots.values(), *cache, *(x for x in vars(entry.loop).values() if torch.is_tensor(x))]
    assert small == ("union_weight" in entry.slots.slots)
    assert entry.bytes == sum(x.numel() * x.element_size() for x in kept)


def test_buckets_beyond_the_limits_are_dropped_least_recent_first(monkeypatch):
    model = _model("transformer")
    encoder_out, _ = encoder_inputs(model, 1, 1)
    capture._BUCKETS.drop(model.decoder)
    two = EngineSettings(capture_max_buckets=2)
    for steps in (3, 20, 40):  # buckets 8, 24 and 48 steps
        _draw(model, encoder_out, None, torch.full((5,), steps), "buckets", settings=two)
    assert [key[1] for key in capture._BUCKETS.of(model.decoder)] == [24, 48]
    init = capture._Bucket.__init__

    def heavy(self, *args):  # a new bucket weighs just over the 1 MiB cap: the bucket in use stays
        init(self, *args)
        self.bytes = 2 ** 20 + 1

    monkeypatch.setattr(capture._Bucket, "__init__", heavy)
    _draw(model, encoder_out, None, torch.full((5,), 3), "buckets", settings=two.changed(capture_max_mib=1))
    assert [key[1] for key in capture._BUCKETS.of(model.decoder)] == [8]


def test_settings_that_do_not_change_the_captured_step_share_its_bucket():
    """The bucket's key holds the settings that change what is captured (capture, compile,
    transposed_min_rows), not those read outside the step (stop_check_every, union_max_ratio, the caps)."""
    model = _model("transformer")
    encoder_out, _ = encoder_inputs(model, 1, 1)
    capture._BUCKETS.drop(model.decoder)
    base = EngineSettings()
    for settings in (base, base.changed(stop_check_every=4, union_max_ratio=1.0, capture_max_mib=100)):
        _draw(model, encoder_out, None, torch.full((5,), 3), "buckets", settings=settings)
    assert len(capture._BUCKETS.of(model.decoder)) == 1
    _draw(model, encoder_out, None, torch.full((5,), 3), "buckets", settings=base.changed(transposed_min_rows=1))
    assert len(capture._BUCKETS.of(model.decoder)) == 2


def test_buckets_that_must_go_are_dropped_before_a_new_one_is_made():
    """buckets.BucketStore (the sampling step's and the graphed passes' buckets): the buckets the limits drop
    whatever the new one weighs are gone when it is made (their memory free for its capture); the rest go
    after, by its weight; the kept buckets are those the limits allow, most recent last."""
    from types import SimpleNamespace

    class Decoder:
        pass

    store, decoder, seen = BucketStore(), Decoder(), []

    def get(key, weight, max_buckets=3, max_bytes=100):
        def make():
            seen.append(list(store.of(decoder)))
            return SimpleNamespace(bytes=weight)
        return store.get(decoder, key, make, max_buckets, max_bytes)

    for key in "abc":
        get(key, 10)
    assert get("a", 99) is store.of(decoder)["a"] and list(store.of(decoder)) == ["b", "c", "a"]  # a used again
    get("d", 10)
    assert seen[-1] == ["c", "a"] and list(store.of(decoder)) == ["c", "a", "d"]  # b dropped first, for the count
    get("e", 95)
    assert seen[-1] == ["a", "d"] and list(store.of(decoder)) == ["e"]  # then the new one's weight drops a and d
    get("f", 200)
    assert seen[-1] == ["e"] and list(store.of(decoder)) == ["f"]  # over the budget alone, and kept
    get("g", 1)
    assert seen[-1] == [] and list(store.of(decoder)) == ["g"]  # f was over the budget before g was made


def test_where_the_bucketed_step_applies():
    transformer, lstm = _model("transformer"), _model("lstm_smallvocab")
    cross = restrict(STATIC["transformer"]())  # an option the static step does not follow
    cross.decoder.cross_self_attention = True
    out, _ = encoder_inputs(transformer, 1, 1)
    cpu = torch.device("cpu")
    request = SampleRequest(torch.full((5,), 3))

    def on_buckets(settings, model):
        return passes.plan(settings, cpu, model).on_buckets(request)

    graphs = EngineSettings(capture="cuda-graphs")
    assert not on_buckets(graphs, transformer)  # graphs are CUDA's
    buckets = EngineSettings(capture="buckets")
    assert on_buckets(buckets, transformer) and on_buckets(buckets, lstm)
    plan = passes.plan(buckets, cpu, cross)
    assert not plan.on_buckets(request) and "TransformerDecoderBase has no static state" in plan.notes["capture"]
    # the bucketed step runs on the static state; a forced first token runs the eager loop
    assert not on_buckets(buckets.changed(static_state=False), transformer)
    assert not passes.plan(buckets, cpu, transformer).on_buckets(
        SampleRequest(torch.full((5,), 3), first=torch.zeros(5, dtype=torch.long)))
    with pytest.raises(ValueError, match="--rl-engine capture must be one of auto, cuda-graphs, buckets, off, "
                                         "got 'graphs'"):
        EngineSettings(capture="graphs")
    with pytest.raises(ValueError, match="--rl-engine compile must be one of off, fuse, reduce-overhead, got "
                                         "'max-autotune'"):
        buckets.changed(compile="max-autotune")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm_smallvocab", "transformer"])
def test_a_compiled_bucket_step_draws_what_the_eager_loop_draws(name):
    """The bucketed step fused by torch.compile (compile="fuse"; inductor's C++ kernels on the CPU): the
    same samples, probabilities and entropies as the eager loop, for two batches of one bucket (the second
    runs the compiled step again); the setting is part of the bucket's key."""
    model = _model(name)
    vocab = len(model.decoder.dictionary)
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    capture._BUCKETS.drop(model.decoder)
    fuse = EngineSettings(compile="fuse")
    for seed in (1, 2):
        candidates = candidate_batch(12, vocab, bsz=tokens.size(0))
        max_lens = torch.tensor([6, 3, 9, 1, 5] * 3)
        got = _draw(model, encoder_out, candidates, max_lens, "buckets", seed=seed, settings=fuse, keep_probs=True)
        want = _draw(model, encoder_out, candidates, max_lens, "off", seed=seed, settings=fuse, keep_probs=True)
        _assert_same(got, want)
    (entry,) = capture._BUCKETS.of(model.decoder).values()
    assert entry._step != entry._eager_step  # compiled
    _draw(model, encoder_out, candidates, max_lens, "buckets", settings=fuse.changed(compile="off"))
    assert [key[-2] for key in capture._BUCKETS.of(model.decoder)] == ["fuse", "off"]


@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("baseline,n", [("learned", 1), ("loo", 3)])
def test_reinforce_loss_and_gradients_on_the_bucketed_step(small, baseline, n):
    """The paper's LSTM keeps its sampling steps' graph when eager; on the bucketed step it keeps none and
    scores its samples by a teacher-forced pass: the same loss, logged values and gradients."""
    model, task, sample = _setup(small)
    results = {}
    for mode in ("off", "buckets"):
        results[mode] = reinforce_step(model, task, sample, baseline, n, rl_engine=f"capture={mode}")
    assert_same_step(results["buckets"], results["off"])
    log_a, log_b = results["off"][2], results["buckets"][2]
    assert log_a["sample_len"] == log_b["sample_len"] and log_a["sample_len"] < 7 * B * n  # some ended early
    assert capture._BUCKETS.of(model.decoder)


@pytest.mark.parametrize("small", [True, False])
def test_the_criterions_flags_choose_the_step_for_its_batches_only(small):
    """--rl-engine capture and graphed_pass=buckets runs the bucketed sampling step and teacher-forced pass
    (the programs CUDA graphs record), with the loss and gradients of "off"; the model keeps the plan of the
    criterion's flags, so that its passes without a REINFORCE request run it too; a batch that failed leaves
    the next one as it was."""
    model, task, sample = _setup(small)
    assert model.engine_plan is None  # (planned at the first batch)
    off = reinforce_step(model, task, sample, "loo", 3, rl_engine="capture=off,graphed_pass=off")
    assert not capture._BUCKETS.of(model.decoder) and not graphed_pass._BUCKETS.of(model.decoder)
    assert model.engine_plan.name == "eager"
    on = reinforce_step(model, task, sample, "loo", 3, rl_engine="capture=buckets,graphed_pass=buckets")
    assert_same_step(on, off)
    assert capture._BUCKETS.of(model.decoder) and graphed_pass._BUCKETS.of(model.decoder)
    assert (model.engine_plan.settings.capture, model.engine_plan.settings.graphed_pass) == ("buckets", "buckets")
    with pytest.raises(KeyError):
        reinforce_step(model, task, {**sample, "net_input": {}}, "loo", 3, rl_engine="capture=buckets,compile=fuse")
    assert_same_step(reinforce_step(model, task, sample, "loo", 3, rl_engine="capture=off,graphed_pass=off"), off)


@pytest.mark.parametrize("error,compile_mode,hint", [
    (RuntimeError("operation not permitted when stream is capturing"), "off",
     "--rl-engine capture=off samples without one"),
    (RuntimeError("operation not permitted when stream is capturing"), "fuse",
     "--rl-engine capture=off samples without one, and --rl-engine compile=off compiles nothing"),
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "off", None)])
def test_a_capture_that_fails_names_the_flag_that_runs_without_one(error, compile_mode, hint, monkeypatch):
    """A capture that fails (on CUDA; here its failure is made on the CPU) says which flags sample without
    capturing (and without compiling, where the step is compiled), the original error chained; running out of
    memory is left as it is, for fairseq-train, which recovers from it (skipping the batch) by its message."""
    model = _model("transformer")
    encoder_out, _ = encoder_inputs(model, 3, 1)

    def fail(self, pool):
        raise error

    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(capture._Bucket, "capture", fail)
    # the plan a CUDA device gets (made here on the CPU)
    on_cuda = DevicePlan(EngineSettings(capture="cuda-graphs", graphed_pass="off", compile=compile_mode),
                         torch.device("cpu"), EngineSettings(compile=compile_mode), {}, False,
                         family=follower(model.decoder)[0])
    with pytest.raises(RuntimeError) as raised:
        _draw(model, encoder_out, candidate_batch(12, len(model.decoder.dictionary), bsz=15), torch.full((15,), 9),
              "cuda-graphs", plan=on_cuda)
    if hint:
        assert str(raised.value) == ("preparing a CUDA graph (warm-up and capture) failed (RuntimeError: operation "
                                     f"not permitted when stream is capturing); {hint}")
        assert raised.value.__cause__ is error
    else:
        assert raised.value is error


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA graphs)")


@cuda
@pytest.mark.parametrize("name", ["transformer", "transformer_learned_pos", "lstm_smallvocab", "lstm",
                                  "lstm_caption_smallvocab"])
@pytest.mark.parametrize("small", [True, False])
def test_graph_replay_equals_the_eager_loop_over_buckets_and_updates(name, small):
    """The same draws: replayed graphs give the eager loop's samples for batches of three buckets, after an
    in-place update of every parameter (the graph reads the new values), and after a parameter is replaced
    (a new address: the bucket is captured again)."""
    model = _model(name, "cuda")
    vocab = len(model.decoder.dictionary)
    capture._BUCKETS.drop(model.decoder)

    def check(n, steps):
        encoder_out = encoder_inputs(model, n, 1)[0]
        rows = 5 * n
        candidates = candidate_batch(12, vocab, bsz=rows).cuda() if small else None
        max_lens = torch.arange(rows, device="cuda") % steps + 1
        for greedy in (False, True):
            options = dict(greedy=greedy, keep_probs=True)
            got = _draw(model, encoder_out, candidates, max_lens, "cuda-graphs", **options)
            want = _draw(model, encoder_out, candidates, max_lens, "off", **options)
            _assert_same(got, want)

    for n, steps in ((1, 4), (3, 9), (5, 30)):
        check(n, steps)
    graphs = {key: entry.graph for key, entry in capture._BUCKETS.of(model.decoder).items()}
    assert len(graphs) >= 3 and all(graph is not None for graph in graphs.values())
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    check(3, 9)
    assert all(capture._BUCKETS.of(model.decoder)[key].graph is graphs[key] for key in graphs)  # not captured again
    first = next(model.decoder.parameters())
    first.data = first.data.clone()  # a new address
    check(3, 9)
    assert any(capture._BUCKETS.of(model.decoder)[key].graph is not graphs[key] for key in graphs)


@cuda
@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab"])
def test_half_precision_replays_draw_what_the_eager_loop_draws(name):
    """fairseq's --fp16 casts the model (no autocast), and "auto" captures on a GPU then too: the bucket is
    captured in half precision (its key says so) and its replays draw the eager half-precision loop's
    samples, over two buckets."""
    model = _model(name, "cuda").half()
    vocab = len(model.decoder.dictionary)
    capture._BUCKETS.drop(model.decoder)
    for n, steps in ((1, 4), (3, 9), (3, 9)):
        encoder_out = encoder_inputs(model, n, 1)[0]
        rows = 5 * n
        candidates = candidate_batch(12, vocab, bsz=rows).cuda()
        max_lens = torch.arange(rows, device="cuda") % steps + 1
        got = _draw(model, encoder_out, candidates, max_lens, "cuda-graphs", keep_probs=True)
        want = _draw(model, encoder_out, candidates, max_lens, "off", keep_probs=True)
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.mask, want.mask)
        torch.testing.assert_close(got.probs[want.mask].float(), want.probs[want.mask].float(), atol=1e-3,
                                   rtol=1e-2)
    keys = list(capture._BUCKETS.of(model.decoder))
    assert len(keys) == 2 and all(torch.half in key for key in keys)


@cuda
@pytest.mark.parametrize("name", ["transformer", "lstm_smallvocab"])
@pytest.mark.parametrize("compile_mode", ["fuse", "reduce-overhead"])
def test_a_compiled_step_replays_what_the_eager_loop_draws(name, compile_mode):
    """compile on CUDA: inductor's kernels captured by hand ("fuse") or by inductor ("reduce-overhead") draw
    what the eager loop draws, over two buckets and after an in-place update of every parameter."""
    model = _model(name, "cuda")
    vocab = len(model.decoder.dictionary)
    capture._BUCKETS.drop(model.decoder)
    compiled = EngineSettings(compile=compile_mode, untested_cuda_modes=True)  # (the GPU test of the mode)

    def check(n, steps):
        encoder_out = encoder_inputs(model, n, 1)[0]
        rows = 5 * n
        candidates = candidate_batch(12, vocab, bsz=rows).cuda()
        max_lens = torch.arange(rows, device="cuda") % steps + 1
        got = _draw(model, encoder_out, candidates, max_lens, "cuda-graphs", settings=compiled, keep_probs=True)
        want = _draw(model, encoder_out, candidates, max_lens, "off", settings=compiled, keep_probs=True)
        _assert_same(got, want)

    check(1, 4)
    check(3, 9)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    check(3, 9)
    graphs = [entry.graph for entry in capture._BUCKETS.of(model.decoder).values()]
    assert len(graphs) == 2 and all((graph is None) == (compile_mode == "reduce-overhead") for graph in graphs)


@cuda
@pytest.mark.parametrize("name", TRANSFORMERS[:1] + ["lstm_smallvocab"])
def test_a_replayed_step_never_waits_for_the_host(name):
    model = _model(name, "cuda")
    encoder_out, _ = encoder_inputs(model, 3, 1)
    max_lens = torch.full((15,), 12, device="cuda")
    settings = EngineSettings(capture="cuda-graphs", stop_check_every=10 ** 9)
    with torch.no_grad():
        sampler.sample(model, encoder_out, None, SampleRequest(max_lens, plan=passes.plan(settings, "cuda", model))
                       )  # captured here
        (entry,) = capture._BUCKETS.of(model.decoder).values()
        entry.t.zero_()  # the batch's 12 steps again (t past the bucket's steps would index out of its tensors)
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(12):
                entry.replay()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()  # a device-side error surfaces here, in this test
