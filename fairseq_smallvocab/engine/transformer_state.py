"""Decoding state allocated once per batch and written in place, for the
sampling loop (``sampler.sample``).

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
incremental state (``static_state`` returns None for them).

Recurrent decoders (the plugin's LSTMs, fairseq's ``lstm``) carry h, c and
the attention's input feed from step to step; ``RecurrentStaticState`` keeps
them as plain tensors (a step makes new ones: the sampler may keep the step
graph, which in-place writes would break) and projects the encoder's
attention keys once, without fairseq's dict of stacked states.

A captured step (``capture.py``) reads and writes fixed addresses: its state
is made once per shape bucket (``Slots``: rows, source length), each batch
is loaded into the front of those tensors (the rest padded: masked source
positions, padded rows attending to one zero key so that no softmax is over
nothing), and the recurrent states are written in place.
"""

import logging
import weakref
from functools import partial
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq.models.lstm import LSTMDecoder
from fairseq.models.transformer.transformer_decoder import TransformerDecoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from fairseq_smallvocab.models.lstm_caption_smallvocab import CaptionDecoder
from fairseq_smallvocab.models.lstm_smallvocab import SmallVocabDecoder

logger = logging.getLogger(__name__)
_told = set()  # decoder classes whose fallback was explained: once per class and process, not per batch


def _unsupported(decoder) -> Optional[str]:
    """Why ``decoder`` cannot run on the static state (None: it can)."""
    if not isinstance(decoder, TransformerDecoderBase):
        return "not a fairseq TransformerDecoder"
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


class Slots:
    """Tensors at fixed addresses for a captured step, sized for a shape
    bucket: ``put`` copies a batch's tensor into the front of its slot (made
    at the first put, each dim in ``sizes`` enlarged to the bucket's) and
    fills the rest with ``fill``.  A state made for one batch has no slots:
    it keeps the batch's tensors as they are."""

    def __init__(self, rows: int, src_len: int):
        self.rows, self.src_len = rows, src_len
        self.slots: Dict[str, Tensor] = {}

    def put(self, name: str, value: Tensor, sizes: Dict[int, int], fill=0) -> Tensor:
        slot = self.slots.get(name)
        if slot is None:
            shape = list(value.shape)
            for dim, size in sizes.items():
                shape[dim] = size
            slot = self.slots[name] = value.new_empty(shape)
        if any(n > m for n, m in zip(value.shape, slot.shape)):
            raise ValueError(f"{name}: a batch of shape {tuple(value.shape)} does not fit its bucket "
                             f"{tuple(slot.shape)}")
        slot.fill_(fill)
        slot[tuple(slice(0, n) for n in value.shape)].copy_(value)
        return slot


def unmask_first_position(mask: Tensor, real_rows: int, rows_dim: int, src_dim: int) -> Tensor:
    """In place, in a True-at-padding source mask padded to a bucket's rows: each row after ``real_rows``
    attends to its first (zero) source position, so that its attention's softmax is over one key, not over
    nothing (NaN, which a backward would carry into the weights' gradients)."""
    mask.narrow(rows_dim, real_rows, mask.size(rows_dim) - real_rows).narrow(src_dim, 0, 1).fill_(False)
    return mask


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


class _DecoderState:
    """A state's decoder, held weakly: a bucket keeps its state in a dict weakly keyed by the decoder
    (``capture.py``), and a strong reference from the bucket would keep the decoder, its buckets and their
    graphs alive for as long as the process runs."""

    def __init__(self, decoder):
        self._decoder = weakref.ref(decoder)

    @property
    def decoder(self):
        return self._decoder()


class TransformerStaticState(_DecoderState):
    """The decoding state of one batch of ``rows`` sequences of at most
    ``steps`` tokens for a fairseq ``TransformerDecoder``; ``step(tokens, t)``
    is ``decoder.extract_features(prefix, encoder_out, incremental_state)``
    for the prefix whose last token is ``tokens`` (rows) at position t:
    rows x d states.  Build it with ``static_state``."""

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


