"""The plugin's fairseq models (every module here is imported on load): the architectures
(``vocab_predictor``, ``lstm_smallvocab``, ``lstm_caption_smallvocab``), any fairseq encoder-decoder restricted to
each example's candidates (``restricted``), and decoding inside the candidates with fairseq's
``SequenceGenerator`` (``generation``)."""

from fairseq_smallvocab.compat.registry import import_all_modules

import_all_modules(__name__, __path__)
