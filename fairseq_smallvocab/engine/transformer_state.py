"""The fairseq Transformer decoder's family: its decoding state allocated
once per batch and written in place, for the sampling loop
(``sampling.sample``).

fairseq's incremental decoding keeps each layer's self-attention keys and
values in a dict and grows them by ``torch.cat`` every step (a new tensor per
layer and step), derives the positions from the prefix length, and tests
``prev_output_tokens.eq(pad).any()`` in a Python ``if`` (a host sync on a
GPU).  ``TransformerStaticState`` runs the same arithmetic on buffers made
once: for layer l,

    K_l, V_l: rows x H x T_max x d_h     (self-attention, step t writes column t)
    C_l = (W_k enc, W_v enc): rows x H x S x d_h    (encoder attention, once)
    step t:  q = W_q x_t * d_h^-1/2;  a = softmax(q K_l[:, :, :t+1]^T) V_l[:, :, :t+1]

with the decoder's own modules (its embeddings, layer norms, projections and
feed-forward layers, called as fairseq calls them: no parameter is copied,
so training sees what sampling used).  ``steps`` of the decoder's position
table are made once.  Decoders it cannot follow exactly keep fairseq's
incremental state (``TransformerFamily.why_not`` says why).

A captured step (``capture.py``) reads and writes fixed addresses: its state
is made once per shape bucket (``slots.Slots``: rows, source length), each batch
is loaded into the front of those tensors (the rest padded: masked source
positions, padded rows attending to one zero key so that no softmax is over
nothing), and the keys and values are written in place.
"""

from functools import partial
from typing import List, Optional

import torch
import torch.nn.functional as F
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from fairseq_smallvocab.engine import families
from fairseq_smallvocab.engine.families import Slots


def _unsupported(decoder) -> Optional[str]:
    """Why the Transformer ``decoder`` cannot run on the static state (None: it can)."""
    cls = type(decoder)
    for name in ("extract_features", "extract_features_scriptable"):
        if getattr(cls, name) is not getattr(TransformerDecoderBase, name):
            return f"its class overrides {name}"
    if decoder.cross_self_attention:
        return "cross-self-attention"
    for layer in decoder.layers:
        if type(layer).forward is not TransformerDecoderLayerBase.forward:
            return f"its layer class {type(layer).__name__} has a forward of its own"
        if layer.encoder_attn is None:
            return "a layer without encoder attention"
        for extra in ("c_attn", "attn_ln", "ffn_layernorm", "w_resid"):
            if getattr(layer, extra, None) is not None:
                return f"a layer with {extra}"
        for attn in (layer.self_attn, layer.encoder_attn):
            if attn.bias_k is not None or attn.add_zero_attn or getattr(attn, "use_xformers", False):
                return "attention with bias_k/bias_v, add_zero_attn or xformers"
    return None


def _heads(x: Tensor, rows: int, heads: int) -> Tensor:
    """(T x rows x H*d_h) or (rows x H*d_h) projections -> rows x H x T x d_h."""
    if x.dim() == 2:
        return x.view(rows, heads, 1, -1)
    return x.view(x.size(0), rows, heads, -1).permute(1, 2, 0, 3)


def _sublayer(layer, norm, x: Tensor, body) -> Tensor:
    """One residual sub-layer of a fairseq decoder layer: x + body(norm(x)) when the layer normalizes
    before (pre-norm), norm(x + body(x)) after (post-norm)."""
    residual = x
    if layer.normalize_before:
        x = norm(x)
    x = layer.residual_connection(body(x), residual)
    return x if layer.normalize_before else norm(x)


def _feed_forward(layer, x: Tensor) -> Tensor:
    return layer.dropout_module(layer.fc2(layer.activation_dropout_module(layer.activation_fn(layer.fc1(x)))))


