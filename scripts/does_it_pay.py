#!/usr/bin/env python3
"""Does the small softmax pay on your model, here? Small vs full softmax for a
REINFORCE step and beam-search decoding on your flags, |V| and K, and which to
use: the command of ``smallvocab_tools.bench.does_it_pay`` (its ``--help``)."""

from smallvocab_tools.bench.does_it_pay import main

if __name__ == "__main__":
    main()
