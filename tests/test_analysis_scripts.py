"""scripts/rare_words.py (output tokens per frequency decile), scripts/plot_benchmark.py (plots of
benchmark.py's records), scripts/recall_curve.py and scripts/rl_logs.py (summaries of fairseq-train logs): the
commands, and their modules in smallvocab_tools.analysis in-process."""

import json

import pytest
from helpers import REPO, run


def _dict_file(path, n=20):
    """Words w0 (most frequent) .. w{n-1}, then fairseq's zero-count padding."""
    lines = [f"w{i} {100 - i}" for i in range(n)] + ["madeupword0000 0", "madeupword0001 0"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_rare_words_shares_per_decile(tmp_path):
    """20 words: decile d holds w{2d-2}, w{2d-1}; padding entries are not words."""
    dictionary = _dict_file(tmp_path / "dict.tgt.txt")
    (tmp_path / "ref.txt").write_text("w0 w1 w19 .\nw2 w3\n")  # "." is not in the dictionary: unknown
    (tmp_path / "gen.txt").write_text("S-1\tsrc\nH-1\t-0.5\tw0 w0\nH-0\t-0.1\tw18 <unk> madeupword0000 w0\n"
                                      "T-0\tw0\n")
    out = run([REPO / "scripts" / "rare_words.py", "--dict", dictionary,
               "--output", f"ref (K = 5)={tmp_path / 'ref.txt'}", "--output", f"sys={tmp_path / 'gen.txt'}",
               "--png", tmp_path / "rare.png"]).stdout
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| decile")}
    # ref: 6 tokens: w0 w1 (decile 1), w2 w3 (decile 2), w19 (decile 10), "." (unknown)
    assert rows["1 (most frequent)"] == ["33.333", "50.000"]  # sys: w0 three times of 6 tokens
    assert rows["2"] == ["33.333", "0.000"]
    assert rows["10 (rarest)"] == ["16.667", "16.667"]  # ref w19; sys w18
    assert rows["unknown"] == ["16.667", "33.333"]  # ref "."; sys <unk> and the padding symbol
    assert rows["tokens"] == ["6", "6"] and "| ref (K = 5) | sys |" in out  # a label may hold "="
    assert (tmp_path / "rare.png").stat().st_size > 1000
    bad = run([REPO / "scripts" / "rare_words.py", "--dict", tmp_path / "ref.txt", "--output", "x=y"], check=False)
    assert bad.returncode != 0 and "not a fairseq dictionary line" in bad.stderr


@pytest.mark.slow
def test_plot_benchmark_draws_the_three_plots(tmp_path):
    def rec(mode, vocab, softmax, k, sec, mem, **extra):
        return {"device": "cpu", "mode": mode, "softmax": softmax, "vocab_size": vocab, "K": k, "batch": 128,
                "sec_per_step": sec, "peak_mem_mb": mem, **extra}

    records = [rec("reinforce", 4500, "small", 500, 1.0, 100), rec("reinforce", 4500, "full", 0, 2.0, 300),
               rec("reinforce", 24000, "small", 64, 1.5, 150), rec("reinforce", 24000, "small", 1000, 2.0, 200),
               rec("reinforce", 24000, "full", 0, 8.0, 900),
               rec("decode", 4500, "small", 500, None, None, ms_per_sentence=10.0, beam=1),
               rec("decode", 4500, "full", 0, None, None, ms_per_sentence=15.0, beam=1)]
    (tmp_path / "b.json").write_text(json.dumps(records))
    run([REPO / "scripts" / "plot_benchmark.py", tmp_path / "b.json", "--out-dir", tmp_path / "plots",
         "--prefix", "t"])
    for name in ("speedup", "time_vs_k", "memory"):
        assert (tmp_path / "plots" / f"t_{name}.png").stat().st_size > 1000

    from smallvocab_tools.analysis.plot_benchmark import k_curves, memory_pairs, speedups

    assert speedups(records)[("cpu", "reinforce", None, 128)] == [(4500, 2.0), (24000, 4.0)]  # paper's K only
    assert speedups(records)[("cpu", "decode", 1, 128)] == [(4500, 1.5)]
    assert k_curves(records) == {("cpu", "reinforce", 24000): ([(64, 1.5), (1000, 2.0)], 8.0)}
    assert [(s, f) for _, s, f in memory_pairs(records)] == [(100, 300), (200, 900)]


def _train_log(path, start, valid, train):
    """A fairseq-train log (--log-format simple) with its config line, validations and training epochs."""
    lines = [f"2026 | INFO | fairseq_cli.train | {{'checkpoint': {{'finetune_from_model': '{start}'}}}}"]
    for epoch, (bleu, updates) in enumerate(valid, 1):
        lines.append(f"2026 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss 2.1 | bleu {bleu} | "
                     f"num_updates {updates}")
    for epoch, (reward, frac) in enumerate(train, 1):
        lines.insert(epoch, f"2026 | INFO | train | epoch {epoch:03d} | loss 0.1 | reward {reward} | "
                            f"greedy_frac {frac} | entropy 1.5 | num_updates {100 * epoch}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_rl_logs_table_and_start_epochs(tmp_path):
    """scripts/rl_logs.py: dev BLEU per validation, best, first/last epoch metrics; Figure 3's pairs of
    (CE dev BLEU at epoch e, dev BLEU after REINFORCE started from checkpoint e)."""
    rl = _train_log(tmp_path / "rl-a-k500.train.log", "/x/ce/checkpoint_best.pt", [(30.5, 100), (31.25, 200)],
                    [(28.0, 0.05), (29.5, 0.08)])
    out = run([REPO / "scripts" / "rl_logs.py", "table", rl, "--json", tmp_path / "r.json"]).stdout
    assert "| rl-a-k500 | 200 | 30.50 31.25 | 31.25 | 28 / 29.5 | 0.05 / 0.08 | 1.5 / 1.5 |" in out
    assert json.loads((tmp_path / "r.json").read_text())[0]["valid"][1]["bleu"] == 31.25
    ce = {k: _train_log(tmp_path / f"ce-{k}.train.log", "None", [(5.0, 1), (9.0, 2), (12.0, 3), (15.0, 4)], [])
          for k in ("small", "full")}
    runs = [_train_log(tmp_path / f"rl-{k}-e{e}.train.log", f"/x/ce/checkpoint{e}.pt", [(bleu, 1)], [])
            for k, e, bleu in (("small", 4, 16.5), ("small", 1, 4.0), ("full", 2, 9.5))]
    args = [REPO / "scripts" / "rl_logs.py", "start-epochs", "--ce", f"small={ce['small']}", "--ce",
            f"full={ce['full']}", *[f for r in runs for f in ("--rl", f"{r.name.split('-')[1]}={r}")]]
    out = run([*args, "--out", tmp_path / "fig3.png"]).stdout
    rows = [line for line in out.splitlines() if line.startswith("| small") or line.startswith("| full")]
    assert rows == ["| small | 1 | 5.0 | 4.00 | -1.00 |", "| small | 4 | 15.0 | 16.50 | +1.50 |",
                    "| full | 2 | 9.0 | 9.50 | +0.50 |"]
    assert (tmp_path / "fig3.png").stat().st_size > 1000
    bad = run([*args[:4], "--rl", f"other={runs[0]}"], check=False)
    assert bad.returncode != 0 and "--rl other: no --ce log with that label" in bad.stderr


# -- scripts/recall_curve.py, in-process with a stand-in predictor ---------------------------------


def _recall_curve(monkeypatch, vocab=300, computed=None):
    """The script's module with load_predictor/recall_at/frequency_scores replaced: a predictor of a
    |V|-word target dictionary whose recall@K is K / |V| (percent); ``computed`` collects the Ks measured."""
    from types import SimpleNamespace

    from fairseq_smallvocab.predictor import inference
    from smallvocab_tools.analysis import recall_curve as mod

    task = SimpleNamespace(target_dictionary=[None] * vocab, cfg=SimpleNamespace(data="data-bin"))

    def recall_at(model, task, split, ks, batch_size=256, scores=None):
        if computed is not None:
            computed.append(list(ks))
        return {k: 100.0 * k / vocab for k in ks}

    # the script imports them when it runs (so that its --help loads without fairseq): replaced where it finds them
    monkeypatch.setattr(inference, "load_predictor", lambda predictor, data=None: (object(), task))
    monkeypatch.setattr(inference, "recall_at", recall_at)
    monkeypatch.setattr(inference, "frequency_scores", lambda task: None)
    return mod, inference


def test_recall_curve_says_which_k_are_above_the_vocabulary(monkeypatch, capsys):
    mod, _ = _recall_curve(monkeypatch, vocab=300)
    mod.main(["--run", "vp=ckpt.pt", "--ks", "50,100,500,1000"])
    out, err = capsys.readouterr()
    assert "| 100 |" in out and "| 500 |" not in out
    assert "K = 500, 1000 left out for vp" in err and "|V| = 300" in err


def test_recall_curve_refuses_when_every_k_is_above_the_vocabulary(monkeypatch, capsys):
    computed = []
    mod, _ = _recall_curve(monkeypatch, vocab=300, computed=computed)
    with pytest.raises(SystemExit) as exit_:
        mod.main(["--run", "vp=ckpt.pt", "--ks", "500,1000"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "every K (500, 1000)" in err and "|V| = 300" in err and "--ks" in err
    assert computed == []


def test_recall_curve_warns_where_the_predictor_barely_beats_the_frequency_list(monkeypatch, capsys):
    """A predictor less than 3 points above the frequency list at some K: a warning per such K, naming both
    recalls and what to do; none where it is clearly above."""
    mod, inference = _recall_curve(monkeypatch, vocab=300)
    gains = {50: 2.5, 100: 6.0, 150: -30.5}
    monkeypatch.setattr(inference, "recall_at", lambda model, task, split, ks, batch_size=256, scores=None: {
        k: 100.0 * k / 300 + (0.0 if scores is not None else gains[k]) for k in ks})
    monkeypatch.setattr(inference, "frequency_scores", lambda task: "frequency")
    mod.main(["--run", "vp=ckpt.pt", "--ks", "50,100,150"])
    out, err = capsys.readouterr()
    assert "| 50 | 19.17 | 16.67 |" in out
    assert err.count("warning:") == 2 and "warning: vp: recall@50 19.17% is within 3 points of the frequency " \
        "list's 16.67%" in err and "the full softmax (--small-vocab-size 0)" in err
    # far below: said as it is, not "within 3 points"
    assert "warning: vp: recall@150 19.50% is 30.50 points below the frequency list's 50.00%" in err
    assert "the predictor adds nothing" in err and err.count("adds little") == 1


@pytest.mark.parametrize("where", ["missing folder", "a file as folder", "a folder as the file", "format"])
def test_recall_curve_checks_the_png_path_before_computing(monkeypatch, capsys, tmp_path, where):
    computed = []
    mod, _ = _recall_curve(monkeypatch, computed=computed)
    (tmp_path / "file").write_text("x\n")
    png = {"missing folder": tmp_path / "plots" / "recall.png", "a file as folder": tmp_path / "file" / "r.png",
           "a folder as the file": tmp_path, "format": tmp_path / "recall.xyz"}[where]
    with pytest.raises(SystemExit) as exit_:
        mod.main(["--run", "vp=ckpt.pt", "--ks", "50", "--png", str(png)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--png {png}" in err and "Traceback" not in err
    assert {"missing folder": "does not exist; create it", "a file as folder": "is not a folder",
            "a folder as the file": "is a folder", "format": "'xyz' is not an image format"}[where] in err
    assert computed == []  # nothing computed
    mod.main(["--run", "vp=ckpt.pt", "--ks", "50", "--png", str(tmp_path / "recall.png")])
    assert (tmp_path / "recall.png").stat().st_size > 1000


@pytest.mark.slow
def test_rl_logs_tuning_compares_recipe_folders(tmp_path):
    """scripts/rl_logs.py tuning: one row per REINFORCE run of each folder, the settings that differ (only),
    and each decode's change over the folder's CE run (a linked one, as CE_FROM makes, counts)."""
    refs = ["a b c d", "e f g h"]
    (tmp_path / "data" / "raw").mkdir(parents=True)
    for split in ("valid", "test"):
        (tmp_path / "data" / "raw" / f"{split}.de").write_text("\n".join(refs) + "\n")
    base, tuned = tmp_path / "base", tmp_path / "lambda"

    def run_dir(folder, name, hyps, bleus, settings):
        path = folder / name
        path.mkdir(parents=True)
        _train_log(path / "train.log", "ce.pt", [(b, 50 * i) for i, b in enumerate(bleus, 1)], [])
        for split in ("valid", "test"):
            (path / f"hyp-{split}.txt").write_text("\n".join(hyps) + "\n")
        (path / "recipe.settings").write_text(f"epochs=1 {settings} ARCH_ARGS=--arch transformer --dropout 0.3\n")

    common = "OPTIMIZER=adam LR=3e-5 SAMPLES=4"
    run_dir(base, "ce-k5-s1", ["a b c x", "e f g h"], [30.0], "")
    run_dir(base, "rl-k5-s1", refs, [31.0, 32.5], f"{common} LAMBDA=0.005")
    tuned.mkdir()
    (tuned / "ce-k5-s1").symlink_to(base / "ce-k5-s1")
    run_dir(tuned, "rl-k5-s1", ["a b c x", "e f g x"], [29.0, 28.0], f"{common} LAMBDA=0.05")
    (tuned / "rl-k5-s1" / "hyp-valid.txt").write_text("a b c x\ne f g\n")  # one word short on dev
    out = run([REPO / "scripts" / "rl_logs.py", "tuning", base, tuned, "--data", tmp_path / "data",
               "--markdown", tmp_path / "t.md"]).stdout
    import sacrebleu

    ce, worse, short = (sacrebleu.corpus_bleu(h, [refs], tokenize="none", force=True).score
                        for h in (["a b c x", "e f g h"], ["a b c x", "e f g x"], ["a b c x", "e f g"]))
    lines = out.splitlines()
    assert lines[0] == ("| folder | LAMBDA | softmax | seed | best dev BLEU in training | at update | dev greedy "
                        "(change over CE) | test greedy (change over CE) | dev greedy length ratio (CE's) | "
                        "min to best |")
    # the length ratios: CE's dev output has 8 words for the references' 8, the tuned run's 7
    assert lines[2] == (f"| base | 0.005 | small (K = 5) | 1 | 32.50 | 100 | 100.00 ({100 - ce:+.2f}) | "
                        f"100.00 ({100 - ce:+.2f}) | 1.000 (1.000) | - |")
    assert lines[3] == (f"| lambda | 0.05 | small (K = 5) | 1 | 29.00 | 50 | {short:.2f} ({short - ce:+.2f}) | "
                        f"{worse:.2f} ({worse - ce:+.2f}) | 0.875 (1.000) | - |")
    assert len(lines) == 4 and (tmp_path / "t.md").read_text() == out


def test_rl_logs_recipe_gains_per_seed_and_their_mean():
    """scripts/rl_logs.py recipe's comparisons: REINFORCE against its CE checkpoint and against the better of
    the controls present (per score), small against full, per seed and the mean over the seeds that have both
    sides, with how many scores reach the bar as shown (+0.695 rounds to +0.70, which meets +0.7)."""
    from smallvocab_tools.analysis.recipe_tables import gains_table

    def run_(stage, k, seed, dev, test):  # dev greedy and test greedy only: no beam-5 decodes
        return {"stage": stage, "k": k, "seed": seed, "bleu": {"valid": dev, "test": test}}

    runs = [run_("ce", 5, 1, 30.0, 29.0), run_("rl", 5, 1, 30.695, 30.0),
            run_("ctl-ce", 5, 1, 30.5, 28.0), run_("ctl-constant", 5, 1, 29.0, 29.8),
            run_("ce", 0, 1, 30.0, 29.0), run_("rl", 0, 1, 31.01, 29.5),
            run_("ce", 5, 2, 31.0, 30.0), run_("rl", 5, 2, 31.3, 31.0),  # seed 2: no controls, no full REINFORCE
            run_("ce", 0, 2, 31.0, 30.0)]
    lines = gains_table(runs).splitlines()
    assert lines[0] == "| comparison | bar | seed | dev greedy | test greedy | scores at the bar |"
    assert lines[2:] == [
        "| small: REINFORCE - its CE checkpoint | +0.7 | 1 | +0.70 | +1.00 | 2 of 2 |",
        "| small: REINFORCE - its CE checkpoint | +0.7 | 2 | +0.30 | +1.00 | 1 of 2 |",
        "| small: REINFORCE - its CE checkpoint | +0.7 | mean | +0.50 | +1.00 | 1 of 2 |",
        "| small: REINFORCE - the better control | +0.4 | 1 | +0.20 | +0.20 | 0 of 2 |",
        "| full: REINFORCE - its CE checkpoint | - | 1 | +1.01 | +0.50 | - |",
        "| REINFORCE: small - full | -0.3 | 1 | -0.32 | +0.50 | 1 of 2 |"]


def test_rl_logs_recipe_joins_the_records_of_runs_made_elsewhere(tmp_path, capsys):
    """scripts/rl_logs.py recipe --runs: the records that --json wrote for another folder (another machine's
    seed) join one table, with the mean over the seeds and their gains (minutes averaged only over one kind of
    device); a run in two sources, a file that holds no run records and a folder without its references are
    refused, naming the problem."""
    from smallvocab_tools.analysis import rl_logs


    def record(stage, k, seed, dev, device):
        return {"stage": stage, "k": k, "seed": seed, "bleu": {"valid": dev}, "best_dev": dev, "best_update": 50,
                "min_per_epoch": 1.0 + seed, "min_to_best": 2.0, "curve": [[50, dev]], "device": device}

    for seed, shift, device in ((1, 0.0, "cpu"), (2, 1.0, "NVIDIA H100 80GB HBM3")):
        (tmp_path / f"s{seed}.json").write_text(json.dumps(
            [record("ce", 5, seed, 30.0 + shift, "cpu"), record("rl", 5, seed, 31.0 + 2 * shift, device)]))
    rl_logs.main(["recipe", "--runs", str(tmp_path / "s1.json"), "--runs", str(tmp_path / "s2.json"),
                  "--markdown", str(tmp_path / "t.md")])
    out = capsys.readouterr().out
    assert "| REINFORCE | 2 | 33.00 | - | - | - | 33.00 | 50 | 3.0 | 2.0 | NVIDIA H100 80GB HBM3 |" in out
    assert "| small (K = 5) | REINFORCE | mean | 32.00 | - | - | - | 32.00 | 50 | - | - | mixed |" in out
    assert "| small (K = 5) | CE (best checkpoint) | mean | 30.50 | - | - | - | 30.50 | 50 | 2.5 | 2.0 | cpu |" in out
    assert "| small: REINFORCE - its CE checkpoint | +0.7 | mean | +1.50 | 1 of 1 |" in out
    assert (tmp_path / "t.md").read_text() == out
    with pytest.raises(SystemExit, match=r"ce-k5-s1 is in both .*s1.json and .*s1.json: leave one of them out"):
        rl_logs.main(["recipe", "--runs", str(tmp_path / "s1.json"), "--runs", str(tmp_path / "s1.json")])
    (tmp_path / "bad.json").write_text(json.dumps({"stage": "rl"}))
    with pytest.raises(SystemExit, match=r"bad.json: not a list of run records \(stage, k, seed"):
        rl_logs.main(["recipe", "--runs", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit) as exit_:
        rl_logs.main(["recipe", str(tmp_path), "--runs", str(tmp_path / "s1.json")])
    assert exit_.value.code == 2 and "recipe FOLDER needs --data" in capsys.readouterr().err


def test_rl_logs_recipe_plot_tells_the_seeds_apart(tmp_path, monkeypatch):
    """recipe --png: one line per REINFORCE or control run from its CE checkpoint's best, its style the run, its
    colour the softmax, its marker the seed; once there are several seeds, the legend names each seed by its
    marker and each run by its style and colour alone."""
    from smallvocab_tools.analysis import plotting
    from smallvocab_tools.analysis.recipe_tables import recipe_plot

    drawn = {}
    monkeypatch.setattr(plotting, "finish", lambda plt, fig, ax, path, *args: drawn.setdefault("ax", ax) and path)

    def record(stage, k, seed, dev):
        return {"stage": stage, "k": k, "seed": seed, "bleu": {}, "best_dev": dev, "best_update": 50,
                "min_per_epoch": None, "min_to_best": None, "curve": [] if stage == "ce" else [[50, dev + 1]]}

    runs = [record(stage, k, seed, 30.0 + seed) for seed in (1, 2) for k in (5, 0) for stage in ("ce", "rl")]
    runs.append(record("ctl-ce", 5, 2, 20.0))
    recipe_plot(runs, tmp_path / "p.png")
    lines = {line.get_label(): line for line in drawn["ax"].get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == {"small: REINFORCE", "full: REINFORCE", "small: control: CE continued", "seed 1", "seed 2"}
    curves = [(tuple(line.get_xdata()), tuple(line.get_ydata()), line.get_marker(), line.get_linestyle(),
               line.get_color()) for line in drawn["ax"].get_lines() if len(line.get_xdata())]
    assert sorted(curves) == sorted([((0, 50), (31.0, 32.0), ".", "-", "C0"), ((0, 50), (32.0, 33.0), "x", "-", "C0"),
                                     ((0, 50), (31.0, 32.0), ".", "-", "C1"), ((0, 50), (32.0, 33.0), "x", "-", "C1"),
                                     ((0, 50), (32.0, 21.0), "x", "--", "C0")])
    assert (lines["seed 1"].get_marker(), lines["seed 2"].get_marker()) == (".", "x")
    # a run's entry is no one seed's: its line style and colour, no marker
    assert [(lines[name].get_linestyle(), lines[name].get_color(), lines[name].get_marker()) for name in
            ("small: REINFORCE", "full: REINFORCE", "small: control: CE continued")] == [
        ("-", "C0", "None"), ("-", "C1", "None"), ("--", "C0", "None")]
    drawn.clear()
    recipe_plot([r for r in runs if r["seed"] == 1], tmp_path / "p.png")
    assert {line.get_label() for line in drawn["ax"].get_lines()} == {"small: REINFORCE", "full: REINFORCE"}
    assert {line.get_marker() for line in drawn["ax"].get_lines()} == {"."}
    drawn.clear()  # more seeds than markers: they repeat, and every seed is still named
    recipe_plot([record("rl", 5, seed, 30.0) for seed in range(1, 9)], tmp_path / "p.png")
    named = {line.get_label(): line.get_marker() for line in drawn["ax"].get_lines()}
    assert named["seed 8"] == named["seed 1"] == "." and named["seed 7"] == "*"


def test_the_seeds_table_in_results_is_what_the_kept_records_give(tmp_path, capsys):
    """The table of the Transformer recipe's three seeds (seed 3 has no controls) and its comparisons
    (docs/runs/transformer-rl-seeds.md), and the means docs/results.md shows, are what rl_logs.py recipe makes of
    the records kept in docs/data/transformer-rl-seeds (the command results.md shows), line for line."""
    from smallvocab_tools.analysis import rl_logs

    runs = REPO / "docs" / "data" / "transformer-rl-seeds"
    args = ["recipe"] + [a for s in (1, 2, 3) for a in ("--runs", str(runs / f"seed{s}.json"))]
    rl_logs.main(args + ["--png", str(tmp_path / "dev_bleu.png")])
    out = capsys.readouterr().out
    table = out[:out.index("\nwrote ")].strip()
    docs = REPO / "docs"
    assert table.count("| mean |") == 13 and table in (docs / "runs" / "transformer-rl-seeds.md").read_text()
    rows = table.split("\n\n")[0].splitlines()  # results.md: the first table's header and its means
    assert "\n".join(rows[:2] + [row for row in rows if "| mean |" in row]) in (docs / "results.md").read_text()
    # seed 3's rows: CE and REINFORCE for each softmax, and the three comparisons that need no control
    assert table.count("| 3 |") == 7
    assert (tmp_path / "dev_bleu.png").stat().st_size > 0


def test_rl_logs_reads_where_a_run_trained(tmp_path):
    """parse's "device": the GPU fairseq's trainer names, else "cpu" where the config says --cpu, else None."""
    from smallvocab_tools.analysis.train_logs import parse

    config = "2026-11-25 01:08:52 | INFO | fairseq_cli.train | {'common': {'cpu': %s, 'seed': 2}}"
    gpu = ("2026-11-25 01:08:53 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; total memory = 79.189 GB ; "
           "name = NVIDIA H100 80GB HBM3                   ")
    for lines, device in (([config % "True"], "cpu"), ([config % "False", gpu], "NVIDIA H100 80GB HBM3"),
                          ([config % "False"], None)):
        (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
        assert parse(tmp_path / "train.log")["device"] == device


def test_rl_logs_recipe_tests_reinforce_against_each_comparison_per_seed(tmp_path, capsys):
    """scripts/rl_logs.py recipe on a folder: REINFORCE against its CE checkpoint and each control of its own
    softmax and seed on test2016 beam 5: each run's BLEU, chrF and length ratio, and REINFORCE's gains with the
    paired bootstrap's p, which is that of REINFORCE and that run alone (the resamples are the same); a seed
    without controls is tested against its CE run (linked, as CE_SEED makes it); a decode of the wrong length is
    refused."""
    import random

    import sacrebleu
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    from smallvocab_tools.analysis import rl_logs

    rng = random.Random(0)
    words = "a dog runs on the grass while two men watch it from far away".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(60)]
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "test.de").write_text("\n".join(refs) + "\n")
    (tmp_path / "data" / "raw" / "valid.de").write_text("\n".join(refs) + "\n")

    def damaged(share):  # each reference with a share of its words replaced, and the last one dropped
        return [" ".join(w if rng.random() > share else "x" for w in ref.split()[:-1]) for ref in refs]

    hyps = {"rl-k5-s1": damaged(0.1), "ce-k5-s1": damaged(0.4), "ctl-ce-k5-s1": damaged(0.11),
            "ctl-constant-k5-s1": damaged(0.5), "rl-k5-s2": damaged(0.2)}
    out = tmp_path / "runs"
    for name, lines in hyps.items():
        (out / name).mkdir(parents=True)
        _train_log(out / name / "train.log", "ce.pt", [(30.0, 50)], [])
        (out / name / "hyp-test.beam5.txt").write_text("\n".join(lines) + "\n")
    (out / "ce-k5-s2").symlink_to(out / "ce-k5-s1")
    rl_logs.main(["recipe", str(out), "--data", str(tmp_path / "data"), "--bootstrap", "200"])
    text = capsys.readouterr().out
    table = text[text.index("| softmax | seed | run | test beam 5 BLEU |"):].splitlines()
    assert table[0] == ("| softmax | seed | run | test beam 5 BLEU | chrF | length ratio | REINFORCE's BLEU gain "
                        "over it (p) | chrF gain (p) |")
    expected = []
    for seed, names in ((1, ["rl", "ce", "ctl-ce", "ctl-constant"]), (2, ["rl", "ce"])):
        mine = hyps[f"rl-k5-s{seed}"]
        for name in names:
            theirs = hyps["ce-k5-s1" if name == "ce" else f"{name}-k5-s{seed}"]
            bleu = sacrebleu.corpus_bleu(theirs, [refs], tokenize="none", force=True)
            chrf = sacrebleu.corpus_chrf(theirs, [refs]).score
            cells = [f"{bleu.score:.2f}", f"{chrf:.2f}", f"{bleu.sys_len / bleu.ref_len:.3f}"]
            if name == "rl":
                cells += ["-", "-"]
            else:
                _, alone = PairedTest([("rl", mine), (name, theirs)], {"BLEU": BLEU(tokenize="none", force=True),
                                      "chrF": CHRF()}, [refs], test_type="bs", n_samples=200)()
                gain_bleu = sacrebleu.corpus_bleu(mine, [refs], tokenize="none", force=True).score - bleu.score
                gain_chrf = sacrebleu.corpus_chrf(mine, [refs]).score - chrf
                cells += [f"{gain_bleu:+.2f} ({alone['BLEU'][1].p_value:.4f})",
                          f"{gain_chrf:+.2f} ({alone['chrF2'][1].p_value:.4f})"]
            label = {"rl": "REINFORCE", "ce": "CE (best checkpoint)", "ctl-ce": "control: CE continued",
                     "ctl-constant": "control: constant reward"}[name]
            expected.append(f"| small (K = 5) | {seed} | {label} | " + " | ".join(cells) + " |")
    assert table[2:] == expected
    assert float(table[5].split("|")[7].split("(")[1].rstrip(") ")) < 0.05  # 10% of words lost against 50%
    rl_logs.main(["recipe", str(out), "--data", str(tmp_path / "data"), "--bootstrap", "0"])
    assert "paired bootstrap" not in capsys.readouterr().out
    (out / "ctl-ce-k5-s1" / "hyp-test.beam5.txt").write_text("a dog\n")
    with pytest.raises(SystemExit, match=r"ctl-ce-k5-s1/hyp-test.beam5.txt: 1 lines, but .*test.de has 60"):
        rl_logs.main(["recipe", str(out), "--data", str(tmp_path / "data")])


def test_demo_summary_length_ratio_counts_words_and_refuses_misaligned_decodes(tmp_path):
    from smallvocab_tools.analysis.demo_summary import length_ratio

    refs = tmp_path / "test.tgt"
    refs.write_text("a b c d\ne f\n")  # 6 words
    hyps = tmp_path / "test-rl.txt"
    hyps.write_text("a b c\ne\n")  # 4 words
    assert length_ratio(hyps, refs) == round(4 / 6, 3)
    assert length_ratio(tmp_path / "missing.txt", refs) is None
    hyps.write_text("a b c\n")
    with pytest.raises(SystemExit, match="1 lines, but .* has 2"):
        length_ratio(hyps, refs)
