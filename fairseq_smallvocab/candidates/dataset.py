"""The dataset that attaches each example's candidates to its batches: the
tasks wrap their split datasets in ``CandidateDataset`` with the split's
lists (``candidates.source``), and every collated batch carries
``net_input["candidates"]`` (B x K target ids, ``candidates.space``'s rows),
which the restricted model and the generator take."""

import numpy as np
import torch

from fairseq_smallvocab.data.datasets import KeepLastBatchDataset


class CandidateDataset(KeepLastBatchDataset):
    """Adds ``net_input["candidates"]`` (B x K) to the wrapped dataset's batches."""

    def __init__(self, dataset, rows: np.ndarray):
        super().__init__(dataset)
        if len(rows) != len(dataset):
            raise ValueError(f"{len(rows)} candidate rows for {len(dataset)} examples")
        self.rows = rows

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if batch:  # the wrapped collater may reorder: index rows by the batch's ids
            batch["net_input"]["candidates"] = torch.from_numpy(self.rows[batch["id"].numpy()].astype(np.int64))
        return batch
