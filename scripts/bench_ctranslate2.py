#!/usr/bin/env python3
"""An exported CTranslate2 model on a split: BLEU with and without its vocabulary map, tokens/s per batch size
and compute type: the command of ``smallvocab_tools.deploy.ctranslate2_bench``.

    python scripts/bench_ctranslate2.py --model DIR [--split test] [--threads N] [--tokenize 13a] \\
        [--compare plugin=HYPS.txt] [--out DIR]
"""

from smallvocab_tools.deploy.ctranslate2_bench import main

if __name__ == "__main__":
    main()
