"""``lstm_smallvocab``: the paper's attentional LSTM encoder-decoder whose output
layer can be restricted, per example, to a small candidate vocabulary.

Encoder: embeddings, a bidirectional LSTM (d units per direction).  Decoder
(Luong et al. 2015, global "general" attention, input feeding):

    h_t = LSTM([emb(y_{t-1}); s_{t-1}], h_{t-1}),   h_0 = forward last + backward first state
    a_t = softmax_j(h_t . W_a e_j),  c_t = sum_j a_tj e_j
    s_t = tanh(W_s [h_t; c_t] + b_s)
    logits_t = W_p s_t + b_p

W_p is tied to the target embedding.  The output layer is a plain linear map
over the whole vocabulary; ``translation_smallvocab`` restricts it to each
example's K candidates as it does for any fairseq model
(``models.restricted``, ``output/restricted.py``).  This file holds the
architecture only.

Initialization as the paper's code: weights uniform in [-0.1, 0.1], biases 0,
LSTM forget-gate biases 1, the attention matrix 0.
"""

from dataclasses import dataclass, field
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from torch import Tensor

from fairseq_smallvocab.engine import families
from fairseq_smallvocab.engine.families import EncoderParts, Part
from fairseq_smallvocab.engine.recurrent_state import RecurrentStaticState
from fairseq_smallvocab.models.checks import check_model_config
from fairseq_smallvocab.models.recorded import TaskRecords

INIT_SCALE = 0.1


@dataclass
class LSTMSmallVocabConfig(TaskRecords):
    embed_dim: int = field(default=256, metadata={"help": "d: embeddings, LSTM units (per direction), s_t"})
    layers: int = field(default=1, metadata={"help": "LSTM layers in the encoder and in the decoder"})
    dropout: float = field(default=0.2, metadata={"help": "dropout on embeddings, [h_t; c_t] and s_t"})
    max_source_positions: int = field(default=1024, metadata={"help": "longest source"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest target"})


def _init_lstm(weights: Dict[str, Tensor], hidden: int):
    for name, param in weights.items():
        if "weight" in name:
            nn.init.uniform_(param, -INIT_SCALE, INIT_SCALE)
        else:
            nn.init.zeros_(param)
            if name.startswith("bias_hh"):
                param.data[hidden:2 * hidden].fill_(1.0)  # forget gate (PyTorch order i, f, g, o)


class SmallVocabEncoder(FairseqEncoder):
    def __init__(self, dictionary, embed_dim, layers, dropout, max_positions):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.uniform_(self.embed_tokens.weight, -INIT_SCALE, INIT_SCALE)
        self.lstm = nn.LSTM(embed_dim, embed_dim, num_layers=layers, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
        _init_lstm(dict(self.lstm.named_parameters()), embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.layers = layers
        self.max_positions_ = max_positions

    def forward(self, src_tokens, src_lengths, **unused):
        # fairseq pads sources on the left by default; the LSTM wants them on the right
        src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        bsz, seqlen = src_tokens.size()
        x = self.dropout(self.embed_tokens(src_tokens)).transpose(0, 1)  # T x B x d
        packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, padding_value=0.0, total_length=seqlen)
        # decoder h_0 per layer: forward direction's last state + backward's first
        h = h.view(self.layers, 2, bsz, -1).sum(1)
        c = c.view(self.layers, 2, bsz, -1).sum(1)
        return {"encoder_out": [out],  # T x B x 2d
                "encoder_padding_mask": [src_tokens.eq(self.padding_idx)],  # B x T
                "final_hidden": [h], "final_cell": [c]}  # layers x B x d

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        return {"encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
                "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
                "final_hidden": [encoder_out["final_hidden"][0].index_select(1, new_order)],
                "final_cell": [encoder_out["final_cell"][0].index_select(1, new_order)]}

    def max_positions(self):
        return self.max_positions_


class TiedOutputDecoder(FairseqIncrementalDecoder):
    """What the plugin's LSTM decoders share: a target embedding tied to the
    output layer (W_p = the embedding; bias b_p), logits = W_p s_t + b_p over
    the whole vocabulary (the tasks restrict it to each example's candidates:
    ``output.restricted``), and incremental-decoding caches.
    Subclasses give ``extract_features`` (the states s_t) and list the batch
    dimension of each tensor they cache under "state" in ``STATE_BATCH_DIMS``."""

    STATE_BATCH_DIMS: Dict[str, int] = {}

    def __init__(self, dictionary, embed_dim, dropout, max_positions):
        super().__init__(dictionary)
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=dictionary.pad())
        nn.init.uniform_(self.embed_tokens.weight, -INIT_SCALE, INIT_SCALE)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))  # b_p; W_p is embed_tokens.weight
        self.dropout = nn.Dropout(dropout)
        self.max_positions_ = max_positions

    def forward(self, prev_output_tokens, encoder_out, incremental_state=None, features_only=False, **unused):
        s, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return (s if features_only else self.output_layer(s)), {"attn": [attn]}

    def output_layer(self, features):
        """Logits over the whole vocabulary: W_p s_t + b_p."""
        return F.linear(features, self.embed_tokens.weight, self.output_bias)

    def reorder_incremental_state(self, incremental_state, new_order):
        cached = self.get_incremental_state(incremental_state, "state")
        if cached is None:
            return
        self.set_incremental_state(incremental_state, "state", {
            key: value.index_select(self.STATE_BATCH_DIMS[key], new_order) for key, value in cached.items()})

    def max_positions(self):
        return self.max_positions_


