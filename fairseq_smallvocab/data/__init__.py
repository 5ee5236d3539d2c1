"""The plugin's data: the tasks' datasets and data folder (``datasets``), fairseq-preprocess's .idx/.bin pairs
checked before fairseq opens them (``binarized``), each image's captions (``caption_refs``)."""
