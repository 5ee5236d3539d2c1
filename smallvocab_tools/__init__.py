"""fairseq-smallvocab's tools, apart from the plugin that fairseq loads
(``fairseq_smallvocab``): data preparation and the synthetic corpora
(``data``), the speed and memory benchmarks (``bench``) and the analyses
and plots of results (``analysis``).  The commands are thin wrappers in
``scripts/``; nothing here is imported by ``--user-dir fairseq_smallvocab``."""
