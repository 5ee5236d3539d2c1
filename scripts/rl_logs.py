#!/usr/bin/env python3
"""Summaries of fairseq-train logs of CE and REINFORCE runs (``table``,
``start-epochs``) and of the Transformer-RL recipe's folders (``recipe``,
``tuning``): the command of ``smallvocab_tools.analysis.rl_logs`` (``--help``
and its module documentation give the settings)."""

from smallvocab_tools.analysis.rl_logs import main

if __name__ == "__main__":
    main()
