"""``lstm_smallvocab``: the paper's attentional LSTM encoder-decoder whose output
layer can be restricted, per example, to a small candidate vocabulary.

Encoder: embeddings, a bidirectional LSTM (d units per direction).  Decoder
(Luong et al. 2015, global "general" attention, input feeding):

    h_t = LSTM([emb(y_{t-1}); s_{t-1}], h_{t-1}),   h_0 = forward last + backward first state
    a_t = softmax_j(h_t . W_a e_j),  c_t = sum_j a_tj e_j
    s_t = tanh(W_s [h_t; c_t] + b_s)
    logits_t = W_p' s_t + b_p'

W_p is tied to the target embedding.  With ``candidates`` (B x K target ids),
W_p' and b_p' are the example's K rows of W_p and b_p (a gather and a batched
matrix product) and the model scores only those K words; without, the same
code scores the whole vocabulary.  One model, one code path, so small and full
softmax compare fairly.

Candidate rows follow one convention: position i holds fairseq's special
symbol i for the dictionary's special symbols (bos, pad, eos, unk = 0..3), so
a candidate-space id of a special symbol equals its dictionary id and fairseq's
search code (pad/unk/eos handling) works unchanged.  ``get_targets`` maps gold
target ids to their positions in the example's candidates.

Initialization as the paper's code: weights uniform in [-0.1, 0.1], biases 0,
LSTM forget-gate biases 1, the attention matrix 0.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from torch import Tensor

INIT_SCALE = 0.1


@dataclass
class LSTMSmallVocabConfig(FairseqDataclass):
    embed_dim: int = field(default=256, metadata={"help": "d: embeddings, LSTM units (per direction), s_t"})
    layers: int = field(default=1, metadata={"help": "LSTM layers in the encoder and in the decoder"})
    dropout: float = field(default=0.2, metadata={"help": "dropout on embeddings, [h_t; c_t] and s_t"})
    max_source_positions: int = field(default=1024, metadata={"help": "longest source"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest target"})
    vocab_predictor: Optional[str] = field(
        default=None, metadata={"help": "set by translation_smallvocab when training: the vocabulary predictor "
                                        "behind the training candidates (decoding uses it when none is given)"})


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

    def forward(self, src_tokens, src_lengths, candidates: Optional[Tensor] = None, **unused):
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
                "final_hidden": [h], "final_cell": [c],  # layers x B x d
                "candidates": [] if candidates is None else [candidates]}  # B x K

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        return {"encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
                "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
                "final_hidden": [encoder_out["final_hidden"][0].index_select(1, new_order)],
                "final_cell": [encoder_out["final_cell"][0].index_select(1, new_order)],
                "candidates": [c.index_select(0, new_order) for c in encoder_out["candidates"]]}

    def max_positions(self):
        return self.max_positions_


class CandidateLogits(torch.autograd.Function):
    """logits[b, t, k] = W[c[b, k]] . s[b, t] + bias[c[b, k]], computed chunk by
    chunk of examples, forward and backward: the gathered rows of a chunk
    (chunk x K x d) are made, used and freed, and in the backward pass their
    gradient goes straight into W's and bias's (index_add), so peak memory
    holds neither all B x K x d gathered rows nor their gradient (131 MB
    each at B = 128, K = 1000, d = 256).  Same values as
    ``baddbmm(bias[c], s, W[c]^T)``, which the oracle tests check."""

    CHUNK = 16

    @staticmethod
    def forward(ctx, features, weight, bias, candidates):
        # mixed precision (--amp): float16 states, float32 weights; one dtype for the products (the wider),
        # and each gradient back in its input's dtype
        ctx.dtypes = features.dtype, weight.dtype, bias.dtype
        dtype = torch.promote_types(features.dtype, weight.dtype)
        features, weight, bias = features.to(dtype), weight.to(dtype), bias.to(dtype)
        bsz, steps, _ = features.shape
        out = features.new_empty(bsz, steps, candidates.size(1))
        for start in range(0, bsz, CandidateLogits.CHUNK):
            rows = candidates[start: start + CandidateLogits.CHUNK]
            torch.baddbmm(bias[rows].unsqueeze(1), features[start: start + len(rows)], weight[rows].transpose(1, 2),
                          out=out[start: start + len(rows)])
        ctx.save_for_backward(features, weight, candidates)
        ctx.bias_shape = bias.shape
        return out

    @staticmethod
    def backward(ctx, grad_out):
        features, weight, candidates = ctx.saved_tensors
        grad_out = grad_out.to(features.dtype)
        need_f, need_w, need_b = ctx.needs_input_grad[:3]
        grad_f = torch.empty_like(features) if need_f else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = grad_out.new_zeros(ctx.bias_shape) if need_b else None
        for start in range(0, features.size(0), CandidateLogits.CHUNK):
            rows = candidates[start: start + CandidateLogits.CHUNK]
            g = grad_out[start: start + len(rows)]  # chunk x T x K
            if need_f:
                torch.bmm(g, weight[rows], out=grad_f[start: start + len(rows)])
            ids = rows.reshape(-1)
            if need_w:
                grad_w.index_add_(0, ids, torch.bmm(g.transpose(1, 2), features[start: start + len(rows)])
                                  .reshape(len(ids), -1))
            if need_b:
                grad_b.index_add_(0, ids, g.sum(1).reshape(-1))
        f_dtype, w_dtype, b_dtype = ctx.dtypes
        return (None if grad_f is None else grad_f.to(f_dtype), None if grad_w is None else grad_w.to(w_dtype),
                None if grad_b is None else grad_b.to(b_dtype), None)


class CandidateOutputDecoder(FairseqIncrementalDecoder):
    """What the plugin's decoders share: a target embedding tied to the output
    layer (W_p; bias b_p), the small/full output layer, sampling and scoring
    for REINFORCE and the incremental-decoding caches.  Subclasses give
    ``extract_features`` (the states s_t, d = ``state_dim``) and list the
    batch dimension of each tensor they cache under "state" in
    ``STATE_BATCH_DIMS``."""

    STATE_BATCH_DIMS: Dict[str, int] = {}

    def __init__(self, dictionary, embed_dim, dropout, max_positions):
        super().__init__(dictionary)
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=dictionary.pad())
        nn.init.uniform_(self.embed_tokens.weight, -INIT_SCALE, INIT_SCALE)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))  # b_p; W_p is embed_tokens.weight
        self.dropout = nn.Dropout(dropout)
        self.max_positions_ = max_positions
        self.state_dim = embed_dim  # size of s_t (what a learned REINFORCE baseline reads)

    def forward(self, prev_output_tokens, encoder_out, incremental_state=None, features_only=False, **unused):
        s, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        candidates = encoder_out["candidates"][0] if encoder_out["candidates"] else None
        if features_only:
            out = s
        elif candidates is not None and incremental_state is not None:
            out = self._cached_output_layer(s, candidates, incremental_state)
        else:
            out = self.output_layer(s, candidates)
        return out, {"attn": [attn], "candidates": [] if candidates is None else [candidates]}

    def output_layer(self, features, candidates: Optional[Tensor] = None):
        """Logits over the whole vocabulary (B x T x V), or with ``candidates``
        (B x K ids) over each example's K candidates (B x T x K): for each
        example, its K rows of W_p and b_p (a gather) times its states (a
        batched matrix product), computed in chunks of examples so that the
        gathered rows, B x K x d in all, never exist at once (see
        ``CandidateLogits``)."""
        if candidates is None:
            return F.linear(features, self.embed_tokens.weight, self.output_bias)
        return CandidateLogits.apply(features, self.embed_tokens.weight, self.output_bias, candidates)

    def union_rows(self, candidates: Tensor):
        """Rows of W_p and b_p for the union U of the candidates (|U| x d, |U|),
        and each candidate's index in U (the shape of ``candidates``): scoring U
        with one product and picking each row's K gives ``output_layer``'s
        logits with less memory traffic when no gradient is needed."""
        union, pos = torch.unique(candidates, return_inverse=True)
        return self.embed_tokens.weight[union], self.output_bias[union], pos

    def sample(self, encoder_out, max_lens: Tensor, greedy: bool = False) -> Dict[str, Tensor]:
        """Decode a sequence per example from the model's own distribution
        (multinomial, or argmax with ``greedy``), inside the example's candidates
        when ``encoder_out`` has them; all examples advance together, with no
        loop over examples.  Example b stops at its eos or after ``max_lens[b]``
        tokens.  Returns B x T tensors: ``tokens`` (target ids, pad after the
        end), ``positions`` (the chosen index in the example's candidates; the
        id for the full softmax), ``mask`` (steps that count, the eos
        included), ``lengths`` (tokens before the eos) and ``features`` (the
        states s_t that chose each token).  pad and bos are never chosen.

        The choice at each step reads the states without gradient (one product
        with the rows of the batch's candidate union); under autograd the
        states keep their graph, so ``score_samples`` gets the differentiable
        log-probabilities of the sampled tokens from them with one batched
        output layer, without a second pass through the decoder."""
        candidates = encoder_out["candidates"][0] if encoder_out["candidates"] else None
        if candidates is not None:  # the batch's candidate union, scored by one product per step
            weight, bias, pos = self.union_rows(candidates)
            weight, bias = weight.detach(), bias.detach()
        else:
            weight, bias, pos = self.embed_tokens.weight.detach(), self.output_bias.detach(), None
        eos, pad, bos = self.dictionary.eos(), self.dictionary.pad(), self.dictionary.bos()
        bsz = max_lens.size(0)
        tokens = max_lens.new_full((bsz, 1), eos)
        alive = max_lens > 0
        state: Dict[str, Dict[str, Optional[Tensor]]] = {}
        masks, choices, states = [], [], []
        for t in range(int(max_lens.max()) if bsz else 0):
            s, _ = self.extract_features(tokens, encoder_out, state)  # B x 1 x d
            states.append(s)
            with torch.no_grad():
                logits = F.linear(s[:, 0], weight, bias)
                logits = (logits.gather(1, pos) if pos is not None else logits).float()
                logits[:, [pad, bos]] = float("-inf")  # special ids are candidate positions too
                choice = logits.argmax(-1, keepdim=True) if greedy else sample_categorical(logits)
            ids = candidates.gather(1, choice) if candidates is not None else choice
            choices.append(choice.squeeze(1))
            masks.append(alive)
            tokens = torch.cat([tokens, ids.masked_fill(~alive.unsqueeze(1), pad)], dim=1)
            alive = alive & ids.squeeze(1).ne(eos) & (max_lens > t + 1)
            if not alive.any():
                break
        mask = torch.stack(masks, 1) if masks else max_lens.new_zeros(bsz, 0, dtype=torch.bool)
        out = tokens[:, 1:]
        positions = torch.stack(choices, 1) if choices else out.clone()
        features = torch.cat(states, 1) if states else self.output_bias.new_zeros(bsz, 0, self.state_dim)
        return {"tokens": out, "positions": positions, "mask": mask, "lengths": (mask & out.ne(eos)).sum(1),
                "features": features}

    def score_samples(self, samples, encoder_out) -> Dict[str, Tensor]:
        """``lprobs`` (B x T, log p(y_t) under the same restrictions as sampling,
        0 after the end), differentiable through the states ``sample`` kept,
        and ``features`` (those states, detached)."""
        mask, s = samples["mask"], samples["features"]
        pad, bos, eos = self.dictionary.pad(), self.dictionary.bos(), self.dictionary.eos()
        candidates = encoder_out["candidates"][0] if encoder_out["candidates"] else None
        logits = self.output_layer(s, candidates).float()
        logits[:, :, [pad, bos]] = float("-inf")
        lprobs = F.log_softmax(logits, dim=-1).gather(2, samples["positions"].masked_fill(~mask, eos).unsqueeze(2))
        return {"lprobs": lprobs.squeeze(2).masked_fill(~mask, 0.0), "features": s.detach()}

    def _cached_output_layer(self, features, candidates, incremental_state):
        """Incremental decoding's output layer, the same logits as
        ``output_layer`` computed for speed: at the first step the rows of W_p
        and b_p for the union U of the batch's candidates are gathered once;
        every step then scores U for all rows with one matrix product (memory
        traffic |U| x d, against B x K x d for per-sentence rows) and picks each
        row's K candidates out of it.  The row -> sentence map follows the
        generator's reordering."""
        cache = self.get_incremental_state(incremental_state, "cand_rows")
        if cache is None:
            rows = features.size(0)
            beam = getattr(self, "_beam_size", 1)
            firsts = candidates[::beam] if beam > 1 and rows % beam == 0 else candidates
            if len(firsts) != rows and not torch.equal(candidates, firsts.repeat_interleave(beam, 0)):
                firsts = candidates
            weight, bias, pos = self.union_rows(firsts)
            cache = {"w": weight, "b": bias, "pos": pos,
                     "sent": torch.arange(len(firsts), device=candidates.device).repeat_interleave(
                         rows // len(firsts))}
            self.set_incremental_state(incremental_state, "cand_rows", cache)
        scores = F.linear(features, cache["w"], cache["b"])  # rows x T x |U|
        pos = cache["pos"].index_select(0, cache["sent"])  # rows x K
        return scores.gather(2, pos.unsqueeze(1).expand(-1, scores.size(1), -1))

    def reorder_incremental_state(self, incremental_state, new_order):
        rows = self.get_incremental_state(incremental_state, "cand_rows")
        if rows is not None:  # only the row -> sentence map moves; the gathered weights stay
            self.set_incremental_state(incremental_state, "cand_rows",
                                       {**rows, "sent": rows["sent"].index_select(0, new_order)})
        cached = self.get_incremental_state(incremental_state, "state")
        if cached is None:
            return
        self.set_incremental_state(incremental_state, "state", {
            key: value.index_select(self.STATE_BATCH_DIMS[key], new_order) for key, value in cached.items()})

    def max_positions(self):
        return self.max_positions_


class SmallVocabDecoder(CandidateOutputDecoder):
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
            inp = torch.cat([x[:, t], feed], dim=1)
            for i, cell in enumerate(self.cells):
                hs[i], cs[i] = cell(inp, (hs[i], cs[i]))
                inp = self.dropout(hs[i]) if i + 1 < len(self.cells) else hs[i]
            h = hs[-1]
            scores = torch.bmm(h.unsqueeze(1), keys).squeeze(1).masked_fill(mask, float("-inf"))
            a = F.softmax(scores.float(), dim=-1).type_as(scores)  # B x T_src
            ctx = torch.bmm(a.unsqueeze(1), values).squeeze(1)  # B x 2d
            feed = self.dropout(torch.tanh(self.combine(self.dropout(torch.cat([h, ctx], dim=1)))))
            outs.append(feed)
            attns.append(a)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "state",
                                       {"h": torch.stack(hs), "c": torch.stack(cs), "feed": feed, "keys": keys})
        return torch.stack(outs, dim=1), torch.stack(attns, dim=1)


class CandidateModelMixin:
    """The REINFORCE-aware decoder call and the candidate-space targets that
    the plugin's encoder-decoder models share (``self.decoder`` is a
    ``CandidateOutputDecoder``)."""

    def decode(self, prev_output_tokens, encoder_out, sample_lens=None, greedy_too: bool = False):
        """Teacher-forced decoder output.  With ``sample_lens`` (B: the longest
        sample per example), the same call also samples a sequence per example
        from the model without dropout (``decoder.sample``: the policy) and
        scores the sampled tokens under that same policy
        (``decoder.score_samples``, differentiable), returned in the output's
        extra dict as ``samples`` (and with ``greedy_too``, the greedy decode,
        without gradient, as ``greedy``): one forward, so that REINFORCE works
        through fairseq's distributed wrappers."""
        out = self.decoder(prev_output_tokens, encoder_out)
        if sample_lens is None:
            return out
        dropout = self.decoder.dropout.training
        self.decoder.dropout.eval()  # the policy samples, and is scored, without dropout
        try:
            samples = self.decoder.sample(encoder_out, sample_lens)
            if greedy_too:
                with torch.no_grad():
                    out[1]["greedy"] = self.decoder.sample(encoder_out, sample_lens, greedy=True)
        finally:
            self.decoder.dropout.train(dropout)
        samples.update(self.decoder.score_samples(samples, encoder_out))
        out[1]["samples"] = samples
        return out

    def get_targets(self, sample, net_output):
        """Gold ids as positions in the example's candidates (or unchanged for
        the full softmax).  A gold word outside the candidates (possible on
        validation, never in training, whose candidates include the gold
        words) maps to the position of <unk>."""
        target = sample["target"]
        candidates = net_output[1]["candidates"]
        if not candidates:
            return target
        return candidate_positions(candidates[0], target, self.decoder.dictionary.unk())


@register_model("lstm_smallvocab", dataclass=LSTMSmallVocabConfig)
class LSTMSmallVocabModel(CandidateModelMixin, FairseqEncoderDecoderModel):
    """The paper's 1-layer d = 256 model (arch ``lstm_smallvocab``; a model with a
    dataclass config is also its own arch); ``lstm_smallvocab_big``: 2 layers,
    d = 512."""

    @classmethod
    def build_model(cls, cfg, task):
        encoder = SmallVocabEncoder(task.source_dictionary, cfg.embed_dim, cfg.layers, cfg.dropout,
                                    cfg.max_source_positions)
        decoder = SmallVocabDecoder(task.target_dictionary, cfg.embed_dim, cfg.layers, cfg.dropout,
                                    cfg.max_target_positions)
        return cls(encoder, decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, candidates=None, sample_lens=None,
                greedy_too: bool = False, **kwargs):
        """Teacher-forced decoder output (and samples for REINFORCE, see ``decode``)."""
        encoder_out = self.encoder(src_tokens, src_lengths, candidates=candidates)
        return self.decode(prev_output_tokens, encoder_out, sample_lens, greedy_too)


def sample_categorical(logits: Tensor) -> Tensor:
    """One draw per row from softmax(logits) (B x N -> B x 1), by inverse
    transform sampling: the index where a uniform draw, scaled to the row's
    total weight, falls in the cumulative weights.  The distribution of
    ``torch.multinomial(softmax(logits), 1)``, about 7x (N = 18.7K) to 15x
    (N = 1K) faster on the CPU; words with weight 0 (-inf logits) are never
    chosen."""
    weights = torch.exp(logits - logits.max(-1, keepdim=True).values)
    cdf = weights.cumsum(-1)
    draw = torch.rand(logits.size(0), 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, draw, right=True).clamp_(max=logits.size(-1) - 1)


def candidate_positions(candidates: Tensor, target: Tensor, unk: int) -> Tensor:
    """Each target id's position in its example's candidate row (B x K);
    ids that are not candidates get the position of ``unk`` (its own id, by
    the special-symbols convention).  A sort and a binary search per row:
    memory B x K, not B x |V|."""
    sorted_ids, order = candidates.long().sort(dim=1)
    idx = torch.searchsorted(sorted_ids, target.contiguous()).clamp_(max=candidates.size(1) - 1)
    found = sorted_ids.gather(1, idx).eq(target)
    return torch.where(found, order.gather(1, idx), torch.full_like(idx, unk))


@register_model_architecture("lstm_smallvocab", "lstm_smallvocab_big")
def lstm_smallvocab_big(cfg):
    cfg.embed_dim = getattr(cfg, "embed_dim", 512)
    cfg.layers = getattr(cfg, "layers", 2)
