"""Oracles for every model family the tasks restrict (``models.restricted``):
small log-probs, loss and output-weight gradients equal the full softmax
masked to the same candidates; greedy and beam search equal fairseq's stock
generator on the masked full softmax; samples stay inside the candidates and
the step-wise policy equals the rescoring pass; stock state-dict keys."""

import contextlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from helpers import candidate_batch, translation_batch
from model_families import FAMILIES, LSTM, T_SRC, T_TGT, TRANSFORMER, V_SRC, V_TGT, B, K, raise_eos, stock

import fairseq_smallvocab  # noqa: F401  (registers the plugin's models)
from fairseq_smallvocab.candidates.space import candidate_positions
from fairseq_smallvocab.engine.sampling import SampleRequest
from fairseq_smallvocab.models.generation import SmallVocabSequenceGenerator
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.output.weights import RestrictionError, eval_mode


@pytest.fixture(params=list(FAMILIES), scope="module")
def family(request):
    torch.manual_seed(0)
    model = FAMILIES[request.param]()
    keys = sorted(model.state_dict())
    restrict(model, request.param)
    with torch.no_grad():  # sharper distributions than the initialization's, so that mistakes show
        for name, param in model.named_parameters():
            if "lstm" in request.param:
                param.normal_(0, 0.5)
            elif "embed_tokens" in name or "output_projection" in name:
                param.mul_(4.0)
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    lengths = torch.tensor([7, 6, 5, 4, 2])  # sorted: fairseq's lstm encoder needs it (as its batches are)
    src, prev, tgt, cands = translation_batch(lengths, T_SRC, T_TGT, K, V_SRC, tgt_dict)
    net = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    _eos_likelier(model, net)
    return SimpleNamespace(name=request.param, model=model, net=net, tgt=tgt, cands=cands, tgt_dict=tgt_dict,
                           src_dict=src_dict, keys=keys)


@torch.no_grad()
def _eos_likelier(model, net):
    """Raise eos's logit step by step (through the output bias where the model
    has one, else along the decoder states' mean direction) until beam search
    over these sources ends its hypotheses at different lengths within max_len,
    so that the search oracle compares finished hypotheses and their scores."""
    model.eval()
    mean = model(**net, features_only=True)[0].mean((0, 1))
    sources = {"id": torch.arange(B), "net_input": {k: net[k] for k in ("src_tokens", "src_lengths")}}
    for _ in range(12):
        hypos = SmallVocabSequenceGenerator([model], model.decoder.dictionary, beam_size=4, max_len_b=9).generate(
            [model], sources)
        lengths = {len(h["tokens"]) for hs in hypos for h in hs}
        if len(lengths) > 2 and min(lengths) > 1:
            return
        raise_eos(model, mean)
    raise AssertionError("no eos bias gives hypotheses of different lengths")


def _masked_full(model, net, cands):
    full, _ = model(**net)
    keep = torch.zeros(len(cands), full.size(-1), dtype=torch.bool).scatter_(1, cands, True)
    return full.masked_fill(~keep.unsqueeze(1), float("-inf"))


def test_state_dict_keys_stay_stock_and_load_strictly(family):
    model = family.model
    assert sorted(model.state_dict()) == family.keys
    fresh = FAMILIES[family.name]()
    fresh.load_state_dict(model.state_dict(), strict=True)  # a stock model reads the restricted one's weights
    restrict(fresh).load_state_dict(model.state_dict(), strict=True)
    stock = type(FAMILIES[family.name]())
    assert type(fresh) is type(model) and isinstance(fresh, stock)
    assert type(fresh).__name__ == f"Restricted{stock.__name__}"


