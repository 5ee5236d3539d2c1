"""scripts/benchmark.py: one fresh process per configuration, records with the
fields the results tables use (the numbers themselves are not tested);
--floor's products alone.  --ab and --set: test_benchmark_ab.py."""

import contextlib
import io
import json
import re

import pytest
from helpers import REPO, run


@pytest.mark.slow
def test_benchmark_writes_records_and_table(tmp_path):
    out = run([REPO / "scripts" / "benchmark.py", "--modes", "ce", "reinforce", "--vocab-sizes", "300", "--k", "40",
               "--batch", "4", "--max-len", "6", "--embed-dim", "8", "--steps", "1", "--warmup", "1", "--threads", "1",
               "--json", tmp_path / "b.json", "--markdown", tmp_path / "b.md"])
    records = json.loads((tmp_path / "b.json").read_text())
    assert [(r["mode"], r["softmax"], r["K"]) for r in records] == [
        ("ce", "small", 40), ("ce", "full", 0), ("reinforce", "small", 40), ("reinforce", "full", 0)]
    for r in records:
        assert {"device", "mode", "softmax", "vocab_size", "K", "d", "batch", "max_len", "steps",
                "tokens_per_sec", "sec_per_epoch", "peak_mem_mb"} <= r.keys()
        assert r["device"] == "cpu" and r["vocab_size"] == 300 and r["tokens_per_sec"] > 0
        assert (r["mode"] == "reinforce") == (0 < r.get("sample_len", 0) <= 6)
    table = (tmp_path / "b.md").read_text()
    assert table in out.stdout and table.count("\n") == 6 and table.count("x less") == 2


def test_benchmark_batch_candidates_hold_the_gold_words():
    from smallvocab_tools.bench.workload import make_batch

    sample = make_batch(vocab_size=500, k=60, batch=3, max_len=20, device="cpu")
    cands = sample["net_input"]["candidates"]
    assert cands.shape == (3, 60) and cands[:, :4].tolist() == [[0, 1, 2, 3]] * 3
    for row, target in zip(cands.tolist(), sample["target"].tolist()):
        assert set(target) <= set(row) and len(set(row)) == 60


@pytest.mark.slow
def test_benchmark_decode_records(tmp_path):
    run([REPO / "scripts" / "benchmark.py", "--modes", "decode", "--vocab-sizes", "300", "--k", "40",
         "--embed-dim", "8", "--threads", "1", "--decode-batches", "1", "2", "--beams", "2", "--decode-len", "5",
         "--decode-sentences", "2", "--json", tmp_path / "d.json", "--markdown", tmp_path / "d.md"])
    records = json.loads((tmp_path / "d.json").read_text())
    assert [(r["batch"], r["softmax"]) for r in records] == [(1, "small"), (1, "full"), (2, "small"), (2, "full")]
    assert all(r["ms_per_sentence"] > 0 and r["beam"] == 2 and r["max_len"] == 5 for r in records)
    # every hypothesis has exactly --decode-len tokens plus eos: tokens/s = 6 tokens x sentences / time
    for r in records:
        assert abs(r["tokens_per_sec"] * r["ms_per_sentence"] / 1000 - 6) < 0.05
    assert len(re.findall(r"\| \d+\.\d\dx \|", (tmp_path / "d.md").read_text())) == 2  # speedups


