#!/usr/bin/env python3
"""sacrebleu's corpus BLEU of a hypothesis file, with its signature, as every tool of the project scores it:
the command of ``smallvocab_tools.analysis.bleu``.

    python scripts/bleu.py --ref data/test.de hyp-test.txt
"""

from smallvocab_tools.analysis.bleu import main

if __name__ == "__main__":
    main()