def test_small_logprobs_equal_masked_full_softmax(family):
    model = family.model.eval()
    small = model(**family.net, candidates=family.cands)
    assert small[0].shape == (B, T_TGT, K)
    got = model.get_normalized_probs(small, log_probs=True)
    oracle = F.log_softmax(_masked_full(model, family.net, family.cands), -1)
    want = oracle.gather(2, family.cands.unsqueeze(1).expand(-1, T_TGT, -1))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    mapped = model.get_targets({"target": family.tgt}, small)
    assert torch.equal(family.cands.gather(1, mapped), family.tgt)


def test_loss_and_output_weight_gradients_equal_masked_full_softmax(family):
    model = family.model.eval()
    d = family.tgt_dict
    weight = model.output_weights()[0]

    def loss_and_grad(small):
        model.zero_grad()
        if small:
            out = model(**family.net, candidates=family.cands)
            lprobs = model.get_normalized_probs(out, log_probs=True)
            target = model.get_targets({"target": family.tgt}, out)
        else:
            lprobs, target = F.log_softmax(_masked_full(model, family.net, family.cands), -1), family.tgt
        loss = F.nll_loss(lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1), ignore_index=d.pad(),
                          reduction="sum")
        loss.backward()
        encoder_grad = next(p.grad for p in model.encoder.parameters() if p.grad is not None)
        return loss.detach(), weight.grad.clone(), encoder_grad.clone()

    small, full = loss_and_grad(True), loss_and_grad(False)
    for a, b in zip(small, full):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _sentence(family, b):
    """Example b alone, without its padding."""
    src = family.net["src_tokens"][b]
    src = src[src.ne(family.src_dict.pad())].unsqueeze(0)
    return {"id": torch.tensor([b]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}


SEARCHES = [dict(beam_size=1), dict(beam_size=4), dict(beam_size=3, len_penalty=0.5),
            dict(beam_size=4, unk_penalty=1.0, min_len=3, no_repeat_ngram_size=2)]


@pytest.mark.parametrize("options", SEARCHES)
def test_search_equals_stock_generator_on_the_masked_full_softmax(family, options):
    """Our generator on the whole batch == fairseq's SequenceGenerator on each
    sentence alone, whose output layer puts every non-candidate at -inf."""
    model = family.model.eval()
    d, beam = family.tgt_dict, options["beam_size"]
    net = {"src_tokens": family.net["src_tokens"], "src_lengths": family.net["src_lengths"],
           "candidates": family.cands}
    with torch.no_grad():
        ours = SmallVocabSequenceGenerator([model], d, max_len_b=9, **options).generate(
            [model], {"id": torch.arange(B), "net_input": net})
    decoder = model.decoder
    stock_layer = type(decoder).output_layer
    lengths = set()
    try:
        for b in range(B):
            keep = torch.zeros(V_TGT, dtype=torch.bool)
            keep[family.cands[b]] = True
            decoder.output_layer = lambda x, keep=keep: stock_layer(decoder, x).masked_fill(~keep, float("-inf"))
            with torch.no_grad():
                want = SequenceGenerator([model], d, max_len_b=9, **options).generate([model], _sentence(family, b))
            assert len(ours[b]) == len(want[0]) == beam
            for h, w in zip(ours[b], want[0]):
                assert h["tokens"].tolist() == w["tokens"].tolist(), (family.name, b)
                assert set(h["tokens"].tolist()) <= set(family.cands[b].tolist())
                torch.testing.assert_close(h["score"], w["score"], atol=1e-4, rtol=0)
                torch.testing.assert_close(h["positional_scores"], w["positional_scores"], atol=1e-4, rtol=0)
                lengths.add(len(h["tokens"]))
    finally:
        decoder.__dict__.pop("output_layer", None)
    assert beam == 1 or len(lengths) > 1  # beams of different lengths: eos chosen at different steps


def test_samples_stay_inside_candidates_and_stepwise_logprobs_equal_rescoring(family):
    """Sampling in eval mode (dropout off, the training flags restored), the
    same draws scored by the kept step graph and by one teacher-forced pass."""
    model = family.model.train()
    lens = torch.full((B,), 8)
    results, default = {}, model.sample_keeps_graph
    assert default == ("lstm" in family.name)  # recurrent decoders keep the step graph, transformers rescore
    try:
        for keep in (True, False):
            model.sample_keeps_graph = keep
            torch.manual_seed(5)
            out, extra = model(**family.net, candidates=family.cands, sample_request=SampleRequest(lens))
            results[keep] = extra["samples"]
    finally:
        model.sample_keeps_graph = default
    assert all(m.training for m in model.modules())  # restored
    kept, rescored = results[True], results[False]
    assert torch.equal(kept.tokens, rescored.tokens) and kept.mask.any()
    torch.testing.assert_close(kept.lprobs, rescored.lprobs, atol=1e-5, rtol=1e-5)
    assert rescored.lprobs.requires_grad and (rescored.lprobs <= 0).all()
    d = family.tgt_dict
    for b in range(B):
        steps = rescored.mask[b]
        assert set(rescored.tokens[b][steps].tolist()) <= set(family.cands[b].tolist()) - {d.pad(), d.bos()}
    positions = candidate_positions(family.cands, rescored.tokens.masked_fill(~rescored.mask, d.eos()),
                                    d.unk())
    assert torch.equal(positions, rescored.positions)


def _reinforce_grads(model, net, cands, gathered, monkeypatch):
    """Every parameter's gradient of a loss that uses the CE pass's logits and the
    samples' log-probabilities (the same dropout masks and draws each time),
    with the weight gradients gathered (the default) or each use's own."""
    from fairseq_smallvocab.engine import eager
    from fairseq_smallvocab.models import restricted as restricted_model
    from fairseq_smallvocab.output import gathered_grad

    with monkeypatch.context() as patch:
        if not gathered:
            for where in (restricted_model, eager):
                patch.setattr(where, "gathered_embedding_grads", lambda module: contextlib.nullcontext())
        gathers = []
        backward = gathered_grad.Gather.backward
        patch.setattr(gathered_grad.Gather, "backward",
                      staticmethod(lambda ctx, g: gathers.append(1) or backward(ctx, g)))
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        out, extra = model(**net, candidates=cands, sample_request=SampleRequest(torch.full((B,), 8)))
        loss = out.float().log_softmax(-1).mean() + extra["samples"].lprobs.sum()
        loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, len(gathers)


@pytest.mark.parametrize("small", [True, False])
def test_gathered_weight_gradients_equal_each_uses_own(family, small, monkeypatch):
    """REINFORCE's forward (CE pass, sampling, scoring) adds every use of an
    embedding or output weight into one gradient tensor per weight: the same
    gradients as each use making its own."""
    model, cands = family.model.train(), family.cands if small else None
    got, gathers = _reinforce_grads(model, family.net, cands, True, monkeypatch)
    want, none = _reinforce_grads(model, family.net, cands, False, monkeypatch)
    assert gathers >= 1 and none == 0  # the gathered path ran, and only where asked
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)


