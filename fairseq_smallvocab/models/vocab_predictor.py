"""The vocabulary predictor (Hashimoto & Tsuruoka 2019, section 3 and
supplementary A): which target words will the output use, given the input?

    v = mean of the source words' embeddings       (text input; its own embeddings)
      = W_v f + b_v                                (an image feature f)
    r = v + W_2 dropout(tanh(BN(W_1 tanh(BN(v)) + b_1))) + b_2      (one residual block)
    o = sigmoid(W_o r + b_o)                       (one probability per target word)

Initialization as the paper's code: embeddings and hidden weights uniform in
[-0.1, 0.1], biases 0, batch normalization without learned scale and shift,
and the output layer at 0 (every word starts at probability 0.5).
"""

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model

from fairseq_smallvocab.data.datasets import dictionary_fingerprint
from fairseq_smallvocab.models.checks import check_model_config

INIT_SCALE = 0.1


@dataclass
class VocabPredictorConfig(FairseqDataclass):
    embed_dim: int = field(default=512, metadata={"help": "d_v: embedding and hidden size"})
    dropout: float = field(default=0.4, metadata={"help": "dropout inside the residual block"})


class _BatchNorm(nn.BatchNorm1d):
    """BatchNorm without affine parameters that also accepts a training batch
    of one example (it then normalizes with the running statistics)."""

    def __init__(self, dim):
        super().__init__(dim, affine=False)

    def forward(self, x):
        if self.training and x.size(0) == 1:
            return F.batch_norm(x, self.running_mean, self.running_var, training=False, eps=self.eps)
        return super().forward(x)


class ResidualBlock(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.bn1, self.bn2 = _BatchNorm(dim), _BatchNorm(dim)
        self.linear1, self.linear2 = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        for linear in (self.linear1, self.linear2):
            nn.init.uniform_(linear.weight, -INIT_SCALE, INIT_SCALE)
            nn.init.zeros_(linear.bias)

    def forward(self, x):
        h = self.linear1(torch.tanh(self.bn1(x)))
        h = self.linear2(self.dropout(torch.tanh(self.bn2(h))))
        return x + h


@register_model("vocab_predictor", dataclass=VocabPredictorConfig)
class VocabPredictor(BaseFairseqModel):
    """Returns one logit per target word; ``predict`` gives probabilities.
    (A model with a dataclass config is also its own ``--arch``.)"""

    def __init__(self, cfg: VocabPredictorConfig, target_vocab_size: int, source_dict=None, feature_dim=None):
        super().__init__()
        if (source_dict is None) == (feature_dim is None):
            raise ValueError("a vocabulary predictor reads either source words or image features")
        dim = cfg.embed_dim
        if source_dict is not None:
            self.embed = nn.Embedding(len(source_dict), dim, padding_idx=source_dict.pad())
            nn.init.uniform_(self.embed.weight, -INIT_SCALE, INIT_SCALE)
            self.embed.weight.data[source_dict.pad()].zero_()
            self.ignore_ids = (source_dict.pad(), source_dict.eos(), source_dict.bos())
            self.feature_proj = None
        else:
            self.embed = None
            self.feature_proj = nn.Linear(feature_dim, dim)
            nn.init.uniform_(self.feature_proj.weight, -INIT_SCALE, INIT_SCALE)
            nn.init.zeros_(self.feature_proj.bias)
        self.block = ResidualBlock(dim, cfg.dropout)
        self.output = nn.Linear(dim, target_vocab_size)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)
        # p(i), the fraction of training examples whose target contains word i
        # (label smoothing target), and which target dictionary the model was
        # trained with: both saved with the model
        self.register_buffer("prior", torch.zeros(target_vocab_size))
        self.register_buffer("target_dict_hash", torch.zeros(1, dtype=torch.long))

    @classmethod
    def build_model(cls, cfg, task):
        check_model_config(cfg)
        if not hasattr(task, "uses_features"):  # e.g. a predictor checkpoint given to fairseq-generate --path
            raise ValueError(
                f"a vocabulary predictor (arch vocab_predictor) was given where a translation or captioning model "
                f"is expected (task {type(task).__name__}): it predicts candidate words and cannot generate "
                "sentences. Give it to --vocab-predictor, and the generator's checkpoint to --path.")
        feature_dim = task.feature_dim if task.uses_features else None
        source_dict = None if task.uses_features else task.source_dictionary
        model = cls(cfg, len(task.target_dictionary), source_dict=source_dict, feature_dim=feature_dim)
        model.target_dict_hash.fill_(dictionary_fingerprint(task.target_dictionary))
        return model

    @property
    def uses_features(self):
        return self.feature_proj is not None

    def encode_input(self, src_tokens=None, features=None):
        """v(X): the mean embedding of the source words (pad, eos and bos
        left out; an empty source gives the zero vector), or W_v f + b_v."""
        if self.uses_features:
            if features is None:
                raise ValueError("this predictor was trained on image features; the batch has none")
            return self.feature_proj(features)
        if src_tokens is None:
            raise ValueError("this predictor reads source sentences; the batch has no src_tokens")
        keep = torch.ones_like(src_tokens, dtype=torch.bool)
        for idx in self.ignore_ids:
            keep &= src_tokens.ne(idx)
        summed = (self.embed(src_tokens) * keep.unsqueeze(-1)).sum(1)
        return summed / keep.sum(1, keepdim=True).clamp(min=1)

    def forward(self, src_tokens=None, src_lengths=None, features=None, **unused):
        return self.output(self.block(self.encode_input(src_tokens, features)))

    @torch.no_grad()
    def predict(self, src_tokens=None, src_lengths=None, features=None, **unused):
        """Probabilities o (B x |V|), without gradients; call ``eval()`` first
        for predictions (dropout and batch statistics off)."""
        return torch.sigmoid(self.forward(src_tokens, src_lengths, features))

    def set_prior(self, prior):
        self.prior.copy_(torch.as_tensor(prior, dtype=self.prior.dtype))

    def max_positions(self):
        return None

