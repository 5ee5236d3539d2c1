#!/usr/bin/env python3
"""Average the parameters of a run's last epoch checkpoints into one (as fairseq's own average_checkpoints.py,
which its PyPI package does not ship): the command of ``smallvocab_tools.train.average``.

    python scripts/average_checkpoints.py --inputs checkpoints/ce --num-epoch-checkpoints 5 \
      --output checkpoints/ce/checkpoint_avg.pt
"""

from smallvocab_tools.train.average import main

if __name__ == "__main__":
    main()
