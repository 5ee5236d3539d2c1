"""How many updates one epoch of fairseq-train makes with the given flags: the batches of its training split, made
as fairseq-train makes them (the task's own batch iterator, ``--max-tokens`` / ``--batch-size``,
``--required-batch-size-multiple``, the positions filter), divided by ``--update-freq``.  A schedule that must end
at an epoch's end (``polynomial_decay``'s ``--total-num-update``) is sized by it.

    python scripts/updates_per_epoch.py DATA --task translation -s en -t de --arch transformer --max-tokens 4096
"""

import argparse
import math
import sys
from pathlib import Path
from typing import List, Optional

USAGE = ("smallvocab-updates-per-epoch DATA --task TASK --arch ARCH [fairseq-train's other flags: -s/-t, "
         "--max-tokens / --batch-size, --update-freq, --user-dir, ...]")


class UsageError(ValueError):
    """The flags cannot be those of a fairseq-train run: what is wrong and the fix."""


def updates_per_epoch(argv: List[str]) -> int:
    """The updates of one training epoch of ``fairseq-train ARGV`` (the same flags; nothing is trained); a
    UsageError where ARGV lacks the data folder or --arch, or the data folder is not a binarized corpus."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    if not argv:
        raise UsageError("give the binarized data folder and fairseq-train's flags (at least --task and --arch)")
    try:
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
    except RuntimeError:  # fairseq's, bare, for a run without --arch
        raise UsageError("no --arch: give the model's architecture as fairseq-train takes it (e.g. --arch "
                         "transformer), the same flags as the training run's") from None
    for folder in utils.split_paths(args.data):
        if not Path(folder).is_dir():
            raise UsageError(f"the data folder {folder} does not exist: give the folder fairseq-preprocess wrote "
                             "(its dict.*.txt and train.* files), as fairseq-train takes it")
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    split = cfg.dataset.train_subset
    try:
        task = tasks.setup_task(cfg.task)
        task.load_dataset(split, epoch=1, combine=False)
    except FileNotFoundError as err:
        raise UsageError(f"{args.data} is not a binarized corpus of these flags ({err}): give the folder "
                         f"fairseq-preprocess wrote, with its languages (-s/-t) and training split "
                         f"(--train-subset {split})") from None
    model = task.build_model(cfg.model)
    iterator = task.get_batch_iterator(
        task.dataset(split), max_tokens=cfg.dataset.max_tokens, max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions(),
                                                  cfg.dataset.max_tokens),
        ignore_invalid_inputs=True, required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed, num_shards=1, shard_id=0, epoch=1)
    return math.ceil(len(iterator.frozen_batches) / cfg.optimization.update_freq[0])


def main(argv: Optional[List[str]] = None):
    # only what can be told before fairseq is imported (seconds): the rest of the flags are fairseq-train's
    parser = argparse.ArgumentParser(prog="smallvocab-updates-per-epoch", usage=USAGE, allow_abbrev=False,
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Every other flag is fairseq-train's (fairseq-train --help lists them).")
    parser.add_argument("--arch", "-a", help="the model's architecture, as fairseq-train takes it (required)")
    argv = sys.argv[1:] if argv is None else argv
    known, _ = parser.parse_known_args(argv)
    if not argv:
        parser.error("give the binarized data folder and fairseq-train's flags (at least --task and --arch)")
    if known.arch is None:
        parser.error("no --arch: give the model's architecture as fairseq-train takes it (e.g. --arch transformer), "
                     "with the same flags as the training run's")
    try:
        print(updates_per_epoch(argv))
    except UsageError as err:
        parser.error(str(err))
