"""The commands the documentation shows."""

import pytest
from helpers import REPO, run

# the settings a synthetic configuration of benchmark.py may leave unset: the arch's own layers
OPTIONAL_WORKER_SETTINGS = {"layers"}


def test_benchmark_quick_sets_every_setting_the_worker_reads():
    """``benchmark.py --quick`` (README, docs/RESULTS.md) is its options spelled out: the same
    configurations, each with every setting its worker reads (issue #29: --quick re-parsed the
    command line after d had been defaulted, and every worker died on d = None)."""
    from smallvocab_tools.bench import benchmark as bench

    quick = list(bench.configurations(bench.parse_args(["--quick"])))
    spelled = list(bench.configurations(bench.parse_args(
        ["--modes", "ce", "reinforce", "--vocab-sizes", "24000", "--k", "1000", "--k-sweep", "--steps", "2",
         "--warmup", "1"])))
    assert quick == spelled
    for cfg in quick:
        assert cfg["d"] == 256 and cfg["steps"] == 2 and cfg["warmup"] == 1, cfg
        assert not {key for key, value in cfg.items() if value is None} - OPTIONAL_WORKER_SETTINGS, cfg
    # an explicit option still wins over --quick's, and the d default still follows it
    small = bench.parse_args(["--quick", "--embed-dim", "32", "--steps", "4"])
    assert (small.embed_dim, small.steps, small.warmup, small.vocab_sizes) == (32, 4, 1, [24000])


@pytest.mark.slow
def test_benchmark_quick_runs_end_to_end(tmp_path):
    """``python scripts/benchmark.py --quick`` as documented, shrunk to a tiny |V| and batch (d and
    everything else left to --quick), through the worker process it starts."""
    import json

    run([REPO / "scripts" / "benchmark.py", "--quick", "--vocab-sizes", "300", "--k", "40", "--batch", "4",
         "--max-len", "6", "--steps", "1", "--threads", "1", "--modes", "reinforce", "--no-full",
         "--json", tmp_path / "q.json"])
    record, = json.loads((tmp_path / "q.json").read_text())
    assert (record["mode"], record["softmax"], record["K"], record["d"]) == ("reinforce", "small", 40, 256)
    assert record["steps"] == 1 and record["warmup"] == 1 and record["sec_per_step"] > 0
