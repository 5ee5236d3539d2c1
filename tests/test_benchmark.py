"""scripts/benchmark.py: one fresh process per configuration, records with the
fields the results tables use (the numbers themselves are not tested)."""

import json

from conftest import REPO, run


def test_benchmark_writes_records_and_table(tmp_path):
    out = run([REPO / "scripts" / "benchmark.py", "--vocab-sizes", "300", "--k", "40", "--batch", "4",
               "--max-len", "6", "--embed-dim", "8", "--steps", "1", "--warmup", "1", "--threads", "1",
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
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    from benchmark import make_batch

    sample = make_batch(vocab_size=500, k=60, batch=3, max_len=20, device="cpu")
    cands = sample["net_input"]["candidates"]
    assert cands.shape == (3, 60) and cands[:, :4].tolist() == [[0, 1, 2, 3]] * 3
    for row, target in zip(cands.tolist(), sample["target"].tolist()):
        assert set(target) <= set(row) and len(set(row)) == 60
