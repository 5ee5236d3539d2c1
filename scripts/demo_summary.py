#!/usr/bin/env python3
"""The closing summary of `make demo` (scripts/demo.sh): the command of
``smallvocab_tools.analysis.demo_summary`` (``--help`` gives the settings)."""

import sys

from smallvocab_tools.analysis.demo_summary import main

if __name__ == "__main__":
    sys.exit(main())
