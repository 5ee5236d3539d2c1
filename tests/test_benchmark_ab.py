"""scripts/benchmark.py's ``--ab NAME=A,B`` and ``--set NAME=VALUE``
(smallvocab_tools/bench/ab.py): two values of one of the engine's settings
compared batch by batch in one process, and one value for a whole run; the
options refused where they name no setting or a value it cannot take."""

import json
import re

import pytest
from helpers import REPO, run


def test_ab_steps_alternate_the_two_values_from_one_seed(monkeypatch):
    """--ab: each batch runs under A and B (A B, then B A, ...), both from the
    batch's seed and the same model state; warm-up batches are untimed; the
    base settings are back afterwards, also when a step fails; the ratio is
    the median of the batches' A / B."""
    import time

    from fairseq_smallvocab.engine.settings import EngineSettings
    from smallvocab_tools.bench.ab import ab_steps

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    spec = "transposed_min_rows=7,9"
    base = EngineSettings(capture="buckets")  # (a --set of the run: kept under both values)
    current = [base]  # the settings the worker's step runs with, as ``use`` sets them
    calls, seeds, lens = [], [], []
    costs = iter([1.0, 1.0, 4.0, 2.0, 3.0, 1.0, 6.0, 2.0])  # per call, in call order

    weights = [0]  # the "model": each step updates it; both values of a batch start from the same state

    def step(sample):
        assert current[0].capture == "buckets"
        calls.append((sample, current[0].transposed_min_rows, weights[0]))
        weights[0] += 1
        lens.append(10 * sample + current[0].transposed_min_rows)
        clock[0] += next(costs)

    def use(settings):
        current[0] = settings

    cfg = {"ab": spec, "warmup": 1, "rl_samples": 1}
    snapshot, restore = lambda: list(weights), lambda state: weights.__setitem__(0, state[0])
    ab = ab_steps(cfg, step, [0, 1, 2, 3], lens, seeds.append, snapshot, restore, use, base)
    assert calls == [(0, 7, 0), (0, 9, 0), (1, 9, 1), (1, 7, 1), (2, 7, 2), (2, 9, 2), (3, 9, 3), (3, 7, 3)]
    assert seeds == [0, 0, 1, 1, 2, 2, 3, 3]
    assert current[0] == base
    # batch 1: B 4.0, A 2.0; batch 2: A 3.0, B 1.0; batch 3: B 6.0, A 2.0
    assert ab["ab_rounds"] == [[2.0, 3.0, 2.0], [4.0, 1.0, 6.0]]
    assert ab["ab_sec_per_step"] == [2.0, 4.0] and ab["ab_ratio"] == 0.5  # ratios 0.5, 3, 1/3
    assert ab["ab_values"] == ["7", "9"] and ab["ab_sample_len"] == [27.0, 29.0]
    assert sorted(lens) == [17, 19, 27, 29, 37, 39]  # the timed batches' lengths, both values

    def failing(sample):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        ab_steps(cfg, failing, [0], [], seeds.append, snapshot, restore, use, base)
    assert current[0] == base


SETTING = "transposed_min_rows"


@pytest.mark.parametrize("spec, problem", [
    ("transposed_min_rows", "give a setting's name and two values"),
    ("=1,2", "give a setting's name and two values"),
    ("nope=1,2", "no setting 'nope'; the settings are capture, compile, graphed_pass, full_softmax, merged_pass, "
                 "static_state"),
    ("fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS=1,2",  # the module-level form of before
     "no setting 'fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS'"),
    (SETTING + "=1", "two values are compared, not 1"),
    (SETTING + "=1,x", "transposed_min_rows=x: transposed_min_rows takes an int"),
    (SETTING + "=1,2.5", "transposed_min_rows=2.5: transposed_min_rows takes an int"),
])
def test_ab_refuses_what_it_cannot_compare(spec, problem):
    from smallvocab_tools.bench.ab import parse_ab

    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_ab(spec)
    name, values = parse_ab("stored_probs_max_elements=0, 268435456")
    assert name == "stored_probs_max_elements" and values == (0, 2 ** 28)
    assert parse_ab("static_state=off,on") == ("static_state", (False, True))
    problem = "--ab stop_check_every=0,1: --rl-engine stop_check_every must be >= 1"
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_ab("stop_check_every=0,1")  # a value the settings refuse: on the command line, not in the worker


@pytest.mark.parametrize("spec, problem", [
    ("nope=1", "no setting 'nope'"),
    ("capture=graphs", "capture=graphs: capture takes one of auto, cuda-graphs, buckets, off"),
    ("stop_check_every=often", "stop_check_every=often: stop_check_every takes an int"),
    ("capture", "give a setting's name and its value, e.g. capture=off"),
])
def test_set_refuses_what_it_cannot_set(spec, problem, capsys):
    from smallvocab_tools.bench.benchmark import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--set", spec])
    assert problem in capsys.readouterr().err


def test_set_refuses_a_setting_given_twice_or_compared_by_ab(capsys):
    from smallvocab_tools.bench.benchmark import parse_args

    static = "static_state"
    with pytest.raises(SystemExit):
        parse_args(["--set", static + "=off", "--ab", static + "=off,on"])
    assert "compares the setting that --set fixes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--set", static + "=off", "--set", static + "=on"])
    assert f"--set gives {static} 2 values" in capsys.readouterr().err
    args = parse_args(["--set", static + "=off", "--set", "capture=off"])
    assert len(args.set) == 2


