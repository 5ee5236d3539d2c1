"""The plugin's fairseq tasks; every module here is imported on load."""

from fairseq_smallvocab.compat.registry import import_all_modules

import_all_modules(__name__, __path__)
