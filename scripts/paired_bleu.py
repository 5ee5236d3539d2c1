#!/usr/bin/env python3
"""BLEU of several runs per language pair, with sacrebleu's paired bootstrap
against a baseline run: the command of ``smallvocab_tools.analysis.paired_bleu``.

    python scripts/paired_bleu.py --run ce=OUT/ce-k1000 --run rl=OUT/rl-s1 --baseline ce --langs de fr
"""

from smallvocab_tools.analysis.paired_bleu import main

if __name__ == "__main__":
    main()