def test_gathered_weight_gradients_leave_learned_positions_alone(monkeypatch):
    """fairseq's LearnedPositionalEmbedding subclasses nn.Embedding with a forward
    of its own (positions from tokens): it is not patched, and the gradients
    equal each use's own."""
    torch.manual_seed(0)
    model = restrict(stock("transformer", share_all_embeddings=True, encoder_learned_pos=True,
                            decoder_learned_pos=True, **TRANSFORMER), "transformer").train()
    tgt_dict = model.decoder.dictionary
    lengths = torch.tensor([7, 6, 5, 4, 2])
    src, prev, tgt, cands = translation_batch(lengths, T_SRC, T_TGT, K, V_TGT, tgt_dict)
    net = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    got, gathers = _reinforce_grads(model, net, cands, True, monkeypatch)
    want, _ = _reinforce_grads(model, net, cands, False, monkeypatch)
    assert gathers >= 1 and "encoder.embed_positions.weight" in got
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)


def test_several_samples_per_input_are_scored_against_their_own_source(family):
    """N samples per input from one encoder pass repeated by the encoder's own
    reorder_encoder_out: row r belongs to example r // N (inside its
    candidates), and its log-probs equal a teacher-forced pass of that sequence
    on that example alone; the greedy decode is per example."""
    n = 3
    model = family.model.train()
    torch.manual_seed(4)
    extra = model(**family.net, candidates=family.cands,
                  sample_request=SampleRequest(torch.full((B,), 8), num_samples=n, greedy_too=True, temperature=5.0))[1]
    samples, d = extra["samples"], family.tgt_dict
    assert samples.tokens.size(0) == B * n and extra["greedy"].tokens.size(0) == B
    assert all(m.training for m in model.modules())
    distinct = 0
    with eval_mode(model), torch.no_grad():
        for row in range(B * n):
            b, steps = row // n, samples.mask[row]
            ys = samples.tokens[row][steps].tolist()
            assert set(ys) <= set(family.cands[b].tolist()) - {d.pad(), d.bos()}
            length = int(family.net["src_lengths"][b])  # left-padded: example b alone, without its padding
            one = {"src_tokens": family.net["src_tokens"][b: b + 1, T_SRC - length:],
                   "src_lengths": family.net["src_lengths"][b: b + 1]}
            prev = torch.tensor([[d.eos()] + ys[:-1]])
            logits = model(**one, prev_output_tokens=prev, candidates=family.cands[b: b + 1])[0][0]
            logits[:, [d.pad(), d.bos()]] = float("-inf")
            want = F.log_softmax(logits, -1).gather(1, samples.positions[row][steps].unsqueeze(1)).squeeze(1)
            torch.testing.assert_close(samples.lprobs[row][steps], want, atol=1e-5, rtol=1e-5)
            distinct += row % n > 0 and ys != samples.tokens[row - 1][samples.mask[row - 1]].tolist()
    assert distinct > 0  # the N samples of an input are separate draws


