#!/usr/bin/env python3
"""The table and figure of examples/translation/run_rl_budget_multi30k.sh (fine-tuning arms at equal seconds from
one converged start, each against the control arm with a paired bootstrap, per seed and pooled): the command of
``smallvocab_tools.analysis.budget_report``.

    python scripts/rl_budget_report.py checkpoints/rl-budget-multi30k.en-de --data data-bin/multi30k.en-de --tgt de \
      --control ce-k500 --markdown table.md --png dev_bleu_seconds.png --json runs.json
"""

from smallvocab_tools.analysis.budget_report import main

if __name__ == "__main__":
    main()
