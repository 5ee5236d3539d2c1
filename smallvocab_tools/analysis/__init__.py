"""Analyses and plots of results: the shared matplotlib set-up (``plotting``)
and the plots of the benchmark's records (``plot_benchmark``)."""