@pytest.mark.slow
def test_benchmark_on_real_batches_of_a_corpus(tiny_raw, tiny_bin, predictor, tmp_path):
    """--data: real batches (distinct per step, the same for small and full) with
    exported candidates; |V| is the corpus's dictionary, len its longest target."""
    from fairseq.data import Dictionary

    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train", "--k", "60",
         "--out-dir", tmp_path / "cands"])
    common = [REPO / "scripts" / "benchmark.py", "--data", tiny_bin, "--source-lang", "src", "--target-lang", "tgt",
              "--batch", "8", "--embed-dim", "8", "--steps", "2", "--warmup", "1", "--threads", "1"]
    # K = 50 of the K' = 60 lists (K = 40 would cut gold words out of some training lists: refused)
    run([*common, "--modes", "reinforce", "--k", "50", "--candidates-dir", tmp_path / "cands",
         "--json", tmp_path / "r.json"])
    records = json.loads((tmp_path / "r.json").read_text())
    vocab = len(Dictionary.load(str(tiny_bin / "dict.tgt.txt")))
    assert [(r["mode"], r["softmax"], r["K"]) for r in records] == [
        ("reinforce", "small", 50), ("reinforce", "full", 0)]
    longest = max(len(line.split()) for line in (tiny_raw / "train.tgt").read_text().splitlines()) + 1  # eos
    for r in records:
        assert r["vocab_size"] == vocab and r["data"] == str(tiny_bin) and r["epoch_sentences"] > 400
        assert 0 < r["mean_tgt_len"] <= r["max_len"] <= longest and r["peak_rss_mb"] >= r["peak_mem_mb"]
    small, full = records
    assert small["max_len"] == full["max_len"] and small["mean_tgt_len"] == full["mean_tgt_len"]  # same batches
    bad = run([*common, "--modes", "ce"], check=False)
    assert bad.returncode != 0 and "--data needs --candidates-dir" in bad.stderr

    # a flat limit of 3 tokens (the recipe's untrained samples: about 30), every sample exactly 3 long
    # (tests/test_benchmark_flat_limit.py); every phase timed
    out = run([*common, "--modes", "reinforce", "--k", "50", "--candidates-dir", tmp_path / "cands", "--no-full",
               "--sample-limit", "flat", "--max-sample-len", "3", "--phases", "--json", tmp_path / "f.json"]).stdout
    flat, = json.loads((tmp_path / "f.json").read_text())
    assert flat["sample_limit"] == "flat" and flat["max_sample_len"] == 3 and small["sample_limit"] == "recipe"
    assert flat["sample_len"] == 3 < 10 < small["sample_len"] <= longest * 1.5 + 5
    from smallvocab_tools.bench.phases import PHASES

    assert list(flat["phases"]) == list(PHASES) and "phases" not in small
    assert all(flat["phases"][name] > 0 for name in PHASES)  # to the microsecond: the tiny ones too
    assert sum(flat["phases"].values()) <= flat["sec_per_step"] + 5e-5  # (the step's seconds: four decimals)
    assert "Seconds per step by phase" in out and "| flat 3 |" in out
    # one sampling loop per step (learned baseline), of at most 3 steps: its time per step of the loop
    assert flat["ms_per_sampled_token"] >= 1000 * flat["phases"]["sampling"] / 3 * 0.9
    assert f"| {flat['ms_per_sampled_token']} |" in out


TINY_TRANSFORMER = ("--arch transformer --encoder-layers 1 --decoder-layers 2 --encoder-embed-dim 16 "
                    "--decoder-embed-dim 16 --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 "
                    "--encoder-attention-heads 2 --decoder-attention-heads 2 --share-decoder-input-output-embed")


@pytest.mark.slow
def test_benchmark_on_real_batches_measures_the_model_of_the_given_flags(tiny_bin, predictor, tmp_path):
    """--model-args: the training run's own model (here a tiny stock Transformer, as the Transformer recipe's
    ARCH_ARGS give it) on the corpus's batches."""
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train", "--k", "60",
         "--out-dir", tmp_path / "cands"])
    common = [REPO / "scripts" / "benchmark.py", "--data", tiny_bin, "--source-lang", "src", "--target-lang", "tgt",
              "--candidates-dir", tmp_path / "cands", "--k", "50", "--batch", "8", "--steps", "1", "--warmup", "1",
              "--threads", "1", "--modes", "reinforce", "--rl-samples", "2", "--rl-baseline", "loo",
              "--model-args", TINY_TRANSFORMER]
    run([*common, "--json", tmp_path / "r.json"])
    records = json.loads((tmp_path / "r.json").read_text())
    assert [(r["arch"], r["softmax"], r["d"], r["rl_samples"]) for r in records] == [
        ("transformer", "small", 16, 2), ("transformer", "full", 16, 2)]


@pytest.mark.parametrize("argv, problem", [
    (["--model-args", "--arch transformer"], "--model-args goes with --data"),
    (["--data", "d", "--candidates-dir", "c", "--model-args", "--encoder-layers 3"], "name the model's arch"),
    (["--data", "d", "--candidates-dir", "c", "--model-args", "--arch transformer", "--embed-dim", "64"],
     "leave out --embed-dim and --layers"),
    (["--data", "d", "--candidates-dir", "c", "--arch", "transformer"], "--model-args \"--arch ARCH ...\""),
])
def test_benchmark_refuses_model_flags_it_cannot_use(argv, problem, capsys):
    bench = _benchmark_module()
    with pytest.raises(SystemExit):
        bench.parse_args(["--modes", "reinforce", *argv])
    assert problem in capsys.readouterr().err
    assert bench.model_arch("--dropout 0.3 --arch=transformer_iwslt_de_en") == "transformer_iwslt_de_en"
    assert bench.model_arch("-a lstm --encoder-layers 2") == "lstm"


