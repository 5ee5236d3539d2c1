"""Corpus preparation (``prep``: Multi30k and raw parallel text -> fairseq
binaries; ``caption_prep``: image features and captions) and the synthetic
corpora of the demo and the tests (``synthetic``, ``synthetic_captions``)."""
