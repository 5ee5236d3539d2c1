"""Everything the plugin changes in fairseq and torch when it is loaded: the one list (``PATCHES``) and the one
place that installs it (``install``, called once by the package's ``__init__``).

Each patch says what of fairseq's or torch's behaviour it changes, why, the versions it assumes, whether it
acts on stock tasks and models (or only on the plugin's), and the attributes it replaces (``targets``: a test
snapshots fairseq, torch, warnings and logging before and after the import and finds exactly these).
docs/checkpoints.md shows the same list (``table()``; a test compares them).

The switch: the environment variable ``SMALLVOCAB_COMPAT``, read when the plugin is imported (``--user-dir``):

* unset, ``on``: every patch;
* ``off``: none: the plugin registers its tasks, models and criteria and changes nothing else, so a stock
  command with ``--user-dir`` runs exactly as fairseq alone (its files, log lines and errors; on torch >= 2.6
  that includes fairseq's failure to load its own checkpoints, unless ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``);
* a comma list of patches to leave out, each with a leading ``-``: ``SMALLVOCAB_COMPAT=-pace,-quiet_logs``.

Not patches (nothing is replaced): ``precision``, which the plugin's tasks call to refuse a precision fairseq
0.12 cannot train in, and ``registry``, which imports the plugin's modules so that their ``@register_*`` run and
registers a former criterion name as an alias."""

import os
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from fairseq_smallvocab.compat.evaluated_config import EVALUATING_MODULES

ENV = "SMALLVOCAB_COMPAT"
# the fairseq versions the patches were written for (CI runs the second)
FAIRSEQ = "fairseq 0.12.2 / fairseq-fixed 0.12.3.1"


@dataclass(frozen=True)
class Patch:
    name: str  # its name in SMALLVOCAB_COMPAT
    changes: str  # what of fairseq's / torch's behaviour it changes
    why: str
    assumes: str  # the versions it was written for
    stock: str  # whether it acts on stock tasks and models
    targets: Tuple[str, ...]  # the attributes it replaces (dotted), or "warnings"/"logging:NAME" for filters
    install: Callable[[], None]


def _install(module: str, function: str = "install") -> Callable[[], None]:
    def install():
        import importlib

        getattr(importlib.import_module(f"fairseq_smallvocab.compat.{module}"), function)()

    return install


PATCHES = (
    Patch("checkpoint_loading",
          "fairseq's torch.load of a checkpoint (load_checkpoint_to_cpu, and the workers' copy of it in "
          "distributed training) passes weights_only=True and allows the types fairseq checkpoints hold, for "
          "that load only; its errors name the file and the fix, and stay catchable as torch's "
          "(pickle.UnpicklingError, EOFError, ...)",
          "torch >= 2.6 refuses fairseq's checkpoints (argparse.Namespace); weights_only=False would let a "
          "checkpoint run code. TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 is honoured, as torch honours it",
          f"torch >= 2.4; {FAIRSEQ}", "yes",
          ("fairseq.checkpoint_utils.torch", "fairseq.distributed.utils.torch"),
          _install("checkpoint_loading")),
    Patch("evaluated_config",
          "the eval that fairseq.utils (eval_bool, eval_str_list, eval_str_dict) and 16 modules call on config "
          "values builds literals only; a loaded checkpoint whose config holds anything else there is refused",
          "fairseq evaluates config values it unpickled: a checkpoint could run code through them",
          FAIRSEQ, "yes", tuple(f"{name}.eval" for name in ("fairseq.utils", *EVALUATING_MODULES)),
          _install("evaluated_config")),
    Patch("task_state",
          "fairseq-train saves a task's checkpoint_state() in each checkpoint and restores it on resume (not when "
          "fine-tuning); before saving, calls the task's report_validation() and check_before_save()",
          "the plugin's learned baseline lives in the task; fairseq 0.12.2 has no task hooks; no checkpoint from "
          "a stretch of non-finite batches",
          FAIRSEQ, "no: only tasks that define those methods (the plugin's)",
          ("fairseq.trainer.Trainer.save_checkpoint", "fairseq.checkpoint_utils.save_checkpoint",
           "fairseq.checkpoint_utils.load_checkpoint"),
          _install("train_checkpoints", "install_task_state")),
    Patch("checkpoint_files",
          "copies to checkpoint_last/best go through a temporary file and a rename; once fairseq's own checks "
          "passed and it loads (Trainer.load_checkpoint), a second trainer on an existing --save-dir is refused "
          "(.fairseq-train.lock) and killed runs' temporary checkpoint files there are removed; a checkpoint that "
          "cannot be loaded names the newest other one, an architecture mismatch the flags to use",
          "fairseq copies in place (a kill leaves a truncated checkpoint_last.pt); two trainers on one folder "
          "overwrite each other's files",
          FAIRSEQ, "yes",
          ("fairseq.trainer.Trainer.load_checkpoint", "fairseq.checkpoint_utils.PathManager"),
          _install("train_checkpoints", "install_checkpoint_files")),
    Patch("former_options",
          "a hydra config section that sets a former option of the plugin's criterion (+criterion.rl_capture=off, "
          "one of the device options --rl-engine replaced) is refused naming what replaced it when fairseq merges "
          "it into the criterion's dataclass (merge_with_parent, called by add_defaults)",
          "omegaconf's ConfigKeyError said only that the key is not in SmallVocabReinforceConfig",
          FAIRSEQ, "no: only the plugin's dataclasses that name former options",
          ("fairseq.dataclass.utils.merge_with_parent",), _install("former_options")),
    Patch("grad_clip",
          "utils.clip_grad_norm_ computes the norm where the gradients are when all are on the CPU; installed "
          "only where torch sees a GPU",
          "fairseq 0.12 computes it on the GPU even for --cpu training, and then fails",
          FAIRSEQ, "yes", ("fairseq.utils.clip_grad_norm_",), _install("grad_clip")),
    Patch("interactive_input",
          "fairseq-interactive's reader (buffered_read) ends with a message on input that is not UTF-8",
          "fairseq stops with a UnicodeDecodeError traceback", FAIRSEQ, "yes",
          ("fairseq_cli.interactive.buffered_read",), _install("interactive_input")),
    Patch("pace",
          "fairseq-train logs the seconds per update and the time to its budget after its first updates, and "
          "again with validation after the first validation (Trainer.train_step, valid_step, get_train_iterator "
          "wrapped; what they return is unchanged)",
          "a run's cost known within its first minute", FAIRSEQ, "yes",
          ("fairseq.trainer.Trainer.train_step", "fairseq.trainer.Trainer.valid_step",
           "fairseq.trainer.Trainer.get_train_iterator"),
          _install("pace")),
    Patch("data_buffer_exit",
          "at exit, before the interpreter's teardown, fairseq's data-buffer threads (BufferedIterator's "
          "BackgroundConsumer) still running are stopped after the batch under way (their queues emptied)",
          "a run stopped by --max-update while that thread collates inside torch aborted at exit (134, "
          "pytorch/pytorch#38228) after saving its checkpoints; scripts under set -e stopped there",
          FAIRSEQ, "yes", ("fairseq.data.iterators.BufferedIterator._create_consumer",),
          _install("data_buffer_exit")),
    Patch("quiet_logs",
          "Python's warning filters leave out the hydra deprecation warnings fairseq 0.12 causes (five patterns, "
          "from any code in the process), and the sacrebleu logger passes each of its messages once",
          "noise nobody running fairseq can act on (hydra >= 1.1; sacrebleu on tokenized text)",
          f"{FAIRSEQ}; hydra >= 1.1", "yes", ("warnings", "logging:sacrebleu"), _install("quiet_logs")),
)

