#!/usr/bin/env python3
"""Print how many updates one epoch of fairseq-train makes with the given flags (the same flags as fairseq-train's;
nothing is trained): the command of ``smallvocab_tools.train.updates``.

    python scripts/updates_per_epoch.py data-bin/multi30k.en-de --task translation -s en -t de --arch transformer \
      --max-tokens 4096
"""

from smallvocab_tools.train.updates import main

if __name__ == "__main__":
    main()
