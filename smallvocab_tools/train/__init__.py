"""Tools around fairseq-train: how many updates an epoch makes (``updates``), averaging the last checkpoints of a
run (``average``)."""
