"""`make demo`'s script end to end, on a tiny corpus and model (the smoke
version of the demo: every stage runs, the summary adds up)."""

import json

import pytest
from helpers import REPO, run


@pytest.mark.slow
def test_demo_script_end_to_end_small(tmp_path):
    demo = tmp_path / "demo"
    result = run(["bash", REPO / "scripts" / "demo.sh"],
                 env={"DEMO_DIR": str(demo), "DEMO_VOCAB": "700", "DEMO_TRAIN": "500", "DEMO_VP_EPOCHS": "1",
                      "DEMO_DIM": "16", "DEMO_CE_UPDATES": "8", "DEMO_RL_UPDATES": "4", "DEMO_BENCH_STEPS": "1",
                      "DEMO_BENCH_ROUNDS": "2", "DEMO_THREADS": "1"})
    out = result.stdout
    for stage in range(1, 9):  # progress: every stage announced, in order
        assert f"] {stage}/8 " in out
    assert out.index("] 3/8 ") < out.index("] 6/8 ") < out.index("] 8/8 ")
    assert "dictionary (words, without specials): src=" in out and "tgt=700" in out
    assert "valid | " in out and "recall@500" in out  # K = 500 below 10K words
    assert "  train | " in out and "reward" in out  # REINFORCE progress lines
    for path in ("data-bin/train.src-tgt.tgt.bin", "predictor/checkpoint_best.pt", "recall.png",
                 "ce/checkpoint_last.pt", "rl/checkpoint_last.pt", "candidates/train.k500.npy", "test-rl.txt"):
        assert (demo / path).exists(), path
    # decoding: one hypothesis per test sentence, every word inside that sentence's predicted vocabulary
    import numpy as np
    from fairseq.data import Dictionary

    hyps = (demo / "test-rl.txt").read_text().splitlines()
    assert len(hyps) == len((demo / "raw" / "test.tgt").read_text().splitlines())
    tgt_dict = Dictionary.load(str(demo / "data-bin" / "dict.tgt.txt"))
    lists = np.load(demo / "candidates" / "test.k500.npy")
    assert lists.shape == (len(hyps), 500)
    for row, hyp in zip(lists, hyps):
        assert {tgt_dict.index(word) for word in hyp.split()} <= set(row.tolist()), hyp
    summary = json.loads((demo / "summary.json").read_text())
    assert summary["K"] == 500 and summary["vocab_size"] == 704
    assert 0 < summary["recall_at_k_test"] <= 100 and 0 <= summary["bleu_test_after_ce"] <= 100
    assert summary["bleu_gain"] == round(summary["bleu_test_after_reinforce"] - summary["bleu_test_after_ce"], 2)
    ref_words = sum(len(line.split()) for line in (demo / "raw" / "test.tgt").read_text().splitlines())
    assert summary["length_ratio_test_after_reinforce"] == round(sum(len(h.split()) for h in hyps) / ref_words, 3)
    assert summary["length_ratio_test_after_ce"] > 0 and "length ratio on test" in out
    assert "reward gleu_bp" in out and "'reward': 'gleu_bp'" in (demo / "rl" / "train.log").read_text()
    times = summary["reinforce_sec_per_step"]
    assert times["small"] > 0 and times["full"] > 0
    # the speed line: small and full alternated (DEMO_BENCH_ROUNDS = 2), the median of the rounds' ratios
    records = {r["softmax"]: r for r in json.loads((demo / "bench.json").read_text())}
    rounds = [records[s]["sec_per_step_rounds"] for s in ("full", "small")]
    assert len(rounds[0]) == len(rounds[1]) == 2 and records["small"]["rounds"] == 2
    ratios = sorted(f / s for f, s in zip(*rounds))
    # bench.json keeps 3 decimals and the summary rounds that to 2 (so 0.9345 -> 0.935 -> 0.94): follow the chain
    assert records["small"]["speedup"] == round((ratios[0] + ratios[1]) / 2, 3)
    assert summary["speedup"] == round(records["small"]["speedup"], 2)
    assert "== summary" in out and f"-> {summary['speedup']:.2f}x faster" in out
    assert "BLEU on test" in out and "REINFORCE" in out
