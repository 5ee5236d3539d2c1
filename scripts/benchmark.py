#!/usr/bin/env python3
"""Speed and peak memory of training steps and decoding, small vocabulary vs
full softmax: the command of ``smallvocab_tools.bench.benchmark`` (its
``--help`` and module documentation give the settings)."""

from smallvocab_tools.bench.benchmark import main

if __name__ == "__main__":
    main()
