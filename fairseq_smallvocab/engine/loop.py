"""The sampling loop of ``sampling.sample``: what one step of it does to
every row (``Loop.step``), the tensors it reads and writes (``Loop``), the
draw (``sample_categorical``) and what the loop returns (``Samples``).

Step t of row b, with s_bt the decoder state that the step's token feeds:

    z_b = scores of s_bt over the row's K candidates (or V words), pad and bos at -inf
          (and at t = 0, where the row's first token is forced, every other word;
          eos too, where every sample runs to its limit: ``to_limit``)
    y_bt = the index where u_bt * sum exp(z_b) falls in the cumulative exp(z_b)
           (u_bt uniform in [0, 1), drawn for the whole batch at once), or argmax z_b
    H_b += entropy of softmax(z_b);  greedy_b &= (y_bt == argmax z_b)   while b is alive
    alive_b &= (y_bt != eos) and (t + 1 < max_len_b)

With t a Python int the step reads and writes column t by slicing; with t a
0-d device tensor it reads and writes only fixed addresses (``index_copy_``),
which a captured step needs (``capture.py``, which makes one ``Loop`` per
shape bucket and ``load``s each batch into it).
"""

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class Samples:
    """Sequences drawn by ``sampling.sample``, one per row: B x T tensors unless said
    otherwise.  ``sampling.score`` fills ``lprobs`` and replaces ``features``."""

    tokens: Tensor  # target ids, pad after the end
    positions: Tensor  # the chosen index in the row's candidates (the id for the full softmax); eos after the end
    mask: Tensor  # the steps that count, the eos included
    lengths: Tensor  # B: tokens before the eos
    is_greedy: Optional[Tensor] = None  # B, drawn samples only: every token was its step's argmax
    entropy: Optional[Tensor] = None  # B, drawn samples only: summed over the steps, of what was drawn from
    features: Optional[Tensor] = None  # B x T x d: the states that chose each token (kept graph; detached by score)
    probs: Optional[Tensor] = None  # B x T x K: each step's softmax (temperature 1), kept by the sampling loop
    chosen_lprobs: Optional[Tensor] = None  # B x T: log p of the drawn word, with ``probs``
    lprobs: Optional[Tensor] = None  # by score: log p(y_t), differentiable, 0 after the end


def sample_categorical(logits: Tensor, with_entropy: bool = False, with_probs: bool = False,
                       probs_out: Optional[Tensor] = None, uniform: Optional[Tensor] = None):
    """One draw per row from softmax(logits) (B x N -> B x 1), by inverse
    transform sampling: the index where a uniform draw, scaled to the row's
    total weight, falls in the cumulative weights.  The distribution of
    ``torch.multinomial(softmax(logits), 1)``, drawn faster on the CPU;
    words with
    weight 0 (-inf logits) are never chosen.  ``uniform`` (B, in [0, 1)):
    the draws to use, drawn here when not given.  With ``with_entropy`` also
    the entropy of each row's distribution (B, nats), from the same weights:
    with z = logits - max, w = exp(z), Z = sum w, H = log Z - sum(w z) / Z.
    With ``with_probs`` (and ``with_entropy``) also softmax(logits) itself,
    w / Z, made in place of the weights (B x N), in ``probs_out`` when given
    (the sampler's kept buffer: no copy)."""
    shifted = logits - logits.max(-1, keepdim=True).values
    weights = torch.exp(shifted, out=probs_out) if probs_out is not None else torch.exp(shifted)
    cdf = weights.cumsum(-1)
    total = cdf[:, -1:]
    if uniform is None:
        uniform = torch.rand(logits.size(0), dtype=cdf.dtype, device=cdf.device)
    draw = uniform.view(-1, 1).to(cdf.dtype) * total
    choice = torch.searchsorted(cdf, draw, right=True).clamp_(max=logits.size(-1) - 1)
    if not with_entropy:
        return choice
    # -inf logits have weight 0: clamped so that 0 * z stays 0 (a batched dot product, no B x N temporary)
    weighted = torch.bmm(weights.unsqueeze(1), shifted.clamp_(min=-1e4).unsqueeze(2)).view(-1, 1)
    entropy = (total.log() - weighted / total).squeeze(1)
    return (choice, entropy, weights.div_(total)) if with_probs else (choice, entropy)


