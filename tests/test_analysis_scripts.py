"""scripts/rare_words.py (output tokens per frequency decile) and
scripts/plot_benchmark.py (plots of benchmark.py's records)."""

import json

from conftest import REPO, run


def _dict_file(path, n=20):
    """Words w0 (most frequent) .. w{n-1}, then fairseq's zero-count padding."""
    lines = [f"w{i} {100 - i}" for i in range(n)] + ["madeupword0000 0", "madeupword0001 0"]
    path.write_text("\n".join(lines) + "\n")
    return path


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

    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    from plot_benchmark import k_curves, memory_pairs, speedups

    assert speedups(records)[("cpu", "reinforce", None, 128)] == [(4500, 2.0), (24000, 4.0)]  # paper's K only
    assert speedups(records)[("cpu", "decode", 1, 128)] == [(4500, 1.5)]
    assert k_curves(records) == {("cpu", "reinforce", 24000): ([(64, 1.5), (1000, 2.0)], 8.0)}
    assert [(s, f) for _, s, f in memory_pairs(records)] == [(100, 300), (200, 900)]