COUNTS = ["--src-vocab-size", "--embed-dim", "--layers", "--rounds", "--max-sample-len", "--batch", "--max-len",
          "--steps", "--threads", "--epoch-sentences", "--decode-len", "--src-len", "--decode-sentences"]
LISTS = ["--vocab-sizes", "--k", "--k-sweep", "--sweep-vocab-sizes", "--rl-samples", "--decode-batches", "--beams"]


NONSENSE = [
    *[([option, "0"], f"argument {option}: 0 is too small: give 1 or more") for option in COUNTS],
    *[([option, "300", "0"], f"argument {option}: 0 is too small: give 1 or more") for option in LISTS],
    (["--vocab-sizes", "-5"], "argument --vocab-sizes: -5 is too small: give 1 or more"),
    (["--batch", "x"], "argument --batch: 'x' is not a whole number"),
    (["--warmup", "-1"], "argument --warmup: -1 is too small: give 0 or more"),
    (["--vocab-sizes", "5", "--k", "5"], "--vocab-sizes 5: a small vocabulary holds the 4 special symbols"),
    (["--src-vocab-size", "4"], "--src-vocab-size 4: a vocabulary must hold words besides the 4 special symbols"),
    (["--vocab-sizes", "300", "--k", "1000"],
     "|V| = 300 (--vocab-sizes): no K below it to measure (--k 1000), so only the full softmax would run; "
     "give --k below 300"),
    (["--vocab-sizes", "300", "--modes", "decode"], "|V| = 300 (--vocab-sizes): no K below it to measure (no --k: "
                                                    "the paper's rule gives K = 500)"),
    (["--vocab-sizes", "300", "24000", "--k", "40", "30000"],
     "--k 30000: not below any |V| it runs at (300 24000, --vocab-sizes), so never measured"),
    (["--vocab-sizes", "1500", "--sweep-vocab-sizes", "1500", "--k", "100"],
     "--k-sweep 2000: not below any |V| it runs at (1500, --vocab-sizes)"),
    (["--zipf", "nan"], "--zipf nan: the exponent must be a finite number >= 0 (0: uniform)"),
    (["--zipf", "inf"], "--zipf inf: the exponent must be a finite number >= 0 (0: uniform)"),
    (["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
]


@pytest.mark.parametrize("argv, problem", NONSENSE, ids=[" ".join(argv) for argv, _ in NONSENSE])
def test_benchmark_refuses_nonsense_values(argv, problem, capsys):
    """Values that measured nothing (an empty table, a full softmax alone), a uniform 'Zipf' law, or a traceback
    from inside a worker are refused on the command line, naming the option and the fix."""
    with pytest.raises(SystemExit) as exit_:
        _benchmark_module().parse_args(argv)
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


@pytest.mark.parametrize("arch, problem", [
    ("no_such_arch", "--arch no_such_arch: fairseq knows no such arch (nor does the plugin): give a fairseq "
                     "encoder-decoder arch, e.g. transformer, "),
    ("transformer_lm", "--arch transformer_lm builds a TransformerLanguageModel, not an encoder-decoder model"),
])
def test_benchmark_refuses_an_arch_it_cannot_build_before_any_worker(arch, problem, monkeypatch, capsys):
    """An unknown arch, or one without an encoder, is refused on the command line with archs that work, not by
    each worker's traceback; a command line that is only parsed (a documented command) still parses."""
    bench = _benchmark_module()
    monkeypatch.setattr(bench, "run_interleaved", lambda *a, **k: pytest.fail("a configuration was run"))
    argv = ["--arch", arch, "--modes", "ce", "--vocab-sizes", "300", "--k", "40"]
    assert bench.parse_args(argv).arch == arch
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and problem in err and "lstm_smallvocab" in err and "Traceback" not in err
    assert bench.arch_problem("transformer") is None and bench.arch_problem("lstm_smallvocab") is None


def test_benchmark_accepts_the_edge_values_that_mean_something():
    """--warmup 0 (no untimed step), --zipf 0 (uniform words), and a K above some of the sizes but below others
    (measured where it is below |V|, as documented)."""
    bench = _benchmark_module()
    args = bench.parse_args(["--modes", "ce", "--vocab-sizes", "300", "24000", "--k", "40", "1000", "--k-sweep",
                             "--warmup", "0", "--zipf", "0"])
    assert args.warmup == 0 and args.zipf == 0
    assert [(c["vocab_size"], c["K"]) for c in bench.configurations(args)] == [
        (300, 40), (300, 0), (24000, 40), (24000, 1000), (24000, 0)]


def test_benchmark_refuses_cuda_where_torch_sees_none_and_k_above_the_corpus_vocabulary(tiny_bin, monkeypatch,
                                                                                          capsys):
    """What only running needs is checked before anything runs, and only then: a documented --device cuda command
    still parses on a CPU machine."""
    import torch

    bench = _benchmark_module()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench, "run_interleaved", lambda *a, **k: pytest.fail("a configuration was run"))
    assert bench.parse_args(["--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--device", "cuda", "--modes", "ce", "--vocab-sizes", "300", "--k", "40"])
    assert exit_.value.code == 2
    assert "--device cuda: torch sees no CUDA device" in capsys.readouterr().err
    vocab = len((tiny_bin / "dict.tgt.txt").read_text().splitlines()) + 4
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--modes", "ce", "--data", str(tiny_bin), "--source-lang", "src", "--target-lang", "tgt",
                    "--candidates-dir", "unused", "--k", "5000"])
    assert exit_.value.code == 2
    assert (f"|V| = {vocab} (the target dictionary of {tiny_bin}): no K below it to measure (--k 5000)"
            in capsys.readouterr().err)


