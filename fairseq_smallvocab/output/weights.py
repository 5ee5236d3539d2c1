"""Where a decoder keeps its linear output layer: ``find_output_weights``
discovers W and b (logits = W s_t + b over the target vocabulary V:
``output_projection`` of a Transformer, with W the target embedding when
embeddings are tied; ``fc_out`` or the tied embedding of fairseq's ``lstm``;
the target embedding and ``output_bias`` of the plugin's LSTMs) and checks, on
random features, that the decoder's ``output_layer`` is exactly that linear
map.  A model whose output cannot be restricted (adaptive softmax, a
non-linear head, no incremental decoder) is refused, naming the arch and the
reason.  ``eval_mode`` is how that check (and the restricted model's policy)
runs a module without dropout.
"""

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor, nn


class RestrictionError(ValueError):
    """A model whose output layer cannot be restricted to candidates."""


@dataclass(frozen=True)
class OutputWeights:
    """Where a decoder keeps W and b: parameter names inside the decoder
    (looked up at every use, so that ``.to()``, ``.half()`` and loading a
    state dict are always seen)."""

    weight: str
    bias: Optional[str] = None

    def get(self, decoder) -> Tuple[Tensor, Optional[Tensor]]:
        return (decoder.get_parameter(self.weight),
                None if self.bias is None else decoder.get_parameter(self.bias))


# where stock fairseq decoders and the plugin's keep their output layer, most specific first
_WEIGHT_NAMES = ("output_projection.weight", "fc_out.weight", "embed_tokens.weight")


def _named(decoder, name) -> Optional[Tensor]:
    try:
        return decoder.get_parameter(name)
    except AttributeError:
        return None


def find_output_weights(decoder, arch: str) -> OutputWeights:
    """W and b of ``decoder.output_layer``, checked to be that layer: on
    random features, ``output_layer(x) == x W^T + b``."""
    if not isinstance(decoder, FairseqIncrementalDecoder):
        raise RestrictionError(f"arch '{arch}': its decoder ({type(decoder).__name__}) is not an incremental "
                               "decoder (FairseqIncrementalDecoder), so it cannot sample or decode step by step "
                               "inside a small vocabulary")
    if getattr(decoder, "adaptive_softmax", None) is not None:
        raise RestrictionError(f"arch '{arch}' uses an adaptive softmax, which has no output row per word for "
                               "its tail clusters: train it without --adaptive-softmax-cutoff to use a small "
                               "vocabulary")
    vocab = len(decoder.dictionary)
    tried = []
    for weight_name in _WEIGHT_NAMES:
        weight = _named(decoder, weight_name)
        if weight is None or weight.dim() != 2 or weight.size(0) != vocab:
            continue
        module = weight_name.rsplit(".", 1)[0]
        biases = [name for name in (f"{module}.bias", "output_bias") if _named(decoder, name) is not None]
        for bias_name in biases + [None]:
            spec = OutputWeights(weight_name, bias_name)
            tried.append(f"{weight_name}{' + ' + bias_name if bias_name else ''}")
            if _is_output_layer(decoder, spec):
                return spec
    detail = f"it is not x W^T + b with {' or '.join(tried)}" if tried else \
        f"no {' / '.join(_WEIGHT_NAMES)} parameter with one row per target word ({vocab})"
    raise RestrictionError(f"arch '{arch}': the decoder's output layer cannot be restricted to candidates: "
                           f"{detail} (a small vocabulary needs a linear output layer over the target dictionary)")


@contextmanager
def eval_mode(module):
    """Every submodule computes as in eval mode inside the block (no dropout,
    no LayerDrop), its own flag restored after.

    PyTorch's recurrent layers (``nn.LSTM``, ``nn.GRU``, ...) are the
    exception in form, not in effect: they stay in training mode with their
    inter-layer dropout set to 0, which computes exactly what eval mode
    computes (that dropout is their only train/eval difference), because
    cuDNN refuses the backward of an RNN run in eval mode ("cudnn RNN
    backward can only be called in training mode"), and REINFORCE
    differentiates through the policy's encoder."""
    modes = [(m, m.training) for m in module.modules()]
    rnn_dropouts = [(m, m.dropout) for m in module.modules() if isinstance(m, nn.RNNBase)]
    module.eval()
    for m, _ in rnn_dropouts:
        m.training, m.dropout = True, 0.0
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode
        for m, dropout in rnn_dropouts:
            m.dropout = dropout


@torch.no_grad()
def _is_output_layer(decoder, spec: OutputWeights) -> bool:
    weight, bias = spec.get(decoder)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(2, 3, weight.size(1), generator=gen).to(device=weight.device, dtype=weight.dtype)
    with eval_mode(decoder):
        try:
            got = decoder.output_layer(x)
        except Exception:  # a head that does not take features of this size is not this linear map
            return False
    want = F.linear(x, weight, bias)
    return torch.is_tensor(got) and got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5)
