"""benchmark.py --floor: each batch's step timed, then its products alone replayed (on the CPU eagerly, on a
GPU as one captured graph), the records pooled over rounds, and the table."""

import contextlib
import io
import json

import pytest
from helpers import REPO, run


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_floor_steps_time_each_batch_then_replay_its_products(monkeypatch, device):
    """--floor: after the untimed warm-up, each batch's step is timed, then
    run again from the same seed and state under the recorder (the same
    samples: one length per batch kept), and its products are replayed; the
    record's ratio is the median of the batches' step / products.  On CUDA
    the recorded step runs its captured program eagerly ('buckets', not
    compiled: a replayed graph makes no ATen calls), the timed one as set
    (the worker's settings back after the block), and the products replay as
    a graph (the device itself is not needed here: the step and the replay
    are stand-ins)."""
    import time

    import torch

    from fairseq_smallvocab.engine.settings import EngineSettings
    from smallvocab_tools.bench import floor
    from smallvocab_tools.bench.train_worker import _eager_program, floor_steps

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    base = EngineSettings(capture="cuda-graphs", compile="fuse", graphed_pass="off")
    current = [base]  # the settings the worker's step runs with, as its ``use`` sets them

    replays, graphs = iter([1.0, 2.0, 1.0]), []

    def replay(self, sync=None, graph=False):
        graphs.append(graph)
        return next(replays)

    monkeypatch.setattr(floor.ProductRecorder, "replay", replay)
    weights, calls, seeds, lens, settings = [0], [], [], [], []
    costs = iter([9.0, 4.0, 0.5, 6.0, 0.5, 3.0, 0.5])  # warm-up, then (timed, recorded) per batch
    x = torch.ones(2, 3)

    def step(sample):
        settings.append((current[0].capture, current[0].compile, current[0].graphed_pass))
        calls.append((sample, weights[0]))
        weights[0] += 1
        torch.mm(x, torch.ones(3, sample))  # the batch's one product: 2 x 2 x 3 x sample FLOPs
        lens.append(10 * sample)
        clock[0] += next(costs)

    snapshot, restore = lambda: list(weights), lambda state: weights.__setitem__(0, state[0])
    result = floor_steps({"warmup": 1, "device": device}, step, [1, 2, 3, 4], lens, seeds.append, snapshot, restore,
                         eager=lambda: _eager_program(lambda s: current.__setitem__(0, s), base))
    assert calls == [(1, 0), (2, 1), (2, 1), (3, 2), (3, 2), (4, 3), (4, 3)]  # each recorded step from the state
    as_set = ("cuda-graphs", "fuse", "off")
    recorded = ("buckets", "off", "off") if device == "cuda" else as_set
    assert settings == [as_set] + [as_set, recorded] * 3 and graphs == [device == "cuda"] * 3
    assert current[0] == base  # restored
    assert seeds == [1, 1, 2, 2, 3, 3]
    assert lens == [20, 30, 40]  # one length per timed batch
    assert result["floor_steps"] == [4.0, 6.0, 3.0] and result["sec_per_step"] == 4.0
    assert result["products_rounds"] == [1.0, 2.0, 1.0] and result["products_sec"] == 1.0
    assert result["step_over_products"] == 3.0  # ratios 4, 3, 3
    assert result["products_flops"] == 2 * 2 * 3 * 3 and result["product_calls"] == 1  # the median batch's


@pytest.mark.slow
def test_benchmark_floor_records_and_table(tmp_path):
    """--floor end to end: each record's products alone, their FLOPs and the
    ratio, in their own table (not in the main one); refused with --phases."""
    out = run([REPO / "scripts" / "benchmark.py", "--modes", "ce", "reinforce", "--vocab-sizes", "300", "--k", "40",
               "--k-sweep", "--no-full", "--batch", "4", "--max-len", "6", "--embed-dim", "8", "--steps", "2",
               "--warmup", "1", "--threads", "1", "--floor", "--json", tmp_path / "f.json"])
    records = json.loads((tmp_path / "f.json").read_text())
    assert [r["mode"] for r in records] == ["ce", "reinforce"]
    for r in records:
        assert len(r["floor_steps"]) == len(r["products_rounds"]) == 2
        assert 0 < r["products_sec"] and 0 < r["products_flops"] and r["product_calls"] > 10
        assert r["other_aten_calls"] > r["product_calls"] and r["products_top"][0][2] >= 1
    assert records[1]["product_calls"] > records[0]["product_calls"]  # the policy's passes and their backward
    assert out.stdout.count("| lstm_smallvocab |") == 2 and "products alone s" in out.stdout
    bad = run([REPO / "scripts" / "benchmark.py", "--phases", "--floor"], check=False)
    assert bad.returncode == 2 and "--floor times whole steps and their products" in bad.stderr
    bad = run([REPO / "scripts" / "benchmark.py", "--floor", "--device", "cuda"], check=False)
    assert bad.returncode == 2 and "--floor on CUDA for an LSTM (its cuDNN RNN kernels" in bad.stderr


