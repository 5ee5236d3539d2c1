"""REINFORCE against each of its comparisons, one seed at a time, on one
decode of the Transformer-RL recipe's runs (test2016 beam 5 by default):
each run's BLEU, chrF and length ratio, and REINFORCE's difference to it
with sacrebleu's paired bootstrap (BLEU and chrF over the same resamples).

The comparisons are the run's CE checkpoint and its two controls (CE
continued, the constant reward), each of the same softmax and seed: a gain
counts only where it holds against each of them on its own seed's test
sentences, not on the mean over seeds alone."""

from pathlib import Path

from smallvocab_tools.analysis import bleu as one_bleu
from smallvocab_tools.analysis.paired_bleu import read
from smallvocab_tools.analysis.recipe_runs import RECIPE_STAGES, decode_name, run_folders
from smallvocab_tools.analysis.recipe_tables import cell


def significance_rows(folder: Path, data: Path, tgt: str, decode: str = "test.beam5", n_samples: int = 1000,
                      tokenize: str = one_bleu.TOKENIZE):
    """One dict per run beside a REINFORCE run (same K and seed) that has the decode hyp-DECODE.txt: its stage,
    K, seed, BLEU, chrF and length ratio, and (for the others) REINFORCE's BLEU and chrF minus its own with the
    paired bootstrap's p (``bleu.paired``). References: DATA/raw/SPLIT.TGT, scored as the recipe's table scores
    them (``tokenize``)."""
    split = decode.split(".")[0]
    refs = read(data / "raw" / f"{split}.{tgt}")
    runs = run_folders(folder)
    rows = []
    for k, seed in sorted(((k, seed) for stage, k, seed in runs if stage == "rl"), key=lambda ks: (-ks[0], ks[1])):
        # REINFORCE first, then each other stage of its K and seed; only those with the decode
        stages = ["rl"] + [s for s in RECIPE_STAGES if s != "rl"]
        systems = [(s, runs[s, k, seed] / f"hyp-{decode}.txt") for s in stages if (s, k, seed) in runs]
        systems = [(s, hyp) for s, hyp in systems if hyp.is_file()]
        if len(systems) < 2 or systems[0][0] != "rl":  # REINFORCE's decode and at least one other's
            continue
        named = []
        for s, hyp in systems:
            hyps = read(hyp)
            if len(hyps) != len(refs):
                raise SystemExit(f"{hyp}: {len(hyps)} lines, but {data / 'raw' / f'{split}.{tgt}'} has {len(refs)}")
            named.append((s, hyps))
        # the first system is the test's baseline: REINFORCE, each other run compared with it (the p is symmetric)
        results = one_bleu.paired(named, refs, n_samples, tokenize, chrf=True)
        for i, (s, hyps) in enumerate(named):
            row = {"stage": s, "k": k, "seed": seed, "bleu": results["BLEU"][i].score,
                   "chrf": results["chrF"][i].score,
                   "length_ratio": one_bleu.corpus(hyps, refs, tokenize).length_ratio}
            if i:
                for name, key in (("BLEU", "bleu"), ("chrF", "chrf")):
                    row[f"{key}_gain"] = results[name][0].score - results[name][i].score
                    row[f"{key}_p"] = results[name][i].p_value
            rows.append(row)
    return rows


def significance_table(rows, decode: str = "test.beam5") -> str:
    split, _, tag = decode.partition(".")
    what = decode_name(split, "." + tag if tag else "")
    head = (f"| softmax | seed | run | {what} BLEU | chrF | length ratio | REINFORCE's BLEU gain over it (p) | "
            "chrF gain (p) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        gains = [f"{r[key + '_gain']:+.2f} ({r[key + '_p']:.4f})" if key + "_gain" in r else "-"
                 for key in ("bleu", "chrf")]
        softmax = f"small (K = {r['k']})" if r["k"] else "full"
        lines.append(f"| {softmax} | {r['seed']} | {RECIPE_STAGES[r['stage']]} | {cell(r['bleu'])} | "
                     f"{cell(r['chrf'])} | {cell(r['length_ratio'], '{:.3f}')} | {gains[0]} | {gains[1]} |")
    return "\n".join(lines) + "\n"
