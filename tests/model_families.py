"""The model families the tests build (every fairseq encoder-decoder family the tasks restrict, tiny), their
inputs and a batch to train them on: shared by the oracle tests of the model, the sampler, the device modes
and the criterion.

- ``FAMILIES``: the plugin's LSTM and fairseq's ``lstm`` / ``transformer`` variants; ``STATIC``: those and the
  variants the static sampling state follows besides (learned positions, a bidirectional encoder, the
  captioning LSTM); ``TRANSFORMERS``: its Transformers;
- ``stock``: a registered fairseq arch built as fairseq-train builds it;
- ``encoder_inputs``: an encoder output and random target prefixes, N rows per input;
- ``family_setup``: (model, task, sample) of one family, restricted, eos likely enough that samples end at
  different steps;
- ``raise_eos``: eos's logit up a notch.
"""

import argparse
from types import SimpleNamespace

import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from helpers import make_dictionary, translation_batch

import fairseq_smallvocab  # noqa: F401  (registers the plugin's models)
from fairseq_smallvocab.models.lstm_caption_smallvocab import (
    CaptionFeatureEncoder,
    LSTMCaptionSmallVocabConfig,
    LSTMCaptionSmallVocabModel,
)
from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
from fairseq_smallvocab.models.restricted import restrict

V_SRC, V_TGT, B, T_SRC, T_TGT, K, D = 30, 70, 5, 7, 6, 18, 16


def stock(arch, tgt_dict=None, **overrides):
    """A model of a registered fairseq arch, built as fairseq-train builds it
    (--share-all-embeddings: one dictionary for both sides)."""
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    tgt_dict = tgt_dict or make_dictionary(V_TGT)
    src_dict = tgt_dict if overrides.get("share_all_embeddings") else make_dictionary(V_SRC)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


TRANSFORMER = dict(encoder_embed_dim=D, decoder_embed_dim=D, encoder_ffn_embed_dim=2 * D,
                   decoder_ffn_embed_dim=2 * D, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                   decoder_attention_heads=2, dropout=0.1)
LSTM = dict(encoder_embed_dim=D, encoder_hidden_size=D, decoder_embed_dim=D, decoder_hidden_size=D,
            decoder_out_embed_dim=D, dropout=0.1, criterion="cross_entropy")

FAMILIES = {
    "lstm_smallvocab": lambda: LSTMSmallVocabModel.build_model(
        LSTMSmallVocabConfig(embed_dim=D, layers=2, dropout=0.1),
        SimpleNamespace(source_dictionary=make_dictionary(V_SRC), target_dictionary=make_dictionary(V_TGT))),
    "lstm": lambda: stock("lstm", **LSTM),
    "lstm_tied": lambda: stock("lstm", share_decoder_input_output_embed=True, **LSTM),
    "transformer": lambda: stock("transformer", share_decoder_input_output_embed=True, **TRANSFORMER),
    "transformer_prenorm": lambda: stock("transformer", encoder_normalize_before=True,
                                          decoder_normalize_before=True, **TRANSFORMER),
    "transformer_output_dim": lambda: stock("transformer", decoder_output_dim=12, **TRANSFORMER),
    "transformer_shared_all": lambda: stock("transformer", share_all_embeddings=True, **TRANSFORMER),
}


@torch.no_grad()
def raise_eos(model, mean):
    """eos's logit up by 0.5: through the output bias where the model has one, else along ``mean`` (the
    decoder states' mean direction)."""
    weight, bias = model.output_weights()
    eos = model.decoder.dictionary.eos()
    if bias is not None:
        bias[eos] += 0.5
    else:
        weight[eos] += 0.5 * mean / mean.pow(2).sum()


def caption_model():
    task = SimpleNamespace(target_dictionary=make_dictionary(54), feature_dim=20)
    return LSTMCaptionSmallVocabModel.build_model(LSTMCaptionSmallVocabConfig(embed_dim=12, layers=2, dropout=0.1),
                                                  task)


STATIC = dict(FAMILIES, transformer_learned_pos=lambda: stock(
    "transformer", decoder_learned_pos=True, layernorm_embedding=True, **TRANSFORMER),
    lstm_bidirectional=lambda: stock("lstm", encoder_bidirectional=True, **LSTM),  # h_0 and c_0 projected
    lstm_caption_smallvocab=caption_model)
TRANSFORMERS = [name for name in STATIC if name.startswith("transformer")]


def encoder_inputs(model, n, steps, seed=0, width=7):
    """(encoder_out, B x steps random target prefixes) for 5 inputs of N rows each, sources of at most
    ``width`` tokens, on the model's device."""
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    lengths = torch.tensor([7, 6, 5, 4, 2]).clamp(max=width)  # sorted: fairseq's lstm encoder needs it
    if isinstance(model.encoder, CaptionFeatureEncoder):
        encoder_out = model.encoder(torch.randn(len(lengths), 20, generator=gen).to(device))
    else:
        src = torch.full((len(lengths), width), model.encoder.dictionary.pad())
        for b, length in enumerate(lengths.tolist()):  # left-padded, as fairseq's batches are
            src[b, width - length:] = torch.randint(4, V_SRC, (length,), generator=gen)
            src[b, -1] = model.encoder.dictionary.eos()
        encoder_out = model.encoder(src.to(device), src_lengths=lengths.to(device))
    order = torch.arange(len(lengths), device=device).repeat_interleave(n)  # N rows per input, as the sampler
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    vocab = len(model.decoder.dictionary)
    tokens = torch.randint(4, vocab, (len(order), steps), generator=gen).to(device)
    tokens[:, 0] = model.decoder.dictionary.eos()
    return encoder_out, tokens


def family_setup(name, seed=0, copies=1, small=False):
    """(model, task, sample) of one model family, the full softmax (no candidates; with ``small``, K
    candidates per example), eos likely enough that samples end at different steps; ``copies`` times 5
    examples."""
    torch.manual_seed(seed)
    model = restrict(FAMILIES[name](), name)
    with torch.no_grad():
        for pname, param in model.named_parameters():
            if "lstm" in name:
                param.normal_(0, 0.5)
            elif "embed_tokens" in pname or "output_projection" in pname:
                param.mul_(4.0)
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    lengths = torch.tensor([7, 6, 5, 4, 2]).repeat_interleave(copies)  # sorted, as fairseq's lstm encoder needs
    src, prev, tgt, cands = translation_batch(lengths, T_SRC, T_TGT, K, V_SRC, tgt_dict)
    net = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    model.eval()
    mean = model(**net, features_only=True)[0].mean((0, 1)).detach()
    for _ in range(3):
        raise_eos(model, mean)
    if small:
        net["candidates"] = cands
    task = type("Task", (), {"source_dictionary": src_dict, "target_dictionary": tgt_dict})()
    sample = {"id": torch.arange(len(lengths)), "net_input": net, "target": tgt, "nsentences": len(lengths),
              "ntokens": int(tgt.ne(tgt_dict.pad()).sum())}
    return model.train(), task, sample