class SmallVocabDecoder(TiedOutputDecoder):
    """The attentional decoder (global attention, input feeding)."""

    STATE_BATCH_DIMS = {"h": 1, "c": 1, "feed": 0, "keys": 0}

    def __init__(self, dictionary, embed_dim, layers, dropout, max_positions):
        super().__init__(dictionary, embed_dim, dropout, max_positions)
        d = embed_dim
        self.cells = nn.ModuleList([nn.LSTMCell(2 * d if i == 0 else d, d) for i in range(layers)])
        for cell in self.cells:
            _init_lstm(dict(cell.named_parameters()), d)
        self.attention = nn.Linear(2 * d, d, bias=False)  # W_a, applied to the encoder states
        nn.init.zeros_(self.attention.weight)
        self.combine = nn.Linear(3 * d, d)  # W_s, b_s
        nn.init.uniform_(self.combine.weight, -INIT_SCALE, INIT_SCALE)
        nn.init.zeros_(self.combine.bias)

    def attention_step(self, x: Tensor, hs: List[Tensor], cs: List[Tensor], feed: Tensor, keys: Tensor,
                       values: Tensor, mask: Tensor):
        """One step: the embedded token ``x`` (B x d) and the last input feed through the LSTM layers (h, c
        of each in ``hs``, ``cs``), global attention over the source (``keys``: B x d x T_src, W_a e_j;
        ``values``: B x T_src x 2d; ``mask``: True at padding), and the new feed s_t.  Returns the layers'
        new (hs, cs), s_t (B x d) and the attention (B x T_src).  The model's passes and REINFORCE's static
        state (``PaperLSTMState``) both run it."""
        inp = torch.cat([x, feed], dim=1)
        hs, cs = list(hs), list(cs)
        for i, cell in enumerate(self.cells):
            hs[i], cs[i] = cell(inp, (hs[i], cs[i]))
            inp = self.dropout(hs[i]) if i + 1 < len(self.cells) else hs[i]
        h = hs[-1]
        scores = torch.bmm(h.unsqueeze(1), keys).squeeze(1).masked_fill(mask, float("-inf"))
        a = F.softmax(scores.float(), dim=-1).type_as(scores)  # B x T_src
        ctx = torch.bmm(a.unsqueeze(1), values).squeeze(1)  # B x 2d
        feed = self.dropout(torch.tanh(self.combine(self.dropout(torch.cat([h, ctx], dim=1)))))
        return hs, cs, feed, a

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """s_t for every step: B x T x d (and the attention, B x T x T_src)."""
        enc = encoder_out["encoder_out"][0]  # T_src x B x 2d
        mask = encoder_out["encoder_padding_mask"][0]  # B x T_src
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        bsz, steps = prev_output_tokens.size()
        cached = self.get_incremental_state(incremental_state, "state") if incremental_state is not None else None
        if cached is not None:
            hs, cs, feed = list(cached["h"].unbind(0)), list(cached["c"].unbind(0)), cached["feed"]
            keys = cached["keys"]  # computed at the first step, not again at every step
        else:
            hs = list(encoder_out["final_hidden"][0].unbind(0))
            cs = list(encoder_out["final_cell"][0].unbind(0))
            feed = enc.new_zeros(bsz, self.combine.out_features)
            keys = self.attention(enc).permute(1, 2, 0)  # B x d x T_src: W_a e_j
        values = enc.transpose(0, 1)  # B x T_src x 2d
        x = self.dropout(self.embed_tokens(prev_output_tokens))  # B x T x d
        outs, attns = [], []
        for t in range(steps):
            hs, cs, feed, a = self.attention_step(x[:, t], hs, cs, feed, keys, values, mask)
            outs.append(feed)
            attns.append(a)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "state",
                                       {"h": torch.stack(hs), "c": torch.stack(cs), "feed": feed, "keys": keys})
        return torch.stack(outs, dim=1), torch.stack(attns, dim=1)