def test_floor_on_cuda_takes_an_lstm_only_as_untested():
    """cuDNN's RNN kernels are recorded and replayed, but have not run on a GPU: on CUDA --floor takes the LSTMs
    and --data (the paper's LSTM unless --model-args) only with --set untested_cuda_modes=on, and takes a
    fairseq arch without one; their FLOPs: every layer's and direction's products over all steps."""
    import torch

    from smallvocab_tools.bench import benchmark as bench
    from smallvocab_tools.bench.floor import aten, is_product, product_flops

    transformer = ["--floor", "--device", "cuda", "--arch", "transformer", "--modes", "reinforce"]
    assert bench.parse_args(transformer).floor
    assert bench.parse_args(["--floor", "--arch", "lstm", "--modes", "reinforce"]).floor  # on the CPU: any arch
    for argv in (["--floor", "--device", "cuda", "--modes", "reinforce"],
                 ["--floor", "--device", "cuda", "--arch", "lstm", "--modes", "ce"]):
        with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            bench.parse_args(argv)
        assert "--floor on CUDA for an LSTM (its cuDNN RNN kernels recorded and replayed" in err.getvalue()
        assert bench.parse_args(argv + ["--set", "untested_cuda_modes=on"]).floor
    # a 2-layer bidirectional LSTM (input 8, hidden 5) over 7 steps of 3 rows, as cuDNN is called
    weights = [torch.zeros(20, 8), torch.zeros(20, 5), torch.zeros(20), torch.zeros(20)] * 2 + \
        [torch.zeros(20, 10), torch.zeros(20, 5), torch.zeros(20), torch.zeros(20)] * 2
    x = torch.zeros(7, 3, 8)
    forward = 2 * 21 * 2 * (4 * 5 * (8 + 5) + 4 * 5 * (10 + 5))
    assert is_product(aten._cudnn_rnn) and product_flops(aten._cudnn_rnn, [x, weights]) == forward
    assert product_flops(aten._cudnn_rnn_backward, [x.view(21, 8), weights]) == 2 * forward  # packed rows


def test_floor_records_pool_their_rounds(monkeypatch):
    """--floor with --rounds: a record's batches are every round's, its
    products time and step / products ratio come from all of them; the table
    prints it (and a products time of 0 does not divide)."""
    from smallvocab_tools.bench import runner
    from smallvocab_tools.bench.report import markdown

    rounds = iter([([4.0, 6.0], [1.0, 2.0], 10), ([3.0, 8.0], [1.0, 1.0], 30)])

    def fake_run(cfg):
        steps, products, flops = next(rounds)
        return {"device": "cpu", "mode": "ce", "softmax": "small", "vocab_size": 300, "K": 40, "batch": 4,
                "arch": None, "sec_per_step": sum(steps) / 2, "tokens_per_sec": 1.0, "sec_per_epoch": 1.0,
                "peak_mem_mb": 1.0, "peak_rss_mb": 1.0, "floor_steps": steps, "products_rounds": products,
                "products_sec": 9.0, "step_over_products": 9.0, "products_flops": flops,
                "products_gflop": flops / 1e9, "product_calls": flops, "other_aten_calls": 5}

    monkeypatch.setattr(runner, "run_isolated", fake_run)
    cfg = {"mode": "ce", "softmax": "small", "K": 40, "vocab_size": 300, "batch": 4, "floor": True}
    record, = runner.run_interleaved([cfg], rounds=2)
    assert record["floor_steps"] == [4.0, 6.0, 3.0, 8.0] and record["products_rounds"] == [1.0, 2.0, 1.0, 1.0]
    assert record["products_sec"] == 1.0 and record["step_over_products"] == 3.5  # ratios 4, 3, 3, 8
    assert record["products_flops"] == 20 and record["product_calls"] == 20 and type(record["product_calls"]) is int
    assert "| 1.000 | 3.50 |" in markdown([record])
    assert "| 0.000 |" in markdown([dict(record, products_sec=0.0)])
