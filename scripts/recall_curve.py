#!/usr/bin/env python3
"""Recall@K of vocabulary predictors over a range of K beside the frequency
baseline (the paper's Figure 1), as a markdown table and a PNG: the command of
``smallvocab_tools.analysis.recall_curve`` (``--help`` and its module
documentation give the settings)."""

from smallvocab_tools.analysis.recall_curve import main

if __name__ == "__main__":
    main()
