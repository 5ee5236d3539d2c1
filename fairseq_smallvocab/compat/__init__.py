"""What the plugin changes in fairseq 0.12 and torch so that they work
together, installed when the package is imported: safe checkpoint loading
under torch >= 2.6 (``checkpoint_loading``), no code run from a config
value that fairseq evaluates (``evaluated_config``), gradient clipping of CPU
training on a machine with a GPU (``grad_clip``), and fairseq-train's
checkpoints (``train_checkpoints``: task state on every 0.12, atomic copies,
one trainer per --save-dir), and fairseq-interactive's input that is not
UTF-8 (``interactive_input``), fairseq-train's seconds per update and time to its budget said after the
first updates (``pace``), the hydra warnings fairseq 0.12 causes and
repeated sacrebleu warnings left out (``quiet_logs``); and ``precision``, which the plugin's tasks call
to refuse training in a precision fairseq 0.12 cannot train in; ``registry``: the plugin's modules imported
so that their fairseq ``@register_*`` run, and a former name registered as an alias."""
