"""How many updates one epoch of fairseq-train makes with the given flags: the batches of its training split, made
as fairseq-train makes them (the task's own batch iterator, ``--max-tokens`` / ``--batch-size``,
``--required-batch-size-multiple``, the positions filter), divided by ``--update-freq``.  A schedule that must end
at an epoch's end (``polynomial_decay``'s ``--total-num-update``) is sized by it.

    python scripts/updates_per_epoch.py DATA --task translation -s en -t de --arch transformer --max-tokens 4096
"""

import math
import sys
from typing import List, Optional


def updates_per_epoch(argv: List[str]) -> int:
    """The updates of one training epoch of ``fairseq-train ARGV`` (the same flags; nothing is trained)."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    task = tasks.setup_task(cfg.task)
    split = cfg.dataset.train_subset
    task.load_dataset(split, epoch=1, combine=False)
    model = task.build_model(cfg.model)
    iterator = task.get_batch_iterator(
        task.dataset(split), max_tokens=cfg.dataset.max_tokens, max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions(),
                                                  cfg.dataset.max_tokens),
        ignore_invalid_inputs=True, required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed, num_shards=1, shard_id=0, epoch=1)
    return math.ceil(len(iterator.frozen_batches) / cfg.optimization.update_freq[0])


def main(argv: Optional[List[str]] = None):
    print(updates_per_epoch(sys.argv[1:] if argv is None else argv))
