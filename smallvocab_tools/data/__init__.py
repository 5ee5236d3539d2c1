"""Corpus preparation (``prep``: Multi30k and raw parallel text -> fairseq
binaries, over ``text`` (reading and checking parallel text), ``output_dir``
(output folders written whole or not at all), ``stats`` (corpus statistics)
and ``errors``; ``caption_prep``: image features and captions) and the
synthetic corpora of the demo and the tests (``synthetic``, its lexicon in
``synthetic_lexicon``, and ``synthetic_captions``)."""
