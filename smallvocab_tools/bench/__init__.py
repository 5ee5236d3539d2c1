"""Speed and memory benchmarks: ``benchmark`` (training steps and decoding,
small vocabulary vs full softmax; the command ``scripts/benchmark.py``).

Its modules, in the order a run goes through them:

- ``benchmark``: the command line (its flags, their checks, the
  configurations they ask for) and the entry that wires the rest together;
- ``runner``: each configuration in a fresh process, small and full
  interleaved over --rounds, medians and pairwise ratios;
- ``train_worker`` / ``decode_worker``: one configuration measured inside
  that process (training steps, or decoding), its record returned;
- ``workload``: what a configuration measures: its task, model, criterion
  and batches (synthetic, or a binarized corpus's); ``flat_limit``: the
  criterion under ``--sample-limit flat``, every sample to the limit;
- ``ab`` (``--ab``), ``phases`` (``--phases``), ``floor`` (``--floor``):
  the workers' optional ways of timing;
- ``report``: the records as markdown tables.
"""
