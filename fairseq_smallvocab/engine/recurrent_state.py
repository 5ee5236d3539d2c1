"""Recurrent decoders' static state, and fairseq's LSTM decoder's family.

A recurrent decoder carries h, c (and an attention's input feed) from step
to step; ``RecurrentStaticState`` keeps them as plain tensors, with the
encoder's attention keys projected once, without fairseq's dict of stacked
states.  Made for one batch, a step binds new state tensors (the sampler may
keep the step graph, which in-place writes would break); in a bucket's
``slots`` (a captured step, no graph kept) it writes them in place.  Each
family gives ``load`` (the batch's initial states) and ``step``: fairseq's
``lstm`` here, the plugin's LSTMs in ``models/`` (which register theirs).
"""

from typing import Optional

import torch
from fairseq.models.lstm import LSTMDecoder
from torch import Tensor

from fairseq_smallvocab.engine import families
from fairseq_smallvocab.engine.families import EncoderParts, Part, Slots, unmask_first_position


class RecurrentStaticState(families.DecoderState):
    """The decoding state of one batch for a recurrent decoder: ``step(tokens,
    t)`` is ``decoder.extract_features(prefix, encoder_out,
    incremental_state)`` for the prefix whose last token is ``tokens`` (rows
    x d states), with the decoder's own modules."""

    def __init__(self, decoder, encoder_out, slots: Optional[Slots] = None):
        super().__init__(decoder)
        self.slots = slots
        self.load(encoder_out)

    def load(self, encoder_out):
        """The batch's initial states and attention keys, from the decoder's current parameters."""
        raise NotImplementedError

    def step(self, tokens: Tensor, t) -> Tensor:
        raise NotImplementedError

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

    def _set(self, name: str, value: Tensor, index: Optional[int] = None):
        """The state's next value: bound (one batch's state) or written in place (a bucket's)."""
        if self.slots is not None:
            (getattr(self, name) if index is None else getattr(self, name)[index]).copy_(value)
        elif index is None:
            setattr(self, name, value)
        else:
            getattr(self, name)[index] = value

    def _set_layers(self, hs, cs):
        """Every layer's new h and c."""
        for i, (h, c) in enumerate(zip(hs, cs)):
            self._set("hs", h, i)
            self._set("cs", c, i)


class FairseqLSTMState(RecurrentStaticState):
    """fairseq's ``lstm`` decoder with attention: its encoder's tuple (states, h, c, S x rows padding mask)."""

    def load(self, encoder_out):
        d = self.decoder
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

    def step(self, tokens: Tensor, t) -> Tensor:
        d = self.decoder
        inp = torch.cat((d.dropout_in_module(d.embed_tokens(tokens)), self.feed), dim=1)
        for i, rnn in enumerate(d.layers):
            hidden, cell = rnn(inp, (self.hs[i], self.cs[i]))
            inp = d.dropout_out_module(hidden)
            if d.residuals:
                inp = inp + self.hs[i]
            self._set("hs", hidden, i)
            self._set("cs", cell, i)
        out = d.attention(hidden, self.enc, self.mask)[0]
        feed = d.dropout_out_module(out)
        self._set("feed", feed)
        x = feed
        if hasattr(d, "additional_fc") and d.adaptive_softmax is None:
            x = d.dropout_out_module(d.additional_fc(x))
        return x


class FairseqLSTMFamily(families.DecoderFamily):
    """fairseq's ``LSTMDecoder``: recurrent; its static state and graphed pass need its attention."""

    recurrent = True
    parts = EncoderParts([Part(1, 0), Part(1), Part(1), Part(1, 0, mask=True)],  # (states, h, c, S x rows mask)
                         lambda out: list(out[:4]), lambda parts: tuple(parts))

    decoder_class, state_class = LSTMDecoder, FairseqLSTMState

    def why_not(self, decoder) -> Optional[str]:
        if decoder.attention is None or decoder.encoder_output_units == 0:
            return "fairseq's lstm without attention"
        return super().why_not(decoder)

    def source_length(self, encoder_out) -> int:
        return encoder_out[0].size(0)  # S x rows x C first


families.register(FairseqLSTMFamily())
