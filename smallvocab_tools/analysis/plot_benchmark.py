#!/usr/bin/env python3
"""Plots of scripts/benchmark.py's JSON records (the paper's Tables 5 and 6 as
figures), written as PNG files into --out-dir:

* PREFIX_speedup.png: full-softmax time over small-vocabulary time against |V|,
  per mode (CE and REINFORCE steps; decoding, one line per beam), the small
  runs at the paper's K (1000 above 10K words, else 500);
* PREFIX_time_vs_k.png: seconds per step against K at each |V| with a K sweep,
  the full softmax as a dashed line;
* PREFIX_memory.png: peak memory, small beside full, per mode and |V|.

A plot whose records are missing is skipped (with a message).

    python scripts/plot_benchmark.py docs/data/bench_synthetic.json --out-dir docs/data --prefix bench
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def _key(r):
    return (r["device"], r["mode"], r["vocab_size"], r.get("beam"), r["batch"])


def _cost(r):
    return r["ms_per_sentence"] if r["mode"] == "decode" else r["sec_per_step"]


def _label(mode, beam, batch=None):
    return {"ce": "CE step", "reinforce": "REINFORCE step"}.get(mode) or f"decoding, batch {batch}, beam {beam}"


def paper_k_pairs(records):
    """(small record at the paper's K, the full-softmax record of the same device,
    mode, |V|, beam and batch) for every such small record that has one."""
    from fairseq_smallvocab.candidates.space import default_small_vocab_size  # here: --help loads without fairseq

    full = {_key(r): r for r in records if r["softmax"] == "full"}
    for r in records:
        ref = full.get(_key(r))
        if r["softmax"] == "small" and ref is not None and r["K"] == default_small_vocab_size(r["vocab_size"]):
            yield r, ref


def speedups(records):
    """{(device, mode, beam, batch): [(|V|, full / small)]} at the paper's K."""
    lines = defaultdict(list)
    for small, full in paper_k_pairs(records):
        lines[(small["device"], small["mode"], small.get("beam"), small["batch"])].append(
            (small["vocab_size"], _cost(full) / _cost(small)))
    return {key: sorted(points) for key, points in lines.items()}


def k_curves(records):
    """{(device, mode, |V|): ([(K, s/step)], full s/step or None)} where more than one K was run."""
    small, full = defaultdict(list), {}
    for r in records:
        if r["mode"] == "decode":
            continue
        key = (r["device"], r["mode"], r["vocab_size"])
        if r["softmax"] == "small":
            small[key].append((r["K"], r["sec_per_step"]))
        else:
            full[key] = r["sec_per_step"]
    return {key: (sorted(points), full.get(key)) for key, points in small.items() if len(points) > 1}


def memory_pairs(records):
    """[(label, small MB, full MB)] per device, mode and |V|, small at the paper's K."""
    return [(f"{small['mode']}\n{small['vocab_size'] / 1000:g}K", small["peak_mem_mb"], full["peak_mem_mb"])
            for small, full in paper_k_pairs(records) if full.get("peak_mem_mb") is not None]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", type=Path, help="record files written by benchmark.py --json")
    parser.add_argument("--out-dir", type=Path, default=Path("."))
    parser.add_argument("--prefix", default="bench")
    args = parser.parse_args(argv)
    records = []
    for path in args.json:
        try:
            records += json.loads(path.read_text())
        except (OSError, ValueError) as err:
            parser.error(f"{path}: not a benchmark.py JSON file ({err})")
    # synthetic sweeps only (one |V| per real corpus), and no --ab records (two settings' steps pooled)
    records = [r for r in records if not r.get("data") and "ab" not in r and "products_sec" not in r]
    from smallvocab_tools.analysis.plotting import finish, new_figure

    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    lines = speedups(records)
    if any(len(points) > 1 for points in lines.values()):
        plt, fig, ax = new_figure()
        for (device, mode, beam, batch), points in sorted(lines.items(), key=str):
            ax.plot([v for v, _ in points], [s for _, s in points], marker="o",
                    label=f"{_label(mode, beam, batch)} ({device})")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        sizes = sorted({v for points in lines.values() for v, _ in points})
        ax.set_xticks(sizes, [f"{v / 1000:g}K" for v in sizes])
        ax.minorticks_off()
        written.append(finish(plt, fig, ax, args.out_dir / f"{args.prefix}_speedup.png", "|V| (target vocabulary)",
                              "speedup of the small vocabulary (x)",
                              "full softmax time / small-vocabulary time (K = 500 or 1000)"))
    else:
        print("speedup plot skipped: needs small and full records at two or more |V|", file=sys.stderr)
    curves = k_curves(records)
    if curves:
        plt, fig, ax = new_figure()
        for (device, mode, vocab), (points, full_time) in sorted(curves.items(), key=str):
            line, = ax.plot([k for k, _ in points], [t for _, t in points], marker="o",
                            label=f"{_label(mode, None)}, |V| = {vocab:,} ({device})")
            if full_time is not None:
                ax.axhline(full_time, color=line.get_color(), ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        written.append(finish(plt, fig, ax, args.out_dir / f"{args.prefix}_time_vs_k.png",
                              "K (small vocabulary); dashed: full softmax", "seconds per step",
                              "time per step against K"))
    else:
        print("time-vs-K plot skipped: no |V| with more than one K", file=sys.stderr)
    pairs = memory_pairs(records)
    if pairs:
        plt, fig, ax = new_figure((max(6, 0.7 * len(pairs) + 2), 4))
        xs = range(len(pairs))
        ax.bar([x - 0.2 for x in xs], [p[1] for p in pairs], width=0.4, label="small vocabulary")
        ax.bar([x + 0.2 for x in xs], [p[2] for p in pairs], width=0.4, label="full softmax")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([p[0] for p in pairs], fontsize=8)
        written.append(finish(plt, fig, ax, args.out_dir / f"{args.prefix}_memory.png", "", "peak memory (MB)",
                              "peak memory of a training step", grid_axis="y"))
    else:
        print("memory plot skipped: no small/full pair with memory", file=sys.stderr)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
