#!/usr/bin/env python3
"""The closing summary of `make demo` (scripts/demo.sh): recall@K of the
vocabulary predictor, BLEU before and after REINFORCE, and REINFORCE seconds
per step and peak memory, small vocabulary vs full softmax.  Reads what the
demo wrote into --demo-dir (recall.md, bench.json, the REINFORCE log, the test
decodes test-ce.txt / test-rl.txt beside raw/test.tgt) and writes
DEMO_DIR/summary.json beside the printed summary."""

import argparse
import json
import re
import sys
from pathlib import Path

from smallvocab_tools.analysis.recipe_runs import corpus_scores


def recall_at(table: str, k: int):
    """(predictor, frequency baseline) recall@k from recall_curve.py's markdown table."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] == str(k):
            return float(cells[1]), float(cells[2])
    raise ValueError(f"no row for K = {k} in the recall table")


def first_last_reward(log: str):
    """First and last logged REINFORCE reward (sample GLEU x 100) of a fairseq-train log."""
    rewards = [float(m) for m in re.findall(r"\| train_inner \|.*?reward[ =]([-\d.]+)", log)]
    return (rewards[0], rewards[-1]) if rewards else None


def length_ratio(hyps: Path, refs: Path):
    """Words of the hypotheses over words of the references (BLEU's corpus length ratio, -tok none, as the
    recipes' records count it); None where the decode is missing."""
    return round(corpus_scores(hyps, refs)[1], 3) if hyps.is_file() else None


def summarize(demo_dir: Path, k: int, bleu_ce: float, bleu_rl: float) -> dict:
    recall, baseline = recall_at((demo_dir / "recall.md").read_text(), k)
    records = {r["softmax"]: r for r in json.loads((demo_dir / "bench.json").read_text())}
    small, full = records["small"], records["full"]
    log = demo_dir / "rl" / "train.log"
    rewards = first_last_reward(log.read_text()) if log.is_file() else None
    refs = demo_dir / "raw" / "test.tgt"
    ratios = {stage: length_ratio(demo_dir / f"test-{stage}.txt", refs) for stage in ("ce", "rl")}
    return {"vocab_size": full["vocab_size"], "K": k, "recall_at_k_test": recall,
            "frequency_baseline_recall_at_k_test": baseline, "bleu_test_after_ce": bleu_ce,
            "bleu_test_after_reinforce": bleu_rl, "bleu_gain": round(bleu_rl - bleu_ce, 2),
            "length_ratio_test_after_ce": ratios["ce"], "length_ratio_test_after_reinforce": ratios["rl"],
            "reward_first_last": rewards,
            "reinforce_sec_per_step": {"small": small["sec_per_step"], "full": full["sec_per_step"]},
            "reinforce_peak_mem_mb": {"small": small["peak_mem_mb"], "full": full["peak_mem_mb"]},
            # the median of interleaved pairs' ratios (benchmark.py --rounds), else the ratio of the two
            "speedup": round(small.get("speedup") or full["sec_per_step"] / small["sec_per_step"], 2),
            "memory_ratio": round(full["peak_mem_mb"] / small["peak_mem_mb"], 2) if small["peak_mem_mb"] > 0 else None,
            "batch": small["batch"], "d": small["d"], "threads": small["threads"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo-dir", type=Path, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--bleu-ce", type=float, required=True)
    parser.add_argument("--bleu-rl", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        s = summarize(args.demo_dir, args.k, args.bleu_ce, args.bleu_rl)
    except (OSError, ValueError, KeyError) as err:
        parser.error(f"the demo's outputs in {args.demo_dir} are incomplete: {err}")
    (args.demo_dir / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    gain = s["bleu_gain"]
    verdict = "REINFORCE raised BLEU" if gain > 0 else "REINFORCE did NOT raise BLEU"
    memory = f" ({s['memory_ratio']:.2f}x less)" if s["memory_ratio"] else ""
    before, after = s["length_ratio_test_after_ce"], s["length_ratio_test_after_reinforce"]
    lengths = f"\n  length ratio on test (words over the references'): {before} -> {after}" if before and after else ""
    print(f"""
== summary ({args.demo_dir / 'summary.json'})
  target vocabulary |V| = {s['vocab_size']:,} entries; small vocabulary K = {s['K']}
  vocabulary predictor, recall@{s['K']} on test: {s['recall_at_k_test']:.2f}% \
(frequency baseline {s['frequency_baseline_recall_at_k_test']:.2f}%)
  BLEU on test (greedy, inside the predicted vocabulary): after CE {s['bleu_test_after_ce']:.2f}, \
after REINFORCE {s['bleu_test_after_reinforce']:.2f} ({gain:+.2f}: {verdict}){lengths}
  REINFORCE step (batch {s['batch']}, d = {s['d']}, {s['threads']} threads): \
small {s['reinforce_sec_per_step']['small']:.3f} s, full softmax {s['reinforce_sec_per_step']['full']:.3f} s \
-> {s['speedup']:.2f}x faster
  REINFORCE peak memory: small {s['reinforce_peak_mem_mb']['small']:,.0f} MB, \
full softmax {s['reinforce_peak_mem_mb']['full']:,.0f} MB{memory}""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
