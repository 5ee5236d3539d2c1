#!/usr/bin/env python3
"""Choose fairseq-generate's --lenpen on a dev set for one checkpoint, from one
beam search: the command of ``smallvocab_tools.analysis.lenpen_sweep``.

    python scripts/sweep_lenpen.py --path CKPT --data DATA --beam 5 -- \\
        --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de --cpu
"""

from smallvocab_tools.analysis.lenpen_sweep import main

if __name__ == "__main__":
    main()