NAMES = tuple(p.name for p in PATCHES)

_installed: Tuple[str, ...] = ()  # the patches installed in this process (by ``install``, at import)


def chosen(value: Optional[str]) -> Tuple[Patch, ...]:
    """The patches that ``SMALLVOCAB_COMPAT=value`` asks for (see the module doc)."""
    value = (value or "").strip()
    if value.lower() in ("", "on"):
        return PATCHES
    if value.lower() == "off":
        return ()
    items = [item.strip() for item in value.split(",") if item.strip()]
    bad = [item for item in items if not item.startswith("-") or item[1:] not in NAMES]
    if bad or not items:
        why = [f"{item!r} needs a leading '-'" if item in NAMES else f"{item!r} names no patch" for item in bad]
        raise ValueError(
            f"{ENV}={value!r}: {'; '.join(why) or 'it names nothing'}. Use 'on' (the default), 'off' (no patch), "
            f"or a comma list of patches to leave out, each with a leading '-' (e.g. {ENV}=-pace,-quiet_logs); the "
            f"patches: {', '.join(NAMES)} (docs/checkpoints.md says what each does)")
    left_out = {item[1:] for item in items}
    return tuple(p for p in PATCHES if p.name not in left_out)


def install(environ=None) -> Tuple[str, ...]:
    """Install the patches ``SMALLVOCAB_COMPAT`` asks for (every one where it is unset), once in a process; the
    names of those installed."""
    global _installed
    environ = os.environ if environ is None else environ
    for patch in chosen(environ.get(ENV)):
        if patch.name not in _installed:
            patch.install()
            _installed = _installed + (patch.name,)
    return _installed


def installed(name: str) -> bool:
    """Whether the patch ``name`` is installed in this process (grad_clip's then replaces fairseq's function
    where torch sees a GPU, and only there)."""
    if name not in NAMES:
        raise KeyError(f"no patch named {name!r}: {', '.join(NAMES)}")
    return name in _installed


def table() -> str:
    """The list as docs/checkpoints.md shows it (a markdown table)."""
    rows = ["| patch | what changes in fairseq / torch | why | assumes | acts on stock tasks |",
            "|---|---|---|---|---|"]
    rows += [f"| `{p.name}` | {p.changes} | {p.why} | {p.assumes} | {p.stock} |" for p in PATCHES]
    return "\n".join(rows)