def test_recurrent_layers_sample_in_training_mode_with_their_dropout_off(monkeypatch):
    """cuDNN refuses the backward of an nn.LSTM run in eval mode, so the policy's
    recurrent layers stay in training mode with their inter-layer dropout at 0
    (restored after): the samples' log-probs still equal the model's in eval mode."""
    model = restrict(stock("lstm", encoder_layers=2, decoder_layers=2, **dict(LSTM, dropout=0.5)), "lstm").train()
    tgt_dict = model.decoder.dictionary
    lengths = torch.tensor([7, 6, 5, 4, 2])
    src, prev, _, cands = translation_batch(lengths, T_SRC, T_TGT, K, V_SRC, tgt_dict)
    net = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    rnns = [m for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    assert rnns and all(m.dropout == 0.5 for m in rnns)
    seen, forward = [], torch.nn.LSTM.forward

    def spy(self, *args, **kwargs):
        seen.append((self.training, self.dropout))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.LSTM, "forward", spy)
    torch.manual_seed(3)
    samples = model(**net, candidates=cands, sample_request=SampleRequest(torch.full((B,), 6)))[1]["samples"]
    assert seen == [(True, 0.5), (True, 0.0)]  # the CE pass with its dropout, the policy without
    assert all(m.training and m.dropout == 0.5 for m in rnns)
    samples.lprobs.sum().backward()  # what cuDNN would refuse after an eval-mode forward
    model.eval()
    with torch.no_grad():
        for b in range(B):
            steps = samples.mask[b]
            ys = samples.tokens[b][steps].tolist()
            one = {"src_tokens": src[b: b + 1, T_SRC - int(lengths[b]):], "src_lengths": lengths[b: b + 1]}
            logits = model(**one, prev_output_tokens=torch.tensor([[tgt_dict.eos()] + ys[:-1]]),
                           candidates=cands[b: b + 1])[0][0]
            logits[:, [tgt_dict.pad(), tgt_dict.bos()]] = float("-inf")
            want = F.log_softmax(logits, -1).gather(1, samples.positions[b][steps].unsqueeze(1)).squeeze(1)
            torch.testing.assert_close(samples.lprobs[b][steps].detach(), want, atol=1e-5, rtol=1e-5)


