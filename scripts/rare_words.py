#!/usr/bin/env python3
"""How often systems output rare words (the paper's Figure 2): the share of
output tokens per frequency decile of the target vocabulary, as a markdown
table and a PNG: the command of ``smallvocab_tools.analysis.rare_words``
(``--help`` and its module documentation give the settings)."""

import sys

from smallvocab_tools.analysis.rare_words import main

if __name__ == "__main__":
    sys.exit(main())