def test_phase_timer_charges_nested_calls_to_the_inner_phase(monkeypatch):
    """A timed call inside a phase is charged to its own phase and taken out of the outer one's. The clock
    is a counter the test advances: real sleeps overshoot on a loaded machine, past any fixed bound."""
    import time

    from smallvocab_tools.bench.phases import PhaseTimer

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    timer = PhaseTimer()

    class Owner:
        @staticmethod
        def work(seconds):
            clock[0] += seconds
            return seconds

    timer.wrap(Owner, "work", "sampling")
    with timer.phase("loss"):
        clock[0] += 0.25
        assert Owner.work(1.0) == 1.0
        clock[0] += 0.5
        with timer.phase("loss"):  # a phase inside itself: counted once
            clock[0] += 2.0
    assert timer.spans["sampling"] == 1.0 and timer.spans["loss"] == 2.75
    timer.reset()
    assert set(timer.spans.values()) == {0.0}


def _benchmark_module():
    from smallvocab_tools.bench import benchmark

    return benchmark


def test_benchmark_default_and_quick_configurations():
    """Defaults: the paper's K at 4.5K/14K/24K/70K, the K sweep at 24K, decoding at
    batch 1, greedy and beam 5; --quick: 24K, K = 1000 small vs full, CE and REINFORCE."""
    bench = _benchmark_module()

    def runs(argv):
        return [(c["mode"], c["vocab_size"], c["softmax"], c["K"]) + ((c["batch"], c["beam"]) if c["mode"] == "decode"
                                                                       else ()) for c in
                bench.configurations(bench.parse_args(argv))]

    default = runs([])
    train = [r for r in default if r[0] == "ce"]
    assert train == [("ce", 4500, "small", 500), ("ce", 4500, "full", 0), ("ce", 14000, "small", 1000),
                     ("ce", 14000, "full", 0)] + [("ce", 24000, "small", k) for k in (64, 256, 500, 1000, 2000)] + [
                     ("ce", 24000, "full", 0), ("ce", 70000, "small", 1000), ("ce", 70000, "full", 0)]
    assert [r[1:] for r in default if r[0] == "reinforce"] == [r[1:] for r in train]
    decode = [r for r in default if r[0] == "decode"]
    assert ("decode", 24000, "small", 1000, 1, 1) in decode and ("decode", 70000, "full", 0, 1, 5) in decode
    assert len(decode) == 4 * 2 * 2 and {r[4] for r in decode} == {1}
    assert runs(["--quick"]) == [("ce", 24000, "small", 1000), ("ce", 24000, "full", 0),
                                 ("reinforce", 24000, "small", 1000), ("reinforce", 24000, "full", 0)]
    quick = bench.parse_args(["--quick", "--steps", "4"])
    assert quick.steps == 4 and quick.warmup == 1  # an explicit option wins over --quick's