def test_models_that_cannot_be_restricted_are_named():
    model = stock("transformer", adaptive_softmax_cutoff="20,40", **TRANSFORMER)
    with pytest.raises(RestrictionError, match="arch 'transformer' uses an adaptive softmax"):
        restrict(model, "transformer")
    model = stock("transformer", **TRANSFORMER)
    model.decoder.output_layer = lambda x: torch.tanh(model.decoder.output_projection(x))  # a non-linear head
    with pytest.raises(RestrictionError, match="arch 'transformer'.*cannot be restricted.*not x W\\^T \\+ b"):
        restrict(model, "transformer")


def test_extra_special_symbols_and_language_tags():
    """A target dictionary with an extra special symbol (<mask>: nspecial = 5,
    at its own position in every row) and a language tag (an ordinary symbol,
    a candidate like any word)."""
    from fairseq_smallvocab.candidates.space import candidate_rows, check_rows

    d = Dictionary(extra_special_symbols=["<mask>"])
    tag = d.add_symbol("__de__")
    for i in range(V_TGT - len(d)):
        d.add_symbol(f"w{i}")
    assert d.nspecial == 5 and d.index("<mask>") == 4
    torch.manual_seed(0)
    model = restrict(stock("transformer", tgt_dict=d, **TRANSFORMER), "transformer").eval()
    lists = torch.stack([torch.cat([torch.tensor([tag]), 6 + torch.randperm(V_TGT - 6)[:K]]) for _ in range(B)])
    cands = torch.from_numpy(candidate_rows(lists.numpy(), K, d.nspecial, "x").astype("int64"))
    check_rows(cands, d.nspecial, len(d))
    assert cands[:, :5].tolist() == [[0, 1, 2, 3, 4]] * B and (cands[:, 5] == tag).all()
    src = torch.randint(4, V_SRC, (B, T_SRC))
    src[:, -1] = d.eos()
    prev = torch.cat([torch.full((B, 1), d.eos()), cands.gather(1, torch.randint(4, K, (B, T_TGT - 1)))], 1)
    net = {"src_tokens": src, "src_lengths": torch.full((B,), T_SRC), "prev_output_tokens": prev}
    small = model.get_normalized_probs(model(**net, candidates=cands), log_probs=True)
    want = F.log_softmax(_masked_full(model, net, cands), -1).gather(2, cands.unsqueeze(1).expand(-1, T_TGT, -1))
    torch.testing.assert_close(small, want, atol=1e-5, rtol=0)
    target = torch.full((B, 2), tag)
    assert model.get_targets({"target": target}, (None, {"candidates": [cands]})).eq(5).all()
    with pytest.raises(ValueError, match="does not start with the special symbols 0..4"):
        check_rows(cands[:, 1:], d.nspecial, len(d))