class PaperLSTMState(RecurrentStaticState):
    """REINFORCE's decoding state for the paper's decoder (``engine.recurrent_state``): the attention's keys
    projected once, each step ``SmallVocabDecoder.attention_step``."""

    def load(self, encoder_out):
        d = self.decoder
        enc = encoder_out["encoder_out"][0]  # S x rows x 2d
        self.hs = list(self._put("h", encoder_out["final_hidden"][0], 1).unbind(0))
        self.cs = list(self._put("c", encoder_out["final_cell"][0], 1).unbind(0))
        self.feed = self._put("feed", enc.new_zeros(enc.size(1), d.combine.out_features), 0)
        self.keys = self._put("keys", d.attention(enc).permute(1, 2, 0), 0, 2)  # rows x d x S: W_a e_j, once
        self.values = self._put("values", enc.transpose(0, 1), 0, 1)
        self.mask = self._pad_mask("mask", encoder_out["encoder_padding_mask"][0], 0, 1)

    def step(self, tokens: Tensor, t) -> Tensor:
        d = self.decoder
        hs, cs, feed, _ = d.attention_step(d.dropout(d.embed_tokens(tokens)), self.hs, self.cs, self.feed,
                                           self.keys, self.values, self.mask)
        self._set_layers(hs, cs)
        self._set("feed", feed)
        return feed


class PaperLSTMFamily(families.DecoderFamily):
    """The paper's attentional decoder for the engine: recurrent, its static state and its graphed pass."""

    recurrent = True
    parts = EncoderParts([Part(1, 0), Part(0, 1, mask=True), Part(1), Part(1)],
                         lambda out: [out["encoder_out"][0], out["encoder_padding_mask"][0], out["final_hidden"][0],
                                      out["final_cell"][0]],
                         lambda parts: {"encoder_out": [parts[0]], "encoder_padding_mask": [parts[1]],
                                        "final_hidden": [parts[2]], "final_cell": [parts[3]]})

    decoder_class, state_class = SmallVocabDecoder, PaperLSTMState


families.register(PaperLSTMFamily())


@register_model("lstm_smallvocab", dataclass=LSTMSmallVocabConfig)
class LSTMSmallVocabModel(FairseqEncoderDecoderModel):
    """The paper's 1-layer d = 256 model (arch ``lstm_smallvocab``; a model with a
    dataclass config is also its own arch); ``lstm_smallvocab_big``: 2 layers,
    d = 512."""

    @classmethod
    def build_model(cls, cfg, task):
        check_model_config(cfg)
        encoder = SmallVocabEncoder(task.source_dictionary, cfg.embed_dim, cfg.layers, cfg.dropout,
                                    cfg.max_source_positions)
        decoder = SmallVocabDecoder(task.target_dictionary, cfg.embed_dim, cfg.layers, cfg.dropout,
                                    cfg.max_target_positions)
        return cls(encoder, decoder)


@register_model_architecture("lstm_smallvocab", "lstm_smallvocab_big")
def lstm_smallvocab_big(cfg):
    cfg.embed_dim = getattr(cfg, "embed_dim", 512)
    cfg.layers = getattr(cfg, "layers", 2)