@pytest.mark.slow
def test_benchmark_several_samples_per_input(tmp_path):
    """--rl-samples 1 2: one REINFORCE configuration per N (CE unchanged), each small paired with its own full
    softmax in the table; loo with one sample is refused."""
    bench = _benchmark_module()
    cfgs = list(bench.configurations(bench.parse_args(["--quick", "--rl-samples", "1", "2"])))
    assert [(c["mode"], c.get("rl_samples"), c["softmax"]) for c in cfgs] == [
        ("ce", None, "small"), ("ce", None, "full"), ("reinforce", 1, "small"), ("reinforce", 1, "full"),
        ("reinforce", 2, "small"), ("reinforce", 2, "full")]
    run([REPO / "scripts" / "benchmark.py", "--modes", "reinforce", "--vocab-sizes", "300", "--k", "60",
         "--rl-samples", "2", "--rl-baseline", "loo", "--batch", "4", "--max-len", "6", "--embed-dim", "8",
         "--steps", "1", "--warmup", "1", "--threads", "1", "--json", tmp_path / "r.json", "--markdown",
         tmp_path / "r.md"])
    records = json.loads((tmp_path / "r.json").read_text())
    assert [(r["rl_samples"], r["rl_baseline"], r["softmax"]) for r in records] == [(2, "loo", "small"),
                                                                                    (2, "loo", "full")]
    assert 0 < records[0]["sample_len"] <= 6
    assert "| reinforce x2 | 300 | small | 60 |" in (tmp_path / "r.md").read_text()
    bad = run([REPO / "scripts" / "benchmark.py", "--rl-samples", "1", "--rl-baseline", "loo"], check=False)
    assert bad.returncode != 0 and ">= 2 with --rl-baseline loo" in bad.stderr


def test_benchmark_zipf_batches_look_like_real_ones():
    """--zipf: frequent target words (low ids) dominate, and the candidate lists are the
    gold words plus the most frequent words, so that the lists of a batch overlap."""
    from smallvocab_tools.bench.workload import make_batch

    sample = make_batch(vocab_size=5000, k=300, batch=8, max_len=40, device="cpu", zipf=1.2)
    target, cands = sample["target"], sample["net_input"]["candidates"]
    assert int((target[:, :-1] < 104).sum()) > 0.5 * target[:, :-1].numel()  # top 100 words: most tokens
    for row, gold in zip(cands.tolist(), target.tolist()):
        assert set(gold) <= set(row) and len(set(row)) == 300
        assert set(range(4, 150)) <= set(row)  # the most frequent words fill the rest
    union = set(cands.flatten().tolist())
    assert len(union) < 2 * 300  # a random fill would give about 8 x 300
    uniform = make_batch(vocab_size=5000, k=300, batch=8, max_len=40, device="cpu", zipf=0)
    assert len(set(uniform["net_input"]["candidates"].flatten().tolist())) > 4 * 300


@pytest.mark.slow
def test_benchmark_interleaves_rounds_on_a_fairseq_arch(tmp_path):
    """--rounds: small and full alternate, each record holds its rounds, its
    time is their median and the small one's speedup the median of the
    rounds' ratios; --arch: a stock fairseq arch, restricted like the task's."""
    import statistics

    run([REPO / "scripts" / "benchmark.py", "--arch", "transformer", "--embed-dim", "16", "--layers", "1",
         "--modes", "reinforce", "--vocab-sizes", "300", "--k", "40", "--k-sweep", "--batch", "4",
         "--max-len", "6", "--steps", "1", "--warmup", "0", "--threads", "1", "--rounds", "3",
         "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md"])
    records = json.loads((tmp_path / "r.json").read_text())
    assert [(r["mode"], r["softmax"]) for r in records] == [("reinforce", "small"), ("reinforce", "full")]
    for small, full in (records,):
        assert small["arch"] == full["arch"] == "transformer" and small["d"] == 16
        assert small["rounds"] == full["rounds"] == 3
        for r in (small, full):
            assert len(r["sec_per_step_rounds"]) == 3
            assert r["sec_per_step"] == round(statistics.median(r["sec_per_step_rounds"]), 4)
        ratios = [f / s for f, s in zip(full["sec_per_step_rounds"], small["sec_per_step_rounds"])]
        assert small["speedup"] == round(statistics.median(ratios), 3) and "speedup" not in full
    assert (tmp_path / "r.md").read_text().count("| transformer |") == 2


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


