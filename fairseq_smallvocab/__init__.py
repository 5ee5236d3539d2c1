"""fairseq-smallvocab: fast reinforcement learning for sentence generation by
vocabulary prediction (Hashimoto & Tsuruoka, NAACL 2019), as a fairseq plugin.

Load it with ``--user-dir path/to/fairseq_smallvocab`` on any fairseq command
line, or ``import fairseq_smallvocab`` from Python.  Importing the package

* allow-lists the exact types that fairseq checkpoints pickle for fairseq's
  own loads (not for other ``torch.load`` calls), so that ``torch.load`` with
  ``weights_only=True`` (the default since torch 2.6, and passed explicitly
  wherever fairseq loads a checkpoint) can read checkpoints written by
  ``fairseq-train`` and a checkpoint cannot run code, and
* makes fairseq evaluate only literals where it evaluates a config value
  (``compat/evaluated_config.py``: ``eval_bool``, ``eval_str_list``, layer
  specs), so that no config, a checkpoint's or one built in Python, runs
  code, and
* registers the plugin's tasks, models and criteria with fairseq's registries,
  and
* on a machine where torch sees a GPU, lets ``fairseq-train --cpu
  --clip-norm`` run (``compat/grad_clip.py``: fairseq 0.12 computes the norm
  on the GPU there), and
* saves the tasks' own state in fairseq-train's checkpoints on every fairseq
  0.12, makes its copies to checkpoint_last/best atomic and keeps one trainer
  per --save-dir once fairseq's own checks have passed
  (``compat/train_checkpoints.py``), and
* in fairseq-interactive, says so when its input is not UTF-8
  (``compat/interactive_input.py``), and
* in fairseq-train, logs the seconds per update and the time to the run's
  budget after its first updates (``compat/pace.py``), and
* leaves out the hydra deprecation warnings fairseq 0.12 causes on every
  command, and repeats of sacrebleu's warnings (``compat/quiet_logs.py``).
"""

__version__ = "0.1.0"

try:
    import fairseq  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without fairseq
    if exc.name != "fairseq":
        raise
    raise ImportError(
        "fairseq_smallvocab needs fairseq 0.12 (on Python >= 3.11 install the "
        "PyPI package 'fairseq-fixed==0.12.3.1', which imports as 'fairseq'); "
        "see README.md, 'Installing into an existing fairseq environment'"
    ) from exc

from fairseq_smallvocab.compat import (  # noqa: E402
    checkpoint_loading,
    evaluated_config,
    grad_clip,
    interactive_input,
    pace,
    quiet_logs,
    train_checkpoints,
)

evaluated_config.install()
checkpoint_loading.install()
grad_clip.install()
train_checkpoints.install_task_state()
train_checkpoints.install_checkpoint_files()
interactive_input.install()
pace.install()
quiet_logs.install()

from fairseq_smallvocab import criterions, models, tasks  # noqa: E402,F401
