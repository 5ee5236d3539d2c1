#!/usr/bin/env python3
"""Plots of scripts/benchmark.py's JSON records (speed-up against |V|, time
against K, peak memory): the command of
``smallvocab_tools.analysis.plot_benchmark`` (``--help`` for the settings)."""

from smallvocab_tools.analysis.plot_benchmark import main

if __name__ == "__main__":
    main()
