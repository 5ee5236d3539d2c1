#!/usr/bin/env python3
"""Export a plugin checkpoint to CTranslate2, with a vocabulary map made from its predictor: the command of
``smallvocab_tools.deploy.ctranslate2_export``.

    python scripts/export_ctranslate2.py --path CHECKPOINT --data DATA_BIN --out DIR \\
        [--quantization int8|float16|float32] [--vmap-from PREDICTOR [--threads N]]

With --vmap-from it checks whether the map pays here, timing the Deploy code's call on --threads threads (default:
OMP_NUM_THREADS, else 2), each round said on stderr as it ends (docs/deploy.md).
"""

from smallvocab_tools.deploy.ctranslate2_export import main

if __name__ == "__main__":
    main()
