"""scripts/benchmark.py's command line: the configurations it makes by default and with --quick, the edge values
that mean something, and the flags and values it refuses (each naming the problem) before any worker starts."""


import pytest


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