def test_set_applies_each_setting_in_the_worker_before_it_measures(monkeypatch):
    """--set: the worker runs the whole configuration under the values (here in this process, on a tiny
    model: every REINFORCE step's criterion and model have the defaults with each --set), and its record
    and the report say so."""
    import torch

    from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceCriterion
    from fairseq_smallvocab.engine.settings import EngineSettings
    from smallvocab_tools.bench import benchmark
    from smallvocab_tools.bench.report import markdown

    seen = []
    loss = SmallVocabReinforceCriterion.loss

    def spy(self, model, sample):
        seen.append((self.settings, model.engine_plan.settings))
        return loss(self, model, sample)

    monkeypatch.setattr(SmallVocabReinforceCriterion, "loss", spy)
    specs = ["capture=buckets", "stop_check_every=8"]
    tiny = ["--vocab-sizes", "300", "--k", "40", "--no-full", "--batch", "2", "--max-len", "4", "--embed-dim", "8",
            "--steps", "1", "--warmup", "1", "--threads", str(torch.get_num_threads())]
    cfg, = benchmark.configurations(benchmark.parse_args(["--modes", "reinforce", *tiny, "--set", specs[0],
                                                          "--set", specs[1]]))
    record = benchmark.worker(cfg)
    want = EngineSettings(capture="buckets", stop_check_every=8, graphed_pass="off")  # ("auto" on the CPU)
    assert seen == [(want, want)] * 2 and record["set"] == specs  # the warm-up step and the timed one
    cfg, = benchmark.configurations(benchmark.parse_args(["--modes", "ce", *tiny]))
    assert "set" not in benchmark.worker(cfg)
    timed = {"device": "cuda", "arch": None, "mode": "ce", "vocab_size": 300, "softmax": "full", "K": 0, "d": 8,
             "batch": 4, "max_len": 6, "sec_per_step": 0.1, "tokens_per_sec": 240.0, "sec_per_epoch": 1.0,
             "peak_mem_mb": 1.0}
    table = markdown([dict(timed, set=specs)])
    assert table.startswith("Settings (--set): `capture=buckets`, `stop_check_every=8`\n\n| device |")
    assert markdown([timed]).startswith("| device |")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["transformer", "lstm_smallvocab"])
def test_the_static_state_ab_of_results_runs(tmp_path, arch):
    """The results' --ab of the static decoding state, on tiny data: both values draw the same
    samples (the static state changes how the steps are computed, not what they give)."""
    args = ["--arch", "transformer", "--layers", "1"] if arch == "transformer" else []
    out = run([REPO / "scripts" / "benchmark.py", "--modes", "reinforce", *args, "--vocab-sizes", "300", "--k", "40",
               "--batch", "4", "--max-len", "6", "--embed-dim", "8", "--steps", "1", "--warmup", "1",
               "--threads", "1", "--ab", "static_state=off,on", "--json", tmp_path / "ab.json"])
    records = json.loads((tmp_path / "ab.json").read_text())
    assert [r["softmax"] for r in records] == ["small", "full"]
    for record in records:
        assert record["ab_values"] == ["off", "on"] and record["ab_sample_len"][0] == record["ab_sample_len"][1]
    assert "| static_state | off | on |" in out.stdout


@pytest.mark.slow
def test_benchmark_ab_runs_both_values_in_each_round(tmp_path):
    """--ab end to end: one process per configuration and round, each value's
    steps of every round in the record, the A / B table; decoding too, per
    decoded batch."""
    import statistics

    out = run([REPO / "scripts" / "benchmark.py", "--modes", "reinforce", "--vocab-sizes", "300", "--k", "40",
               "--k-sweep", "--no-full", "--batch", "4", "--max-len", "6", "--embed-dim", "8", "--steps", "2",
               "--warmup", "1", "--threads", "1", "--rounds", "2", "--ab",
               # the same draws either way (only the backward's source of p_t differs): equal sample lengths
               "stored_probs_max_elements=0,268435456", "--json", tmp_path / "ab.json"])
    record, = json.loads((tmp_path / "ab.json").read_text())
    assert record["ab_values"] == ["0", "268435456"]
    assert [len(t) for t in record["ab_rounds"]] == [4, 4]
    assert record["ab_sec_per_step"] == [round(statistics.median(t), 4) for t in record["ab_rounds"]]
    ratios = [a / b for a, b in zip(*record["ab_rounds"])]
    assert record["ab_ratio"] == round(statistics.median(ratios), 3)
    assert all(0 < n <= 6 for n in record["ab_sample_len"])
    assert record["ab_sample_len"][0] == record["ab_sample_len"][1]  # both from the same weights and seed
    assert "| stored_probs_max_elements | 0 | 268435456 |" in out.stdout
    out = run([REPO / "scripts" / "benchmark.py", "--modes", "decode", "--vocab-sizes", "300", "--k", "40",
               "--no-full", "--decode-batches", "2", "--beams", "2", "--decode-len", "4", "--src-len", "3",
               "--decode-sentences", "6", "--embed-dim", "8", "--threads", "1", "--ab", SETTING + "=1,1000000000",
               "--json", tmp_path / "dec.json"])
    record, = json.loads((tmp_path / "dec.json").read_text())
    assert [len(t) for t in record["ab_rounds"]] == [3, 3]  # 6 sentences in batches of 2, after a warm-up pass
    assert record["ab_ms_per_sentence"] == [round(1000 * t / 2, 3) for t in record["ab_sec_per_step"]]
    assert "| decode, batch 2, beam 2 | 300 | small | 40 | transposed_min_rows | 1 | 1000000000 | - |" in out.stdout
    bad = run([REPO / "scripts" / "benchmark.py", "--phases", "--ab", SETTING + "=1,2"], check=False)
    assert bad.returncode == 2 and "--ab times whole steps: leave out --phases" in bad.stderr
