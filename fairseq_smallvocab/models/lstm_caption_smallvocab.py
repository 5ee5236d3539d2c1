"""``lstm_caption_smallvocab``: the paper's image-captioning LSTM, whose output
layer can be restricted, per example, to a small candidate vocabulary.

An image is a feature vector f (d_f values, e.g. 4096 from a CNN).  The
decoder, without attention and without input feeding:

    h_0 = tanh(W_f f + b_f),   c_0 = tanh(W_c f + b_c)      (per LSTM layer)
    h_t = LSTM(emb(y_{t-1}), h_{t-1})
    logits_t = W_p h_t + b_p

W_p is tied to the target embedding, as in ``lstm_smallvocab``
(``TiedOutputDecoder``); ``captioning_smallvocab`` restricts the output layer
to each image's K candidates as for any model (``models.restricted``), so
REINFORCE (``smallvocab_reinforce``) and decoding inside the predicted vocabulary
work unchanged.  Dropout on the word embeddings, between layers and on h_t
before the output layer.  (c_0 from the image too, as in Xu et al.'s "Show,
Attend and Tell": with c_0 = 0 the image reaches the cell only through the
first step's gates, and on the synthetic set the captioner then learned
counts but not which objects an image shows.)
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, register_model
from torch import Tensor

from fairseq_smallvocab.engine import families
from fairseq_smallvocab.engine.recurrent_state import RecurrentStaticState
from fairseq_smallvocab.models.checks import check_model_config
from fairseq_smallvocab.models.lstm_smallvocab import INIT_SCALE, TiedOutputDecoder, _init_lstm
from fairseq_smallvocab.models.recorded import TaskRecords


@dataclass
class LSTMCaptionSmallVocabConfig(TaskRecords):
    embed_dim: int = field(default=256, metadata={"help": "d: word embeddings and LSTM units"})
    layers: int = field(default=1, metadata={"help": "LSTM layers"})
    dropout: float = field(default=0.2, metadata={"help": "dropout on embeddings, between layers and on h_t"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest caption"})
    feature_dim: Optional[int] = field(
        default=None, metadata={"help": "d_f, the image feature size (default: the task's, i.e. the data's)"})


class CaptionFeatureEncoder(FairseqEncoder):
    """f -> the decoder's initial state per layer: h_0 = tanh(W_f f + b_f),
    c_0 = tanh(W_c f + b_c) (one linear map for both)."""

    def __init__(self, feature_dim: int, embed_dim: int, layers: int):
        super().__init__(None)
        self.feature_dim, self.embed_dim, self.layers = feature_dim, embed_dim, layers
        self.feature_proj = nn.Linear(feature_dim, 2 * layers * embed_dim)  # [W_f; W_c], [b_f; b_c]
        nn.init.uniform_(self.feature_proj.weight, -INIT_SCALE, INIT_SCALE)
        nn.init.zeros_(self.feature_proj.bias)

    def forward(self, features, **unused):
        if features.dim() != 2 or features.size(1) != self.feature_dim:
            raise ValueError(f"image features of shape {tuple(features.shape)}; this model reads B x "
                             f"{self.feature_dim} features (d_f it was trained with): use features from the "
                             "same extractor as the training data")
        state = torch.tanh(self.feature_proj(features)).view(features.size(0), 2, self.layers, self.embed_dim)
        h, c = (x.transpose(0, 1).contiguous() for x in state.unbind(1))  # layers x B x d each
        return {"final_hidden": [h], "final_cell": [c]}

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        return {"final_hidden": [encoder_out["final_hidden"][0].index_select(1, new_order)],
                "final_cell": [encoder_out["final_cell"][0].index_select(1, new_order)]}

    def max_positions(self):
        return None


class CaptionDecoder(TiedOutputDecoder):
    """An LSTM over the caption's words, started from the image's h_0."""

    STATE_BATCH_DIMS = {"h": 1, "c": 1}

    def __init__(self, dictionary, embed_dim, layers, dropout, max_positions):
        super().__init__(dictionary, embed_dim, dropout, max_positions)
        self.lstm = nn.LSTM(embed_dim, embed_dim, num_layers=layers, dropout=dropout if layers > 1 else 0.0)
        _init_lstm(dict(self.lstm.named_parameters()), embed_dim)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """h_t for every step (B x T x d, after dropout), and no attention."""
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        cached = self.get_incremental_state(incremental_state, "state") if incremental_state is not None else None
        if cached is not None:
            h, c = cached["h"], cached["c"]
        else:
            h, c = encoder_out["final_hidden"][0], encoder_out["final_cell"][0]
        x = self.dropout(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # T x B x d
        out, (h, c) = self.lstm(x, (h, c))
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "state", {"h": h, "c": c})
        return self.dropout(out.transpose(0, 1)), None


class CaptionState(RecurrentStaticState):
    """REINFORCE's decoding state for the captioning LSTM (``engine.recurrent_state``): h and c only."""

    def load(self, encoder_out):
        self.h = self._put("h", encoder_out["final_hidden"][0], 1)
        self.c = self._put("c", encoder_out["final_cell"][0], 1)

    def step(self, tokens: Tensor, t) -> Tensor:
        d = self.decoder
        out, (h, c) = d.lstm(d.dropout(d.embed_tokens(tokens)).unsqueeze(0), (self.h, self.c))
        self._set("h", h)
        self._set("c", c)
        return d.dropout(out[0])


class CaptionFamily(families.DecoderFamily):
    """The captioning LSTM for the engine: recurrent, a static state; no graphed pass (its teacher-forced
    pass is one ``nn.LSTM`` call over all steps: nothing to gain)."""

    recurrent = True

    decoder_class, state_class = CaptionDecoder, CaptionState


families.register(CaptionFamily())


@register_model("lstm_caption_smallvocab", dataclass=LSTMCaptionSmallVocabConfig)
class LSTMCaptionSmallVocabModel(FairseqEncoderDecoderModel):
    """The paper's captioning model (1 layer, d = 256 by default; a model with
    a dataclass config is also its own arch)."""

    @classmethod
    def build_model(cls, cfg, task):
        check_model_config(cfg)
        feature_dim = cfg.feature_dim or getattr(task, "feature_dim", None)
        if not feature_dim:
            raise ValueError("lstm_caption_smallvocab needs the image feature size: train it with "
                             "--task captioning_smallvocab (which reads it from the data) or give --feature-dim")
        encoder = CaptionFeatureEncoder(int(feature_dim), cfg.embed_dim, cfg.layers)
        decoder = CaptionDecoder(task.target_dictionary, cfg.embed_dim, cfg.layers, cfg.dropout,
                                 cfg.max_target_positions)
        return cls(encoder, decoder)

    def forward(self, features, prev_output_tokens, **kwargs):
        """Teacher-forced decoder output."""
        return self.decoder(prev_output_tokens, self.encoder(features))

    def max_positions(self):
        return self.decoder.max_positions()