def test_mixed_precision_small_output_layer_and_reinforce():
    """--amp (autocast) and --bf16/--fp16 (fairseq converts model and criterion):
    the small output layer and smallvocab_reinforce run, values close to float32,
    and the learned baseline stays float32 and learns."""
    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )

    torch.manual_seed(0)
    model = restrict(stock("transformer", **TRANSFORMER), "transformer").train()
    tgt_dict = model.decoder.dictionary
    src = torch.randint(4, V_SRC, (B, T_SRC))
    src[:, -1] = tgt_dict.eos()
    cands = candidate_batch(K, V_TGT, bsz=B)
    tgt = cands.gather(1, torch.randint(4, K, (B, T_TGT)))
    tgt[:, -1] = tgt_dict.eos()
    prev = torch.cat([torch.full((B, 1), tgt_dict.eos()), tgt[:, :-1]], 1)
    sample = {"id": torch.arange(B), "target": tgt, "nsentences": B, "ntokens": B * T_TGT,
              "net_input": {"src_tokens": src, "src_lengths": torch.full((B,), T_SRC), "prev_output_tokens": prev,
                            "candidates": cands}}
    model.eval()
    reference = model(**sample["net_input"])[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = model(**sample["net_input"])[0]
    torch.testing.assert_close(amp.float(), reference, atol=0.15, rtol=0.05)
    task = SimpleNamespace(target_dictionary=tgt_dict, source_dictionary=model.encoder.dictionary)
    model.train()
    for precision in ("autocast", "bf16"):
        crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(max_sample_len=6))
        if precision == "bf16":  # what fairseq's trainer does with --bf16 / --fp16
            model, crit = model.to(torch.bfloat16), crit.to(torch.bfloat16)
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "autocast"):
            loss, _, log = crit(model, sample)
        loss.backward()
        assert torch.isfinite(loss) and log["baseline_mse"] > 0, precision
        assert crit.baseline.weight.dtype == torch.float32 and crit.baseline.weight.abs().sum() > 0
        weight = model.output_weights()[0]
        assert weight.grad is not None and torch.isfinite(weight.grad).all() and weight.grad.abs().sum() > 0


@pytest.mark.parametrize("overlap", [True, False])
def test_teacher_forced_union_and_per_example_rows_agree(overlap):
    """restricted_logits scores the batch union with one product when the rows
    overlap (|U| <= 2K) and each example's rows otherwise: the same logits and
    gradients either way, forced both ways."""
    import fairseq_smallvocab.output.restricted as output
    from fairseq_smallvocab.engine.settings import EngineSettings

    torch.manual_seed(0)
    weight, bias = torch.randn(V_TGT, 8, requires_grad=True), torch.randn(V_TGT, requires_grad=True)
    features = torch.randn(B, 4, 8, requires_grad=True)
    if overlap:  # every row draws from the same 30 words
        cands = candidate_batch(K, 34, bsz=B)
    else:
        cands = candidate_batch(K, V_TGT, bsz=B)
    grad = torch.randn(B, 4, K)
    results = []
    for ratio in (1e9, 0.0):  # always the union, never the union
        weight.grad = bias.grad = features.grad = None
        out = output.restricted_logits(features, weight, bias, cands, ratio)
        out.backward(grad)
        results.append((out.detach(), weight.grad.clone(), bias.grad.clone(), features.grad.clone()))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    default = EngineSettings().union_max_ratio
    assert default == output.UNION_MAX_RATIO == 2.0
    assert (len(torch.unique(cands)) <= default * K) == overlap  # the default picks the union exactly when they overlap


def test_samples_stop_at_the_decoders_learned_positions(caplog):
    """A transformer with learned positions has no position beyond
    --max-target-positions: REINFORCE's samples (default limit 100) are cut
    there, and the log says so once (an IndexError in the sampler before)."""
    import logging

    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )

    torch.manual_seed(0)
    model = restrict(stock("transformer", decoder_learned_pos=True, max_target_positions=3, **TRANSFORMER),
                     "transformer")
    tgt_dict = model.decoder.dictionary
    lengths = torch.tensor([7, 6, 5, 4, 2])
    src, prev, tgt, cands = translation_batch(lengths, T_SRC, 3, K, V_SRC, tgt_dict)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev,
                            "candidates": cands}, "target": tgt, "ntokens": int(tgt.ne(1).sum())}
    crit = SmallVocabReinforceCriterion(SimpleNamespace(target_dictionary=tgt_dict),
                                        SmallVocabReinforceConfig(rl_baseline="none"))
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            loss, _, log = crit(model.train(), sample)
            loss.backward()
    assert 0 < log["sample_len"] <= 3 * len(lengths)  # eos has a chance of 1 in 15: most samples reach the cut
    assert caplog.text.count("samples are cut at 3 tokens, the decoder's positions") == 1
