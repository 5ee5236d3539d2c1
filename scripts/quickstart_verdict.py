#!/usr/bin/env python3
"""The quick start's verdict: CE, REINFORCE and (where run) CE continued side
by side on the test set, the paired bootstrap, the length ratios and whether
REINFORCE helped: the command of ``smallvocab_tools.analysis.quickstart_verdict``."""

from smallvocab_tools.analysis.quickstart_verdict import main

if __name__ == "__main__":
    main()
