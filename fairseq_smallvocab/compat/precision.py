"""The precisions fairseq 0.12's trainer can train in, checked when a task
builds a new model (fairseq-train) so that a flag that cannot work stops the
run with the reason and the fix, before fairseq fails with an assertion or an
AttributeError deep in its trainer.  Decoding (a model built from a
checkpoint) is not checked: it works in half precision on the CPU."""

import torch
from omegaconf.errors import OmegaConfBaseException


def _fairseq_flag(cfg, name) -> bool:
    """A boolean of fairseq's common config seen through the task config; False
    where it cannot be resolved (a task config outside fairseq's full config)."""
    try:
        return getattr(cfg, name, False) is True
    except OmegaConfBaseException:
        return False


def check_training_precision(cfg):
    """fairseq 0.12 trains in --fp16 on CUDA only, and takes --bf16 for a TPU
    run (its options set --tpu), which needs torch_xla."""
    if _fairseq_flag(cfg, "fp16") and not torch.cuda.is_available():
        raise ValueError("training with --fp16 needs a CUDA GPU, and this machine has none (torch.cuda.is_available() "
                         "is False): fairseq's trainer would stop with an assertion. Drop the flag: on the CPU, "
                         "training runs in float32.")
    if _fairseq_flag(cfg, "bf16"):
        import importlib.util

        if importlib.util.find_spec("torch_xla") is None:
            raise ValueError("training with --bf16: fairseq 0.12 takes --bf16 for a TPU run (it sets --tpu) and "
                             "needs torch_xla, which is not installed, so its trainer would stop with an "
                             "AttributeError. Drop the flag (float32), or use --fp16 / --amp on a CUDA GPU.")