def excluded_ids(dictionary, to_limit: bool = False):
    """The ids no step may draw (pad, bos; with ``to_limit`` also eos, so that every sample runs to its
    limit: ``SampleRequest.to_limit``)."""
    ids = [dictionary.pad(), dictionary.bos()]  # candidate-space ids equal dictionary ids for specials
    return ids + [dictionary.eos()] if to_limit else ids


def _column(buffer: Tensor, t) -> Tensor:
    """buffer[:, t], for a Python int t or a 0-d device tensor (read on the device: no value baked in)."""
    return buffer[:, t] if not isinstance(t, Tensor) else buffer.index_select(1, t.view(1)).squeeze(1)


def _write(buffer: Tensor, t, value: Tensor):
    """buffer[:, t] = value, for a Python int t or a 0-d device tensor."""
    if isinstance(t, Tensor):
        buffer.index_copy_(1, t.view(1), value.unsqueeze(1))
    else:
        buffer[:, t] = value


class Loop:
    """The sampling loop's state for ``rows`` sequences of at most ``steps``
    tokens: what is drawn (tokens, positions, the steps that count), each
    row's alive flag, greedy flag and summed entropy, and with
    ``store_probs`` each step's softmax over the row's ``width`` words;
    ``k``: each row's candidates (0: the full softmax).  ``step`` advances
    every row by one token; with t a 0-d device tensor it reads and writes
    only fixed addresses (a captured step, ``capture.py``, which makes one
    Loop per shape bucket and ``load``s each batch); with ``to_limit`` no step draws eos, so every row runs
    to its max_len."""

    def __init__(self, dictionary, rows: int, steps: int, width: int, device, greedy: bool, temperature: float,
                 store_probs: bool, k: int = 0, forced: bool = False, to_limit: bool = False):
        self.eos, self.pad = dictionary.eos(), dictionary.pad()
        self.greedy, self.temperature, self.store_probs = greedy, temperature, store_probs
        long = dict(dtype=torch.long, device=device)
        self.tokens = torch.empty(rows, steps + 1, **long)
        self.positions = torch.empty(rows, steps, **long)
        self.mask = torch.empty(rows, steps, dtype=torch.bool, device=device)
        self.max_lens = torch.empty(rows, **long)
        self.alive = torch.empty(rows, dtype=torch.bool, device=device)
        self.is_greedy = torch.empty_like(self.alive)
        self.entropy = torch.empty(rows, dtype=torch.float, device=device)
        self.ids = torch.empty(rows, k, **long) if k else None  # each row's candidates
        self.uniforms = None if greedy else torch.empty(rows, steps, dtype=torch.float, device=device)
        # pages of the buffer are touched only by the steps that run
        self.probs = torch.empty(rows, steps, width, dtype=torch.float, device=device) if store_probs else None
        self.chosen = torch.zeros(rows, steps, dtype=torch.float, device=device) if store_probs else None
        # on the device once, not a list per step
        self.excluded = torch.tensor(excluded_ids(dictionary, to_limit), **long)
        # with ``forced``: the words each row may not draw at t = 0 (all but its forced first token)
        self.not_first = torch.empty(rows, width, dtype=torch.bool, device=device) if forced else None

    def load(self, max_lens: Tensor, candidates: Optional[Tensor], uniforms: Optional[Tensor],
             first: Optional[Tensor] = None):
        """A batch of ``max_lens.size(0)`` rows (at most ``rows``; the rest padded: length 0, never alive),
        with its candidates, its uniform draws (rows x steps) and, for a loop made ``forced``, each row's
        first token (its index in the row's candidates; -1: drawn as any other)."""
        bsz = max_lens.size(0)
        self.tokens.fill_(self.pad)
        self.tokens[:, 0] = self.eos  # fairseq's decoders start from eos
        self.positions.fill_(self.eos)
        self.mask.zero_()
        self.max_lens.zero_()
        self.max_lens[:bsz] = max_lens
        torch.gt(self.max_lens, 0, out=self.alive)
        self.is_greedy.copy_(self.alive)
        self.entropy.zero_()
        if self.ids is not None:
            assert candidates is not None  # a loop made with k > 0 candidates is loaded with them
            self.ids.zero_()
            self.ids[:bsz] = candidates
        if self.uniforms is not None:
            assert uniforms is not None  # a loop that draws (not greedy) is loaded with its uniform draws
            self.uniforms.fill_(0.5)
            self.uniforms[:bsz, : uniforms.size(1)] = uniforms
        if self.not_first is not None:
            assert first is not None  # a loop made ``forced`` is loaded with each row's first token
            self.not_first.zero_()
            rows = first.ge(0).nonzero().view(-1)
            self.not_first[rows] = True
            self.not_first[rows, first[rows]] = False

    def step(self, state, scorer, t, keep_graph: bool = False) -> Tensor:
        """Draw token t of every row (t: a Python int, or a 0-d device tensor); returns the decoder states
        that chose them (rows x d, with their graph under ``keep_graph``)."""
        tokens = _column(self.tokens, t)
        # a kept graph may hold the input ids (an embedding's backward does): not a view of ``tokens``
        s = state.step(tokens.clone() if keep_graph else tokens, t)
        alive = self.alive
        with torch.no_grad():
            logits = scorer(s).float()
            logits.index_fill_(1, self.excluded, float("-inf"))
            if self.not_first is not None and (isinstance(t, Tensor) or t == 0):  # the forced first token
                logits.masked_fill_(self.not_first & t.eq(0) if isinstance(t, Tensor) else self.not_first,
                                    float("-inf"))
            if self.greedy:
                choice = logits.argmax(-1)
            else:
                assert self.uniforms is not None  # made for every loop that draws (not greedy)
                # at temperature 1 the draw's own weights, normalized, are the model's distribution
                reuse = self.store_probs and self.temperature == 1.0
                in_place = reuse and not isinstance(t, Tensor)  # written straight into the kept buffer
                probs_out: Optional[Tensor] = None
                if in_place:
                    assert self.probs is not None  # made with store_probs, which in_place implies
                    probs_out = self.probs[:, t]
                drawn = sample_categorical(logits if self.temperature == 1.0 else logits / self.temperature,
                                           with_entropy=True, with_probs=reuse,
                                           probs_out=probs_out,
                                           uniform=_column(self.uniforms, t))
                choice, step_entropy = drawn[0].squeeze(1), drawn[1]
                self.entropy += step_entropy.masked_fill(~alive, 0.0)
                self.is_greedy &= choice.eq(logits.argmax(-1)) | ~alive
                if self.store_probs:  # the model's own distribution (temperature 1), for the gradient
                    assert self.probs is not None and self.chosen is not None  # made with store_probs
                    p = drawn[2] if reuse else logits.softmax(-1)
                    if not in_place:
                        _write(self.probs, t, p)
                    # a drawn word has weight > 0, so its log-probability is finite
                    _write(self.chosen, t, p.gather(1, choice.unsqueeze(1)).squeeze(1).log())
            ids = choice if self.ids is None else self.ids.gather(1, choice.unsqueeze(1)).squeeze(1)
            _write(self.positions, t, choice)
            _write(self.mask, t, alive)
            _write(self.tokens, t + 1, ids.masked_fill(~alive, self.pad))
            alive &= ids.ne(self.eos) & (self.max_lens > t + 1)  # in place: a captured step's fixed address
        return s

    def run(self, steps: int, every: int, step) -> None:
        """The loop's driver, the eager loop's and a bucket's replays alike: ``step(t)`` for t = 0, 1, ... up
        to ``steps``, stopped early when no row is still going, asked every ``every`` steps (on a GPU each
        question is a host sync)."""
        for t in range(steps):
            step(t)
            if (t + 1) % every == 0 and not self.alive.any():
                break

    def samples(self, bsz: int, states=None, copy: bool = False) -> Samples:
        """The first ``bsz`` rows' samples, trimmed to the steps with a live row (``copy``: not views of the
        loop's buffers, which the next batch overwrites)."""
        mask = self.mask[:bsz]
        done = int(mask.any(0).sum())  # the steps with a live row: a prefix (rows that end stay ended)
        mask = mask[:, :done]
        out = self.tokens[:bsz, 1: done + 1]
        take = (lambda x: x.clone()) if copy else (lambda x: x)
        result = Samples(tokens=take(out), positions=self.positions[:bsz, :done].masked_fill(~mask, self.eos),
                         mask=take(mask), lengths=(mask & out.ne(self.eos)).sum(1))
        if not self.greedy:
            result.is_greedy, result.entropy = take(self.is_greedy[:bsz]), take(self.entropy[:bsz])
        if states is not None:
            result.features = torch.stack(states[:done], 1) if done else None
        if self.store_probs:
            assert self.probs is not None and self.chosen is not None  # made with store_probs
            result.probs, result.chosen_lprobs = take(self.probs[:bsz, :done]), take(self.chosen[:bsz, :done])
        return result
