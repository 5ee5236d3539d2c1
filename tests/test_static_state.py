"""The static decoding state (reinforce/static_state.py) against fairseq's own
incremental decoding: the same decoder states, step by step, for every
Transformer family the tasks restrict, N rows per input, padded sources."""

import pytest
import torch
from test_any_model import FAMILIES, TRANSFORMER, V_SRC, _stock

from fairseq_smallvocab.reinforce.static_state import TransformerStaticState, transformer_static_state

STATIC = dict(FAMILIES, transformer_learned_pos=lambda: _stock(
    "transformer", decoder_learned_pos=True, layernorm_embedding=True, **TRANSFORMER))
TRANSFORMERS = [name for name in STATIC if name.startswith("transformer")]


def _inputs(model, n, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 6, 5, 4, 2])
    src = torch.full((len(lengths), 7), model.encoder.dictionary.pad())
    for b, length in enumerate(lengths.tolist()):  # left-padded, as fairseq's batches are
        src[b, 7 - length:] = torch.randint(4, V_SRC, (length,), generator=gen)
        src[b, -1] = model.encoder.dictionary.eos()
    encoder_out = model.encoder(src, src_lengths=lengths)
    order = torch.arange(len(lengths)).repeat_interleave(n)  # N rows per input, as the sampler makes them
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    vocab = len(model.decoder.dictionary)
    tokens = torch.randint(4, vocab, (len(order), steps), generator=gen)
    tokens[:, 0] = model.decoder.dictionary.eos()
    return encoder_out, tokens


@pytest.mark.parametrize("name", TRANSFORMERS)
@pytest.mark.parametrize("n", [1, 3])
@torch.no_grad()
def test_static_steps_give_fairseqs_incremental_states(name, n):
    torch.manual_seed(0)
    model = STATIC[name]().eval()
    for param in model.parameters():  # away from the initialization's near-uniform attention
        param.normal_(0, 0.5)
    steps = 6
    encoder_out, tokens = _inputs(model, n, steps)
    static = transformer_static_state(model.decoder, encoder_out, steps)
    assert isinstance(static, TransformerStaticState)
    state = {}
    for t in range(steps):
        want, _ = model.decoder.extract_features(tokens[:, : t + 1], encoder_out, incremental_state=state)
        got = static.step(tokens[:, t], t)
        torch.testing.assert_close(got, want[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", [name for name in STATIC if name not in TRANSFORMERS])
def test_other_decoders_keep_fairseqs_incremental_state(name):
    model = STATIC[name]().eval()
    encoder_out = model.encoder(torch.tensor([[5, 6, 2]]), src_lengths=torch.tensor([3]))
    assert transformer_static_state(model.decoder, encoder_out, 4) is None


def test_a_transformer_option_the_static_step_does_not_follow_keeps_fairseqs_state():
    model = _stock("transformer", cross_self_attention=True, **TRANSFORMER).eval()
    encoder_out = model.encoder(torch.tensor([[5, 6, 2]]), src_lengths=torch.tensor([3]))
    assert transformer_static_state(model.decoder, encoder_out, 4) is None
