"""Speed and memory benchmarks: ``benchmark`` (training steps and decoding,
small vocabulary vs full softmax; the command ``scripts/benchmark.py``)."""
