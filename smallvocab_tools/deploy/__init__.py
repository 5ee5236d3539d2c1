"""Deployment: a plugin checkpoint exported to CTranslate2 (``ctranslate2_export``), with a vocabulary map
made from the vocabulary predictor (``vmap``).  The commands are thin wrappers in ``scripts/``."""
