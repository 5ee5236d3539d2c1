#!/usr/bin/env python3
"""The quick start's time budget (BUDGET=60m): the plan of each step's minutes, and each training's
--stop-time-hours at its start: the command of ``smallvocab_tools.train.time_budget``.

    python scripts/time_budget.py check 60m
    python scripts/time_budget.py plan --budget 60m --spent 95 --steps vp ce rl --does-it-pay OUT/does-it-pay.json \
      --dev-sentences 1014 --test-sentences 1000 --models 2 --export --caps vp=20 ce=4000 rl=500 --out OUT/budget.json
    python scripts/time_budget.py limit --plan OUT/budget.json --step ce --spent 300
"""

import sys

from smallvocab_tools.train.time_budget import main

if __name__ == "__main__":
    sys.exit(main())
