"""The sampling loop for the GPU, on the CPU: the static decoding state
(engine/transformer_state.py, engine/recurrent_state.py) against fairseq's own incremental decoding (the
same decoder states, step by step, and the same draws, for every Transformer
family the tasks restrict, N rows per input, padded sources), and the loop's
stop test asked every few steps giving the same samples."""


import pytest
import torch
from helpers import candidate_batch
from model_families import LSTM, STATIC, TRANSFORMER, TRANSFORMERS, encoder_inputs, raise_eos, stock

from fairseq_smallvocab.engine import eager, passes
from fairseq_smallvocab.engine import sampling as sampler
from fairseq_smallvocab.engine.families import static_state
from fairseq_smallvocab.engine.recurrent_state import RecurrentStaticState
from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.engine.settings import EngineSettings
from fairseq_smallvocab.engine.transformer_state import TransformerStaticState
from fairseq_smallvocab.models.restricted import restrict


@pytest.mark.parametrize("name", list(STATIC))
@pytest.mark.parametrize("n", [1, 3])
@torch.no_grad()
def test_static_steps_give_fairseqs_incremental_states(name, n):
    torch.manual_seed(0)
    model = STATIC[name]().eval()
    for param in model.parameters():  # away from the initialization's near-uniform attention
        param.normal_(0, 0.5)
    steps = 6
    encoder_out, tokens = encoder_inputs(model, n, steps)
    static = static_state(model.decoder, encoder_out, steps)
    assert isinstance(static, TransformerStaticState if name in TRANSFORMERS else RecurrentStaticState)
    state = {}
    for t in range(steps):
        want, _ = model.decoder.extract_features(tokens[:, : t + 1], encoder_out, incremental_state=state)
        got = static.step(tokens[:, t], t)
        torch.testing.assert_close(got, want[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", TRANSFORMERS)
@torch.no_grad()
def test_a_step_index_on_the_device_gives_the_same_states_with_static_shapes(name):
    """Step t as a 0-d tensor (what a captured step reads): every step attends over all columns, the
    unwritten ones masked, and gives the states of the eager step over the columns written so far."""
    torch.manual_seed(0)
    model = STATIC[name]().eval()
    for param in model.parameters():
        param.normal_(0, 0.5)
    steps = 6
    encoder_out, tokens = encoder_inputs(model, 2, steps)
    eager, static = static_state(model.decoder, encoder_out, steps), static_state(model.decoder, encoder_out, steps)
    for t in range(steps):
        torch.testing.assert_close(static.step(tokens[:, t], torch.tensor(t)), eager.step(tokens[:, t], t),
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch,options", [("transformer", dict(cross_self_attention=True, **TRANSFORMER)),
                                          ("lstm", dict(decoder_attention="0", **LSTM))])
def test_an_option_the_static_step_does_not_follow_keeps_fairseqs_state(arch, options):
    """... and the plan says why, in the line the log prints once per plan (not per batch)."""
    model = stock(arch, **options).eval()
    encoder_out = model.encoder(torch.tensor([[5, 6, 2]]), src_lengths=torch.tensor([3]))
    assert static_state(model.decoder, encoder_out, 4) is None
    plan = passes.plan(EngineSettings(), "cpu", model)
    assert plan.family is None and plan.static_state(model.decoder, encoder_out, 4) is None
    expected = "cross-self-attention" if arch == "transformer" else "without attention"
    said = plan.describe()
    assert f"static_state=off ({type(model.decoder).__name__} samples on fairseq's incremental state" in said \
        and expected in said, said
    assert "static_state" not in passes.plan(EngineSettings(), "cpu", STATIC["transformer"]()).describe()


def test_a_transformer_whose_steps_keep_their_graph_keeps_fairseqs_state():
    """Its buffers are written in place, which a kept graph would see change (recurrent states are not)."""
    model = STATIC["transformer"]().eval()
    encoder_out = model.encoder(torch.tensor([[5, 6, 2]]), src_lengths=torch.tensor([3]))
    assert static_state(model.decoder, encoder_out, 4, keep_graph=True) is None
    assert static_state(model.decoder, encoder_out, 4) is not None


@pytest.mark.parametrize("name", list(STATIC))
@pytest.mark.parametrize("small", [True, False])
@torch.no_grad()
def test_the_sampler_draws_the_same_on_the_static_state_as_on_fairseqs(name, small, monkeypatch):
    """One seed: the same tokens, positions, lengths, greedy flags, entropies and kept probabilities with the
    static state as with fairseq's incremental state, for N = 3 samples per input, in and out of candidates,
    sampled and greedy."""
    torch.manual_seed(0)
    model = restrict(STATIC[name]()).eval()
    for param in model.parameters():
        param.normal_(0, 0.5)
    encoder_out, tokens = encoder_inputs(model, 3, 1)
    rows = tokens.size(0)
    candidates = candidate_batch(12, len(model.decoder.dictionary), bsz=rows) if small else None
    max_lens = torch.tensor([6, 3, 8, 1, 5] * 3).view(3, 5).t().reshape(-1)
    draws, built = {}, []

    made = eager.EagerPlan.static_state

    def spy(*args, **kwargs):  # the static path is taken where it is on
        built.append(made(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(eager.EagerPlan, "static_state", spy)
    for static in (True, False):
        request = SampleRequest(max_lens, plan=passes.plan(EngineSettings(static_state=static), "cpu", model))
        torch.manual_seed(1)
        draws[static] = [sampler.sample(model, encoder_out, candidates, request, greedy=greedy, keep_probs=True)
                         for greedy in (False, True)]
    for a, b in zip(draws[True], draws[False]):
        for field in ("tokens", "positions", "mask", "lengths", "is_greedy"):
            assert torch.equal(getattr(a, field), getattr(b, field)) if getattr(b, field) is not None else True
        if b.entropy is not None:
            torch.testing.assert_close(a.entropy, b.entropy, atol=1e-5, rtol=1e-5)
        for field in ("probs", "chosen_lprobs"):  # the steps that count: fairseq masks the pad keys of ended rows
            if getattr(b, field) is not None:
                torch.testing.assert_close(getattr(a, field)[b.mask], getattr(b, field)[b.mask], atol=1e-5, rtol=1e-5)
    assert draws[True][0].probs is not None and draws[True][0].tokens.size(1) > 1
    kind = TransformerStaticState if name in TRANSFORMERS else RecurrentStaticState
    assert len(built) == 4 and built[2:] == [None, None] and all(isinstance(state, kind) for state in built[:2])


@pytest.mark.parametrize("name", ["lstm_smallvocab", "transformer"])
@pytest.mark.parametrize("every", [3, 100])
def test_asking_whether_rows_are_going_less_often_gives_the_same_samples(name, every):
    """With the stop test every 3 steps, or never before the length bound, the loop runs masked steps after
    the last row ends: the samples, their kept states (recurrent decoders keep the step graph) and the
    scores are those of a test every step."""
    torch.manual_seed(0)
    model = restrict(STATIC[name]()).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.5)
    encoder_out, tokens = encoder_inputs(model, 2, 4)
    rows = tokens.size(0)
    max_lens = torch.full((rows,), 40)
    with torch.no_grad():
        mean = model.decoder.extract_features(tokens, encoder_out)[0].mean((0, 1))
        for _ in range(40):  # eos likelier step by step until every row ends early, at different steps
            torch.manual_seed(1)
            drawn = sampler.sample(model, encoder_out, None, SampleRequest(max_lens))
            if 2 < drawn.tokens.size(1) < 40 and drawn.lengths.min() < drawn.lengths.max():
                break
            raise_eos(model, mean)
    draws = []
    for check in (1, every):
        settings = EngineSettings(stop_check_every=check)
        torch.manual_seed(1)
        request = SampleRequest(max_lens, plan=passes.plan(settings, max_lens.device, model))
        drawn = sampler.sample(model, encoder_out, None, request, keep_graph=model.sample_keeps_graph, keep_probs=True)
        draws.append((drawn, sampler.score(model, encoder_out, None, drawn, request)))
    (a, scored_a), (b, scored_b) = draws
    assert 1 < a.tokens.size(1) < 40 and a.lengths.min() < a.lengths.max()  # rows ended, early and apart
    for field in ("tokens", "positions", "mask", "lengths", "is_greedy"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    torch.testing.assert_close(a.entropy, b.entropy)
    torch.testing.assert_close(scored_a.lprobs, scored_b.lprobs)
    torch.testing.assert_close(scored_a.features, scored_b.features)  # the states that chose each token


def test_a_family_registered_for_a_subclass_gives_it_a_static_state(monkeypatch):
    """Extension by registration: a subclass of the paper's decoder is not followed by the paper's family
    (it may compute otherwise, and the plan says so); a family registered for it (the nearest class wins) gives
    it a static state, whose steps are the decoder's own incremental steps."""
    from fairseq_smallvocab.engine import families
    from fairseq_smallvocab.models.lstm_smallvocab import PaperLSTMFamily, PaperLSTMState, SmallVocabDecoder

    class MyDecoder(SmallVocabDecoder):
        pass

    monkeypatch.setattr(families, "_FAMILIES", list(families._FAMILIES))
    model = STATIC["lstm_smallvocab"]().eval()
    model.decoder.__class__ = MyDecoder
    encoder_out, tokens = encoder_inputs(model, 1, 4)
    assert static_state(model.decoder, encoder_out, 4) is None
    assert "MyDecoder subclasses SmallVocabDecoder" in passes.plan(EngineSettings(), "cpu", model).notes["static_state"]

    class MyFamily(PaperLSTMFamily):
        decoder_class = MyDecoder

    families.register(MyFamily())
    assert type(families.family_of(model.decoder)) is MyFamily and families.is_recurrent(model.decoder)
    state = passes.plan(EngineSettings(), "cpu", model).static_state(model.decoder, encoder_out, 4)
    assert isinstance(state, PaperLSTMState) and isinstance(static_state(model.decoder, encoder_out, 4), PaperLSTMState)
    with torch.no_grad():
        want, _ = model.decoder.extract_features(tokens, encoder_out)
        got = torch.stack([state.step(tokens[:, t], t) for t in range(tokens.size(1))], 1)
    torch.testing.assert_close(got, want)
