"""Step-wise scoring inside each decoding row's candidates (sampling, beam
search): ``UnionScorer`` gathers the output rows of the batch's candidate
union once and scores every step with one product.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_smallvocab.output.restricted import batch_union, gather_rows

# the fewest decoding rows for which ``UnionScorer`` makes the union's scores transposed on the CPU, by default
# (see there; REINFORCE's comes from its ``EngineSettings``)
TRANSPOSED_MIN_ROWS = 32


class UnionScorer:
    """Step-wise scoring (sampling, beam search) inside each row's candidates:
    the rows of W and b for the union U of the batch's candidates are gathered
    once; every step then scores U for all rows with one matrix product
    (memory traffic |U| x d, against rows x K x d for per-example rows) and
    picks each row's K out of it.  ``sent`` maps each decoding row to its
    example and follows the generator's reorderings (``reorder``).  Without
    candidates it scores the whole vocabulary.  No gradient."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], candidates: Optional[Tensor],
                 transposed_min_rows: int = TRANSPOSED_MIN_ROWS):
        self.transposed_min_rows = transposed_min_rows
        weight = weight.detach()
        bias = None if bias is None else bias.detach()
        if candidates is None:
            self.weight, self.bias, self.pos = weight, bias, None
        else:
            union, self.pos = batch_union(candidates)
            self.weight = gather_rows(weight, union)
            self.bias = None if bias is None else gather_rows(bias, union)
        self.sent = None if candidates is None else torch.arange(len(candidates), device=candidates.device)
        self.row_pos = self.pos  # each row's K positions in U (made again after a reordering, when next used)

    def reorder(self, new_order: Tensor):
        if self.sent is not None:
            self.sent = self.sent.index_select(0, new_order)
            self.row_pos = None

    def __call__(self, features: Tensor) -> Tensor:
        """rows x d (or rows x T x d) states -> rows x K (or rows x T x K) logits."""
        features = features.to(self.weight.dtype)
        if (self.pos is not None and features.dim() == 2 and features.size(0) >= self.transposed_min_rows
                and features.device.type == "cpu"):
            # the union's scores made as W_U s^T (|U| x rows) and read through a transposed view: on the
            # CPU (MKL) this orientation is faster than F.linear's rows x |U| from some tens of rows on and
            # slower for a few rows, hence the floor (measured with benchmark.py --ab transposed_min_rows=...);
            # not measured on CUDA, which keeps F.linear
            bias = self.bias
            scores = (torch.mm(self.weight, features.t()) if bias is None
                      else torch.addmm(bias.unsqueeze(1), self.weight, features.t())).t()
        else:
            scores = F.linear(features, self.weight, self.bias)
        if self.pos is None:
            return scores
        if self.row_pos is None:
            assert self.sent is not None  # made with ``pos`` (both from the candidates)
            self.row_pos = self.pos.index_select(0, self.sent)
        pos = self.row_pos
        if scores.dim() == 3:
            pos = pos.unsqueeze(1).expand(-1, scores.size(1), -1)
        return scores.gather(-1, pos)