class RecurrentStaticState(_DecoderState):
    """The decoding state of one batch for a recurrent decoder: ``step(tokens,
    t)`` is ``decoder.extract_features(prefix, encoder_out,
    incremental_state)`` for the prefix whose last token is ``tokens`` (rows
    x d states), with the decoder's own modules.  Made for one batch, a step
    binds new state tensors (the sampler may keep the step graph, which
    in-place writes would break); in a bucket's ``slots`` it writes them in
    place (a captured step, no graph kept)."""

    def __init__(self, decoder, encoder_out, slots: Optional[Slots] = None):
        super().__init__(decoder)
        self.slots = slots
        if isinstance(decoder, SmallVocabDecoder):  # the paper's decoder: global attention, input feeding
            self._step = self._paper_step
        elif isinstance(decoder, CaptionDecoder):  # an LSTM from the image's h_0, no attention
            self._step = self._caption_step
        else:  # fairseq's lstm
            self._step = self._fairseq_step
        self.load(encoder_out)

    def _put(self, name: str, value: Tensor, rows_dim: int, src_dim: Optional[int] = None, fill=0) -> Tensor:
        slots = self.slots
        if slots is None:
            return value
        sizes = {rows_dim: slots.rows} if src_dim is None else {rows_dim: slots.rows, src_dim: slots.src_len}
        return slots.put(name, value, sizes, fill)

    def _pad_mask(self, name: str, mask: Tensor, rows_dim: int, src_dim: int) -> Tensor:
        """A True-at-padding source mask in its slot; a padded row attends to one (zero) key."""
        rows = mask.size(rows_dim)
        mask = self._put(name, mask, rows_dim, src_dim, fill=True)
        return mask if self.slots is None else unmask_first_position(mask, rows, rows_dim, src_dim)

    def load(self, encoder_out):
        """The batch's initial states and attention keys, from the decoder's current parameters."""
        d = self.decoder
        if isinstance(d, SmallVocabDecoder):
            enc = encoder_out["encoder_out"][0]  # S x rows x 2d
            self.hs = list(self._put("h", encoder_out["final_hidden"][0], 1).unbind(0))
            self.cs = list(self._put("c", encoder_out["final_cell"][0], 1).unbind(0))
            self.feed = self._put("feed", enc.new_zeros(enc.size(1), d.combine.out_features), 0)
            # rows x d x S: W_a e_j, once
            self.keys = self._put("keys", d.attention(enc).permute(1, 2, 0), 0, 2)
            self.values = self._put("values", enc.transpose(0, 1), 0, 1)
            self.mask = self._pad_mask("mask", encoder_out["encoder_padding_mask"][0], 0, 1)
        elif isinstance(d, CaptionDecoder):
            self.h = self._put("h", encoder_out["final_hidden"][0], 1)
            self.c = self._put("c", encoder_out["final_cell"][0], 1)
        else:  # fairseq's lstm: its encoder's tuple (states, h, c, S x rows padding mask)
            enc, hiddens, cells, mask = encoder_out[:4]
            hs = [hiddens[i] for i in range(d.num_layers)]
            cs = [cells[i] for i in range(d.num_layers)]
            if d.encoder_hidden_proj is not None:
                hs = [d.encoder_hidden_proj(y) for y in hs]
                cs = [d.encoder_cell_proj(y) for y in cs]
            if self.slots is not None:
                hs = list(self._put("h", torch.stack(hs), 1).unbind(0))
                cs = list(self._put("c", torch.stack(cs), 1).unbind(0))
            self.hs, self.cs = hs, cs
            self.enc = self._put("enc", enc, 1, 0)
            self.mask = self._pad_mask("mask", mask, 1, 0)
            self.feed = self._put("feed", enc.new_zeros(enc.size(1), d.hidden_size), 0)

    def _set(self, name: str, value: Tensor, index: Optional[int] = None):
        """The state's next value: bound (one batch's state) or written in place (a bucket's)."""
        if self.slots is not None:
            (getattr(self, name) if index is None else getattr(self, name)[index]).copy_(value)
        elif index is None:
            setattr(self, name, value)
        else:
            getattr(self, name)[index] = value

    def step(self, tokens: Tensor, t) -> Tensor:
        return self._step(tokens)

    def _paper_step(self, tokens: Tensor) -> Tensor:
        d = self.decoder
        inp = torch.cat([d.dropout(d.embed_tokens(tokens)), self.feed], dim=1)
        for i, cell in enumerate(d.cells):
            h, c = cell(inp, (self.hs[i], self.cs[i]))
            self._set("hs", h, i)
            self._set("cs", c, i)
            inp = d.dropout(h) if i + 1 < len(d.cells) else h
        scores = torch.bmm(h.unsqueeze(1), self.keys).squeeze(1).masked_fill(self.mask, float("-inf"))
        a = F.softmax(scores.float(), dim=-1).type_as(scores)
        ctx = torch.bmm(a.unsqueeze(1), self.values).squeeze(1)
        feed = d.dropout(torch.tanh(d.combine(d.dropout(torch.cat([h, ctx], dim=1)))))
        self._set("feed", feed)
        return feed

    def _caption_step(self, tokens: Tensor) -> Tensor:
        d = self.decoder
        out, (h, c) = d.lstm(d.dropout(d.embed_tokens(tokens)).unsqueeze(0), (self.h, self.c))
        self._set("h", h)
        self._set("c", c)
        return d.dropout(out[0])

    def _fairseq_step(self, tokens: Tensor) -> Tensor:
        d = self.decoder
        inp = torch.cat((d.dropout_in_module(d.embed_tokens(tokens)), self.feed), dim=1)
        for i, rnn in enumerate(d.layers):
            hidden, cell = rnn(inp, (self.hs[i], self.cs[i]))
            inp = d.dropout_out_module(hidden)
            if d.residuals:
                inp = inp + self.hs[i]
            self._set("hs", hidden, i)
            self._set("cs", cell, i)
        out = d.attention(hidden, self.enc, self.mask)[0]  # (an lstm without attention keeps fairseq's state)
        feed = d.dropout_out_module(out)
        self._set("feed", feed)
        x = feed
        if hasattr(d, "additional_fc") and d.adaptive_softmax is None:
            x = d.dropout_out_module(d.additional_fc(x))
        return x


