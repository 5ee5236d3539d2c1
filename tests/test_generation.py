"""Decoding inside the candidates with the plugin's LSTM (the oracle against
fairseq's stock generator on the masked full softmax, for every model family,
is in test_any_model.py): the stock path without candidates, sampling,
prefixes, and the step-wise scorer's reorderings."""

from types import SimpleNamespace

import pytest
import torch
from fairseq import search
from fairseq.sequence_generator import SequenceGenerator
from helpers import candidate_batch, make_dictionary

from fairseq_smallvocab.models.generation import SmallVocabSequenceGenerator
from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
from fairseq_smallvocab.output.union_scorer import UnionScorer

V_SRC, V_TGT, B, T_SRC, K = 30, 80, 6, 7, 20


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(1)
    src_dict, tgt_dict = make_dictionary(V_SRC), make_dictionary(V_TGT)
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
    cands = candidate_batch(K, V_TGT, bsz=B)
    sample = {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": lengths, "candidates": cands}}
    return model, tgt_dict, sample


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


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("with_bias", [True, False])
def test_union_scorer_follows_beam_reordering_and_finished_sentences(transposed, with_bias):
    """Step-wise scoring (rows of W for the union of the batch's candidates
    gathered once, each row's K picked from the union's scores) equals the
    per-row candidate logits after the generator's reorderings: beams within
    a sentence, finished sentences dropped, rows of one sentence apart; with
    the union's scores made rows x |U| or transposed (|U| x rows, the
    orientation used from ``transposed_min_rows`` rows on)."""
    torch.manual_seed(0)
    weight, bias = torch.randn(V_TGT, 8), torch.randn(V_TGT)
    if not with_bias:
        bias = torch.zeros(V_TGT)
    cands = candidate_batch(K, V_TGT, bsz=3)
    scorer = UnionScorer(weight, bias if with_bias else None, cands, 1 if transposed else 10 ** 9)
    rows = cands
    for order in ([0, 0, 1, 1, 2, 2], [1, 0, 3, 3, 4, 5], [0, 1, 4, 5], [2, 0, 1, 3]):
        order = torch.tensor(order)
        scorer.reorder(order)
        rows = rows.index_select(0, order)
        features = torch.randn(len(rows), 3, 8)[:, -1]  # a strided view, as the sampler's last step is
        want = torch.stack([weight[r] @ f + bias[r] for r, f in zip(rows, features)])
        torch.testing.assert_close(scorer(features), want)
    # several steps at once (rows x T x d) take the untransposed product
    steps = torch.randn(len(rows), 2, 8)
    want = torch.stack([torch.stack([weight[r] @ f + bias[r] for f in fs]) for r, fs in zip(rows, steps)])
    torch.testing.assert_close(scorer(steps), want)
    full = UnionScorer(weight, None, None)
    torch.testing.assert_close(full(features), features @ weight.T)


def test_a_sampling_topk_above_k_is_refused_naming_k(setup):
    model, tgt_dict, sample = setup
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=1, max_len_b=10,
                                            search_strategy=search.Sampling(tgt_dict, sampling_topk=K + 1))
    with pytest.raises(ValueError, match=rf"--sampling-topk {K + 1} is larger than the small vocabulary of each "
                                         rf"input \(K = {K}"):
        generator.generate([model], sample)
    generator.search.sampling_topk = K  # all of them: allowed
    with torch.no_grad():
        assert len(generator.generate([model], sample)) == B


def test_a_beam_the_candidates_cannot_fill_is_refused_naming_k(setup):
    """--beam 200 with K = 100 failed with fairseq's IndexError about a mask's shape."""
    model, tgt_dict, sample = setup
    for beam in (K, 2 * K):
        generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=beam, max_len_b=10)
        with pytest.raises(ValueError, match=rf"--beam {beam} is not below the small vocabulary of each input "
                                             rf"\(K = {K}.*pass --beam {K - 1} or less"):
            generator.generate([model], sample)
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=K - 1, max_len_b=10)  # the widest
    with torch.no_grad():
        assert all(len(hypos) == K - 1 for hypos in generator.generate([model], sample))


@pytest.mark.parametrize("what", ["constraints", "prefix function", "language model", "suppressed tokens"])
def test_what_candidates_cannot_serve_is_refused_when_the_generator_is_built(setup, what):
    model, tgt_dict, sample = setup
    options = {
        "constraints": {"search_strategy": search.LexicallyConstrainedBeamSearch(tgt_dict, "ordered")},
        "prefix function": {"search_strategy": search.PrefixConstrainedBeamSearch(tgt_dict, lambda b, s: [4])},
        "language model": {"lm_model": model},
        "suppressed tokens": {"tokens_to_suppress": ["w3"]},
    }[what]
    flag = {"constraints": "--constraints", "prefix function": "prefix_allowed_tokens_fn",
            "language model": "--lm-path", "suppressed tokens": "--tokens-to-suppress"}[what]
    with pytest.raises(ValueError, match=f"does not support [^;]*{flag}.*--small-vocab-size 0"):
        SmallVocabSequenceGenerator([model], tgt_dict, beam_size=2, max_len_b=10, **options)


def test_a_word_as_bos_token_is_refused(setup):
    model, tgt_dict, sample = setup
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=1, max_len_b=10)
    with pytest.raises(ValueError, match="non-special bos token"):
        generator.generate([model], sample, bos_token=tgt_dict.nspecial)