class TransformerStaticState(families.DecoderState):
    """The decoding state of one batch of ``rows`` sequences of at most
    ``steps`` tokens for a fairseq ``TransformerDecoder``; ``step(tokens, t)``
    is ``decoder.extract_features(prefix, encoder_out, incremental_state)``
    for the prefix whose last token is ``tokens`` (rows) at position t:
    rows x d states."""

    def __init__(self, decoder, encoder_out, steps: int, slots: Optional[Slots] = None):
        super().__init__(decoder)
        enc = encoder_out["encoder_out"][0]  # S x rows x C
        self.slots = slots
        self.rows = enc.size(1) if slots is None else slots.rows
        self.steps = steps
        self.columns = torch.arange(steps, device=enc.device)  # the step of each key/value column
        self.keys: List[Tensor] = []
        self.values: List[Tensor] = []
        for layer in decoder.layers:
            attn = layer.self_attn
            shape = (self.rows, attn.num_heads, steps, attn.head_dim)
            dtype = attn.k_proj.weight.dtype
            self.keys.append(enc.new_zeros(shape, dtype=dtype))
            self.values.append(enc.new_zeros(shape, dtype=dtype))
        self.load(encoder_out)

    def load(self, encoder_out):
        """The batch's encoder keys and values (projected once), its source mask and the position table,
        from the decoder's current parameters; in a bucket's slots, padded."""
        d, slots = self.decoder, self.slots
        enc = encoder_out["encoder_out"][0]
        src_len, rows = enc.shape[:2]
        masks = encoder_out.get("encoder_padding_mask") or []
        # SDPA's boolean masks say where to attend (fairseq's say where the padding is)
        attend = None if not masks else (~masks[0]).view(rows, 1, 1, -1)
        if slots is not None:
            if attend is None:
                attend = enc.new_ones(rows, 1, 1, src_len, dtype=torch.bool)
            attend = slots.put("attend", attend, {0: slots.rows, 3: slots.src_len}, fill=False)
            attend[rows:, :, :, 0] = True  # a padded row attends to one (zero) key: no softmax over nothing
        self.enc_mask = attend
        self.cross = []
        for i, layer in enumerate(d.layers):
            cross = layer.encoder_attn
            kv = (_heads(cross.k_proj(enc), rows, cross.num_heads), _heads(cross.v_proj(enc), rows, cross.num_heads))
            if slots is not None:
                kv = tuple(slots.put(f"{name}{i}", x, {0: slots.rows, 2: slots.src_len})
                           for name, x in zip("kv", kv))
            self.cross.append(kv)
        self.positions = None
        if d.embed_positions is not None and self.steps > 0:
            # the position of step t, as fairseq's incremental call makes it (padding_idx + t + 1)
            prefix = torch.full((1, self.steps), d.padding_idx + 1, dtype=torch.long, device=enc.device)
            self.positions = d.embed_positions(prefix)[0]  # steps x C
            if slots is not None:
                self.positions = slots.put("positions", self.positions, {})

    def own_tensors(self) -> List[Tensor]:
        return self.keys + self.values

    def _self_attention(self, decoder_layer, layer: int, t, x: Tensor) -> Tensor:
        attn = decoder_layer.self_attn
        heads = attn.num_heads
        q = _heads(attn.q_proj(x) * attn.scaling, self.rows, heads)
        k, v = _heads(attn.k_proj(x), self.rows, heads), _heads(attn.v_proj(x), self.rows, heads)
        keys, values = self.keys[layer], self.values[layer]
        if isinstance(t, Tensor):  # static shapes: column t written by a device index, the later ones masked
            keys.index_copy_(2, t.view(1), k)
            values.index_copy_(2, t.view(1), v)
            seen = (self.columns <= t).view(1, 1, 1, -1)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=seen, scale=1.0)
        else:  # eager: the columns written so far
            keys[:, :, t], values[:, :, t] = k[:, :, 0], v[:, :, 0]
            out = F.scaled_dot_product_attention(q, keys[:, :, : t + 1], values[:, :, : t + 1], scale=1.0)
        return decoder_layer.dropout_module(attn.out_proj(out.reshape(self.rows, -1)))

    def _encoder_attention(self, decoder_layer, layer: int, x: Tensor) -> Tensor:
        attn = decoder_layer.encoder_attn
        q = _heads(attn.q_proj(x) * attn.scaling, self.rows, attn.num_heads)
        k, v = self.cross[layer]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.enc_mask, scale=1.0)
        return decoder_layer.dropout_module(attn.out_proj(out.reshape(self.rows, -1)))

    def step(self, tokens: Tensor, t) -> Tensor:
        """``t``: a Python int (each step attends over the t + 1 columns written), or a 0-d device tensor:
        every call then has the same shapes (all ``steps`` columns, those after t masked) and reads t on the
        device, which a captured graph needs (no value of t is baked into it)."""
        d = self.decoder
        x = d.embed_scale * d.embed_tokens(tokens)
        if d.quant_noise is not None:
            x = d.quant_noise(x)
        if d.project_in_dim is not None:
            x = d.project_in_dim(x)
        if self.positions is not None:
            x = x + (self.positions.index_select(0, t.view(1)) if isinstance(t, Tensor) else self.positions[t])
        if d.layernorm_embedding is not None:
            x = d.layernorm_embedding(x)
        x = d.dropout_module(x)
        for i, layer in enumerate(d.layers):  # iterated as fairseq does (a LayerDrop list draws as it goes)
            x = _sublayer(layer, layer.self_attn_layer_norm, x, partial(self._self_attention, layer, i, t))
            x = _sublayer(layer, layer.encoder_attn_layer_norm, x, partial(self._encoder_attention, layer, i))
            x = _sublayer(layer, layer.final_layer_norm, x, partial(_feed_forward, layer))
        if d.layer_norm is not None:
            x = d.layer_norm(x)
        if d.project_out_dim is not None:
            x = d.project_out_dim(x)
        return x


class TransformerFamily(families.DecoderFamily):
    """fairseq's ``TransformerDecoder`` (and the classes built on it that compute as it does)."""

    decoder_class, state_class = TransformerDecoderBase, None  # (its state takes the steps: below)

    def why_not(self, decoder) -> Optional[str]:
        return _unsupported(decoder)

    def takes(self, encoder_out, keep_graph: bool = False) -> bool:
        # a kept step graph would be broken by the in-place buffers
        return not keep_graph and isinstance(encoder_out, dict) and bool(encoder_out.get("encoder_out"))

    def static_state(self, decoder, encoder_out, steps: int, slots: Optional[Slots] = None):
        return TransformerStaticState(decoder, encoder_out, steps, slots)


families.register(TransformerFamily())