@pytest.mark.slow
def test_benchmark_measures_the_chunked_full_softmax_beside_small_and_full(tmp_path):
    """--full-chunked: REINFORCE configurations gain the chunked full softmax (CE ones do not), interleaved
    with small and full over the rounds; its speedup and memory are against the plain full softmax, and
    small's against both; the table gives both comparisons."""
    import statistics

    bench = _benchmark_module()
    cfgs = list(bench.configurations(bench.parse_args(["--quick", "--full-chunked"])))
    assert [(c["mode"], c["softmax"], c["K"]) for c in cfgs] == [
        ("ce", "small", 1000), ("ce", "full", 0), ("reinforce", "small", 1000), ("reinforce", "full", 0),
        ("reinforce", "chunked", 0)]
    run([REPO / "scripts" / "benchmark.py", "--modes", "reinforce", "--vocab-sizes", "300", "--k", "60",
         "--batch", "4", "--max-len", "6", "--embed-dim", "8", "--steps", "1", "--warmup", "0", "--threads", "1",
         "--rounds", "2", "--full-chunked", "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md"])
    small, full, chunked = json.loads((tmp_path / "r.json").read_text())
    assert [r["softmax"] for r in (small, full, chunked)] == ["small", "full", "chunked"]
    assert chunked["K"] == 0 and 0 < chunked["sample_len"] <= 6

    def ratio(ref, r):
        return round(statistics.median(a / b for a, b in zip(ref["sec_per_step_rounds"], r["sec_per_step_rounds"])),
                     3)

    assert small["speedup"] == ratio(full, small) and small["speedup_vs_chunked"] == ratio(chunked, small)
    assert chunked["speedup"] == ratio(full, chunked) and "speedup_vs_chunked" not in chunked
    table = (tmp_path / "r.md").read_text()
    assert "| speedup | memory ratio | speedup vs chunked | memory vs chunked |" in table
    row = next(line for line in table.splitlines() if "| small |" in line).split("|")
    assert row[-5].strip() == f"{small['speedup']:.2f}x" and row[-3].strip() == f"{small['speedup_vs_chunked']:.2f}x"


def test_benchmark_shapes_of_multilingual_checkpoints(capsys):
    """--shape: the M2M-100 418M and NLLB-200 600M Transformers (d 1024, FFN 4096, 16 heads, 12 + 12 layers,
    pre-norm, shared embeddings) at their own |V| unless --vocab-sizes says otherwise, --layers cutting their
    depth; refused with another model's options."""
    from smallvocab_tools.bench.workload import build_model, synthetic_task

    bench = _benchmark_module()
    cfgs = list(bench.configurations(bench.parse_args(["--shape", "nllb200_600m", "--modes", "reinforce", "--k",
                                                       "1000", "2000", "--full-chunked"])))
    assert [(c["arch"], c["shape"], c["vocab_size"], c["softmax"], c["K"]) for c in cfgs] == [
        ("transformer", "nllb200_600m", 256206, "small", 1000), ("transformer", "nllb200_600m", 256206, "small", 2000),
        ("transformer", "nllb200_600m", 256206, "full", 0), ("transformer", "nllb200_600m", 256206, "chunked", 0)]
    args = bench.parse_args(["--shape", "m2m100_418m", "--vocab-sizes", "300", "--k", "40", "--layers", "2"])
    cfg = next(bench.configurations(args))
    assert cfg["vocab_size"] == 300 and cfg["layers"] == 2
    model = build_model(cfg, synthetic_task(cfg))
    decoder = model.decoder
    assert model.encoder.embed_tokens.weight is decoder.embed_tokens.weight  # shared embeddings
    assert len(model.encoder.layers) == len(decoder.layers) == 2 and decoder.embed_dim == 1024
    layer = decoder.layers[0]
    assert layer.fc1.out_features == 4096 and layer.self_attn.num_heads == 16 and layer.normalize_before
    for argv in (["--shape", "m2m100_418m", "--embed-dim", "512"], ["--shape", "m2m100_418m", "--arch", "lstm"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
        assert "--shape m2m100_418m is a Transformer of its own d" in capsys.readouterr().err
