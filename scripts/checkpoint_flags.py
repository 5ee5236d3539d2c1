#!/usr/bin/env python3
"""Print the flags that rebuild a fairseq checkpoint's model (--arch and the model flags that differ from what the
arch sets), for --finetune-from-model: the command of ``smallvocab_tools.analysis.checkpoint_flags``.

    python scripts/checkpoint_flags.py checkpoints/transformer/checkpoint_best.pt
"""

from smallvocab_tools.analysis.checkpoint_flags import main

if __name__ == "__main__":
    main()
