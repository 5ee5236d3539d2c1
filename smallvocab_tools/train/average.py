"""Average the parameters of a run's last epoch checkpoints into one checkpoint, as fairseq's
``scripts/average_checkpoints.py`` does (which the PyPI package does not ship): a converged, annealed run's last
epochs averaged make the start that every fine-tuning arm forks from.

Each input is read with fairseq's loader through the plugin's safe one (``compat/checkpoint_loading.py``:
nothing in a checkpoint runs); the parameters are averaged in float64 and stored in each one's own dtype; every
other field (config, optimizer state, training state) is the newest input's; the output is written to a
temporary file beside it and moved into place, so an interrupted run never leaves half a checkpoint.

    python scripts/average_checkpoints.py --inputs checkpoints/ce --num-epoch-checkpoints 5 \
      --output checkpoints/ce/checkpoint_avg.pt
"""

import argparse
import os
import re
import sys
from pathlib import Path
from typing import List, Optional, Sequence

EPOCH_CHECKPOINT = re.compile(r"checkpoint(\d+)\.pt")


def last_epoch_checkpoints(folder, count: int) -> List[Path]:
    """The ``count`` epoch checkpoints (checkpointE.pt) of ``folder`` with the highest E, newest first; an error
    that says what is there when there are fewer."""
    found = sorted(((int(m.group(1)), p) for p in Path(folder).iterdir()
                    if (m := EPOCH_CHECKPOINT.fullmatch(p.name))), reverse=True)
    if len(found) < count:
        raise ValueError(f"{folder} holds {len(found)} epoch checkpoints (checkpointE.pt: "
                         f"{', '.join(p.name for _, p in found) or 'none'}), fewer than the {count} asked for: train "
                         "with --keep-last-epochs N (not --no-epoch-checkpoints), or ask for fewer")
    return [p for _, p in found[:count]]


def average(paths: Sequence[Path]) -> dict:
    """The newest (first) checkpoint's state with its ``model`` replaced by the mean of every input's."""
    from fairseq_smallvocab.compat.checkpoint_loading import read_checkpoint  # fairseq's loader, read safely

    newest, sums = None, None
    for path in paths:
        state = read_checkpoint(path)
        model = state["model"]
        if sums is None:
            newest, sums = state, {k: v.double() if v.is_floating_point() else v.clone() for k, v in model.items()}
            continue
        if set(model) != set(sums):
            raise ValueError(f"{path} holds other parameters than {paths[0]} "
                             f"({sorted(set(model) ^ set(sums))[:5]}): average checkpoints of one run")
        for k, v in model.items():
            if v.shape != sums[k].shape:
                raise ValueError(f"{path}: parameter {k} is {tuple(v.shape)}, {tuple(sums[k].shape)} in "
                                 f"{paths[0]}: average checkpoints of one run")
            if v.is_floating_point():
                sums[k] += v.double()
    newest["model"] = {k: (v / len(paths)).to(newest["model"][k].dtype) if v.is_floating_point() else v
                       for k, v in sums.items()}
    return newest


def write(state: dict, output: Path):
    """Saved through a temporary file in the output's folder, then moved into place."""
    import torch  # here, not at the top: --help answers without importing torch

    tmp = output.with_name(output.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, output)


def main(argv: Optional[List[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint files, or one run's folder with --num-epoch-checkpoints")
    parser.add_argument("--num-epoch-checkpoints", type=int, default=None,
                        help="average this many of the folder's last epoch checkpoints (checkpointE.pt)")
    parser.add_argument("--output", required=True, help="the averaged checkpoint")
    args = parser.parse_args(argv)
    if args.num_epoch_checkpoints is not None:
        if len(args.inputs) != 1 or not Path(args.inputs[0]).is_dir():
            parser.error("--num-epoch-checkpoints takes one run's folder as --inputs")
        if args.num_epoch_checkpoints < 1:
            parser.error(f"--num-epoch-checkpoints must be >= 1, got {args.num_epoch_checkpoints}")
        paths = last_epoch_checkpoints(args.inputs[0], args.num_epoch_checkpoints)
    else:
        paths = [Path(p) for p in args.inputs]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            parser.error(f"not a file: {', '.join(missing)}")
    output = Path(args.output)
    if not output.parent.is_dir():
        parser.error(f"--output {output}: the folder {output.parent} does not exist")
    if output.resolve() in {p.resolve() for p in paths}:
        parser.error(f"--output {output} is one of the inputs: write the average to a file of its own")
    try:
        write(average(paths), output)
    except ValueError as err:
        sys.exit(f"error: {err}")
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}")