def _recurrent_supported(decoder) -> bool:
    """The decoder classes ``RecurrentStaticState`` follows, exactly (a subclass may compute otherwise)."""
    if type(decoder) in (SmallVocabDecoder, CaptionDecoder):
        return True
    return type(decoder) is LSTMDecoder and decoder.attention is not None and decoder.encoder_output_units > 0


def _why_not(decoder) -> Optional[str]:
    if isinstance(decoder, (LSTMDecoder, SmallVocabDecoder, CaptionDecoder)):
        return "a recurrent decoder subclass, or fairseq's lstm without attention"
    return _unsupported(decoder)


def has_static_state(decoder, encoder_out, keep_graph: bool = False) -> bool:
    """Whether ``decoder`` samples on a static state (``static_state``)."""
    if _recurrent_supported(decoder):
        return True
    return not keep_graph and _unsupported(decoder) is None and isinstance(encoder_out, dict) \
        and bool(encoder_out.get("encoder_out"))


def static_state(decoder, encoder_out, steps: int, keep_graph: bool = False, slots: Optional[Slots] = None):
    """The static state for ``decoder``, or None where it keeps fairseq's
    incremental state (another decoder, or an option the static step does
    not follow).  ``keep_graph``: the sampler keeps the steps' graph, which
    the Transformer's in-place buffers would break (recurrent decoders only
    keep it).  ``slots``: a captured step's state, at the bucket's sizes
    (``load`` then takes each next batch)."""
    if not has_static_state(decoder, encoder_out, keep_graph):
        # a user whose sampling is slower than the benchmarks' should learn why from the log, not the profiler;
        # the class is asked once (this runs every batch, and the reason walks the layers)
        if not keep_graph and type(decoder) not in _told:
            _told.add(type(decoder))
            reason = _why_not(decoder)
            if reason is not None:
                logger.info(f"{type(decoder).__name__} samples on fairseq's incremental state, not the static "
                            f"state ({reason})")
        return None
    if _recurrent_supported(decoder):
        return RecurrentStaticState(decoder, encoder_out, slots)
    return TransformerStaticState(decoder, encoder_out, steps, slots)
