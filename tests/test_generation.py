"""Decoding inside the candidates: the same hypotheses and scores as fairseq's
stock generator on the full softmax masked to the same candidates."""

from types import SimpleNamespace

import pytest
import torch
from fairseq import search
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from fairseq_smallvocab.generation import SmallVocabSequenceGenerator
from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel

V_SRC, V_TGT, B, T_SRC, K = 30, 80, 6, 7, 20


def _dict(n):
    d = Dictionary()
    for i in range(n - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(1)
    src_dict, tgt_dict = _dict(V_SRC), _dict(V_TGT)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    model = LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=16, dropout=0.0), task)
    with torch.no_grad():  # sharp distributions and attention, so that mistakes change the decodes
        for param in model.parameters():
            param.normal_(0, 0.6)
        model.decoder.output_bias[tgt_dict.eos()] = 2.5  # finish within max_len, so that scores compare
    model.eval()
    pad, eos = src_dict.pad(), src_dict.eos()
    lengths = torch.tensor([7, 4, 6, 2, 7, 5])
    src = torch.randint(4, V_SRC, (B, T_SRC))
    for b, n in enumerate(lengths.tolist()):
        src[b, : T_SRC - n] = pad
        src[b, -1] = eos
    cands = torch.stack([torch.cat([torch.arange(4), 4 + torch.randperm(V_TGT - 4)[: K - 4]]) for _ in range(B)])
    sample = {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": lengths, "candidates": cands}}
    return model, tgt_dict, sample


def _masked_full_output_layer(decoder):
    """The oracle's output layer: full-vocabulary logits with every
    non-candidate at -inf (the stock generator then works on target ids)."""

    def output_layer(features, candidates=None):
        logits = type(decoder).output_layer(decoder, features, None)
        keep = torch.zeros(candidates.size(0), logits.size(-1), dtype=torch.bool)
        keep.scatter_(1, candidates, True)
        return logits.masked_fill(~keep.unsqueeze(1), float("-inf"))

    return output_layer


def _decode(model, tgt_dict, sample, masked, **kw):
    if masked:
        masked_layer = _masked_full_output_layer(model.decoder)
        model.decoder.output_layer = masked_layer
        model.decoder._cached_output_layer = lambda features, candidates, state: masked_layer(features, candidates)
        generator = SequenceGenerator([model], tgt_dict, **kw)
    else:
        generator = SmallVocabSequenceGenerator([model], tgt_dict, **kw)
    try:
        with torch.no_grad():
            return generator.generate([model], sample)
    finally:
        model.decoder.__dict__.pop("output_layer", None)
        model.decoder.__dict__.pop("_cached_output_layer", None)


@pytest.mark.parametrize("options", [dict(beam_size=1), dict(beam_size=4), dict(beam_size=3, len_penalty=0.5),
                                     dict(beam_size=4, unk_penalty=1.0, min_len=3, no_repeat_ngram_size=2)])
def test_hypotheses_and_scores_equal_masked_full_softmax(setup, options):
    model, tgt_dict, sample = setup
    small = _decode(model, tgt_dict, sample, masked=False, max_len_b=12, **options)
    full = _decode(model, tgt_dict, sample, masked=True, max_len_b=12, **options)
    assert len(small) == len(full) == B
    lengths = set()
    for b, (hs, hf) in enumerate(zip(small, full)):
        assert len(hs) == len(hf) == options["beam_size"]
        for s, f in zip(hs, hf):
            assert s["tokens"].tolist() == f["tokens"].tolist(), (b, options)
            assert set(s["tokens"].tolist()) <= set(sample["net_input"]["candidates"][b].tolist())
            torch.testing.assert_close(s["score"], f["score"], atol=1e-4, rtol=0)
            torch.testing.assert_close(s["positional_scores"], f["positional_scores"], atol=1e-4, rtol=0)
            lengths.add(len(s["tokens"]))
    assert len(lengths) > 1  # hypotheses of different lengths, eos chosen at different steps


def test_without_candidates_it_is_fairseqs_generator(setup):
    model, tgt_dict, sample = setup
    plain = {"id": sample["id"], "net_input": {k: v for k, v in sample["net_input"].items() if k != "candidates"}}
    ours = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=3, max_len_b=10)
    stock = SequenceGenerator([model], tgt_dict, beam_size=3, max_len_b=10)
    with torch.no_grad():
        for a, b in zip(ours.generate([model], plain), stock.generate([model], plain)):
            assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]


def test_sampling_stays_inside_the_candidates(setup):
    model, tgt_dict, sample = setup
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=2, max_len_b=10,
                                            search_strategy=search.Sampling(tgt_dict, sampling_topk=5))
    torch.manual_seed(0)
    with torch.no_grad():
        out = generator.generate([model], sample)
    for b, hypos in enumerate(out):
        row = set(sample["net_input"]["candidates"][b].tolist())
        for hypo in hypos:
            assert set(hypo["tokens"].tolist()) <= row


def test_prefix_tokens_are_forced_and_checked(setup):
    model, tgt_dict, sample = setup
    cands = sample["net_input"]["candidates"]
    prefix = cands[:, 5:7]  # two candidate words per example
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=2, max_len_b=10)
    with torch.no_grad():
        out = generator.generate([model], sample, prefix_tokens=prefix)
    for b, hypos in enumerate(out):
        assert hypos[0]["tokens"][:2].tolist() == prefix[b].tolist()
    outside = next(t for t in range(4, V_TGT) if t not in cands[0].tolist())
    prefix = prefix.clone()
    prefix[0, 1] = outside
    with pytest.raises(ValueError, match=f"prefix token 'w{outside - 4}' .*example 0.*position 1"):
        generator.generate([model], sample, prefix_tokens=prefix)


def test_cached_candidate_rows_follow_beam_reordering_and_finished_sentences(setup):
    """The incremental output layer (rows of W_p for the union of the batch's
    candidates gathered once, each row's K picked from the union's scores)
    equals the plain output layer after the generator's reorderings: beams
    within a sentence, finished sentences dropped, rows of one sentence apart."""
    model, _, sample = setup
    decoder = model.decoder
    cands = sample["net_input"]["candidates"][:3].repeat_interleave(2, 0)  # 3 sentences x beam 2
    decoder.set_beam_size(2)
    state = {}
    d = decoder.embed_tokens.embedding_dim
    with torch.no_grad():
        for order in (None, [1, 0, 3, 3, 4, 5], [0, 1, 4, 5], [2, 0, 1, 3]):
            if order is not None:
                order = torch.tensor(order)
                decoder.reorder_incremental_state(state, order)
                cands = cands.index_select(0, order)
            features = torch.randn(len(cands), 1, d)
            torch.testing.assert_close(decoder._cached_output_layer(features, cands, state),
                                       decoder.output_layer(features, cands))
    decoder.set_beam_size(1)
