"""scripts/benchmark.py: one fresh process per configuration, records with the
fields the results tables use (the numbers themselves are not tested).
Its command line: test_benchmark_options.py; --floor: test_benchmark_floor.py;
--ab and --set: test_benchmark_ab.py."""

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
