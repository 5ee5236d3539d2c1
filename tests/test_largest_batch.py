"""``benchmark.py --largest-batch``: the search for the largest batch that
fits (against a known limit, from above and below, to its precision), the
report's table, and the refusal without a GPU.  (The search on a GPU runs
where one is: docs/results.md, "GPU speed and memory (H100)".)"""

import pytest

from smallvocab_tools.bench import benchmark
from smallvocab_tools.bench.largest_batch import largest_fitting
from smallvocab_tools.bench.report import markdown


@pytest.mark.parametrize("limit", [1, 7, 100, 128, 129, 5000])
@pytest.mark.parametrize("start", [1, 32, 128, 10000])
def test_the_search_finds_the_limit_to_its_precision(limit, start):
    found, trials = largest_fitting(lambda n: n <= limit, start, precision=0.05)
    assert found <= limit and limit - found <= max(1, int(0.05 * found))
    assert all(fitted == (n <= limit) for n, fitted in trials)
    assert any(n > limit for n, _ in trials) or found == limit  # the first failure bounds it from above
    assert len(trials) <= 30


def test_the_search_says_when_nothing_fits_and_stops_at_its_ceiling():
    assert largest_fitting(lambda n: False, 16) == (0, [(16, False), (8, False), (4, False), (2, False),
                                                        (1, False)])
    found, trials = largest_fitting(lambda n: True, 100, limit=1000)
    assert found == 1000 and [n for n, _ in trials] == [100, 200, 400, 800, 1000]


def test_exactly_with_a_precision_of_zero():
    found, _ = largest_fitting(lambda n: n <= 777, 64, precision=0.0)
    assert found == 777


def _record(softmax, batch, sec):
    return {"device": "cuda", "arch": "transformer", "mode": "reinforce", "rl_samples": 4, "softmax": softmax,
            "vocab_size": 128000, "K": 1000 if softmax == "small" else 0, "d": 512, "batch": batch,
            "max_len": 30, "sec_per_step": sec, "tokens_per_sec": 1.0, "sec_per_epoch": 1.0, "peak_mem_mb": 70000.0,
            "largest_batch": batch, "sentences_per_sec": round(batch / sec, 1), "largest_batch_trials": []}


def test_the_report_sets_each_small_largest_batch_beside_the_full_ones():
    table = markdown([_record("small", 800, 2.0), _record("full", 100, 1.0)])
    assert "| transformer | reinforce x4 | 128,000 | small | 1000 | 800 | 2.000 | 400.0 | 70,000 | 8.00x | 4.00x |" \
        in table
    assert "| transformer | reinforce x4 | 128,000 | full | - | 100 | 1.000 | 100.0 | 70,000 |  |  |" in table


@pytest.mark.parametrize("extra", [[], ["--device", "cuda", "--modes", "decode"]])
def test_the_search_is_refused_where_there_is_no_gpu_memory_to_search(extra, capsys):
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--largest-batch", *extra])
    assert "--largest-batch searches a GPU's memory" in capsys.readouterr().err


@pytest.mark.parametrize("error", ["MemoryError", "OutOfMemoryError"])
def test_a_trial_that_runs_out_of_memory_does_not_fit(error, monkeypatch):
    """Out of CUDA's memory, or refused ahead by smallvocab_reinforce's own estimate (MemoryError): no fit; any other
    error is the step's own and stops the search."""
    import torch

    from smallvocab_tools.bench.largest_batch import fits_on_cuda

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    raised = torch.cuda.OutOfMemoryError if error == "OutOfMemoryError" else MemoryError

    def step(n):
        if n > 10:
            raise raised("too large")

    fits = fits_on_cuda(step, lambda n: n)
    assert fits(10) and not fits(11)

    def broken(n):
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        fits_on_cuda(broken, lambda n: n)(1)
