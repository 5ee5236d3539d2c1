#!/usr/bin/env python3
"""Multi-reference BLEU of fairseq-generate's captions (each image against
every caption of that image): the command of
``smallvocab_tools.analysis.caption_bleu`` (``--help`` and its module
documentation give the settings)."""

from smallvocab_tools.analysis.caption_bleu import main

if __name__ == "__main__":
    main()
