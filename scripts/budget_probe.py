#!/usr/bin/env python3
"""Measure fine-tuning arms' seconds per update, interleaved, and turn a budget in seconds into each arm's
updates: the command of ``smallvocab_tools.train.budget``.

    python scripts/budget_probe.py --arm ce="--ce-weight 1" --arm rf4="--rl-samples 4" --json OUT/speed.json \
      -- DATA --user-dir fairseq_smallvocab ...
    python scripts/budget_probe.py --json OUT/speed.json --budget 3600 --arm-updates rf4
"""

from smallvocab_tools.train.budget import main

if __name__ == "__main__":
    main()
