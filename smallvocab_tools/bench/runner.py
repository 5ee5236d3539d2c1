"""The runner: each configuration in a fresh process (``benchmark.py
--worker``, so that peak memory is its own), small and full of one setting
interleaved over --rounds, and one record per configuration (medians over
its rounds, the speedup the median of the rounds' pairwise ratios)."""

import json
import os
import statistics
import subprocess
import sys

from smallvocab_tools.bench.ab import ab_summary
from smallvocab_tools.bench.phases import DECIMALS
from smallvocab_tools.bench.report import mode_label
from smallvocab_tools.bench.train_worker import floor_summary


def pair_key(cfg: dict):
    """Configurations that differ only in the output layer (small K, full) form one interleaved group."""
    return tuple(sorted((key, json.dumps(value)) for key, value in cfg.items() if key not in ("softmax", "K")))


def run_interleaved(cfgs, rounds: int, log=lambda message: None):
    """Each group of configurations (small and full of one setting) run
    ``rounds`` times in turn (A B A B ...); returns one record per
    configuration: medians over its rounds, and for a small one, the median
    of the rounds' ratios full / small (``speedup``; a chunked full softmax's too, and small's against it,
    ``speedup_vs_chunked``)."""
    groups = {}
    for cfg in cfgs:
        groups.setdefault(pair_key(cfg), []).append(cfg)
    records = []
    for group in groups.values():
        runs = [[] for _ in group]
        for r in range(rounds):
            for i, cfg in enumerate(group):
                k = f" K={cfg['K']}" if cfg["K"] else ""
                label = f"{mode_label(cfg)} |V|={cfg['vocab_size']} {cfg['softmax']}{k}"
                log(f"running {label}" + (f" (round {r + 1}/{rounds})" if rounds > 1 else "") + " ...")
                record = run_isolated(cfg)
                log("  " + (f"{' vs '.join(f'{t:.3f}' for t in record['ab_sec_per_step'])} s per step or batch "
                            f"({record['ab']}), A / B {record['ab_ratio']:.3f}" if "ab" in record else
                            f"batch {cfg['batch']} beam {cfg['beam']}: {record['ms_per_sentence']:.2f} ms/sentence"
                            if cfg["mode"] == "decode" else
                            f"{record['sec_per_step']:.3f} s/step, products alone {record['products_sec']:.3f} s"
                            if "products_sec" in record else
                            f"{record['sec_per_step']:.3f} s/step, peak {record['peak_mem_mb']:,.0f} MB"))
                runs[i].append(record)
        time_key = "ms_per_sentence" if group[0]["mode"] == "decode" else "sec_per_step"
        full = next((i for i, cfg in enumerate(group) if cfg["softmax"] == "full"), None)
        chunked = next((i for i, cfg in enumerate(group) if cfg["softmax"] == "chunked"), None)
        for i, cfg in enumerate(group):
            record = dict(runs[i][0], rounds=rounds, **{f"{time_key}_rounds": [x[time_key] for x in runs[i]]})
            for key in (time_key, "tokens_per_sec", "sec_per_epoch", "peak_mem_mb", "peak_rss_mb"):
                values = [x[key] for x in runs[i] if x.get(key) is not None]
                if values:
                    record[key] = round(statistics.median(values), 4)
            if "ab" in record:  # both values' steps of every round, and the ratio over all their batches
                times = [sum((x["ab_rounds"][arm] for x in runs[i]), []) for arm in (0, 1)]
                lens = [statistics.mean(x["ab_sample_len"][arm] for x in runs[i]) for arm in (0, 1)]
                record.update(ab_rounds=times, ab_sample_len=[round(x, 1) for x in lens],
                              **ab_summary(times, cfg["decode_batch"] if cfg["mode"] == "decode" else None))
            if "products_sec" in record:  # --floor: every round's batches, and the ratio over all of them
                steps, products = ([t for x in runs[i] for t in x[key]] for key in ("floor_steps", "products_rounds"))
                counts = {key: int(statistics.median(x[key] for x in runs[i]))  # medians over the rounds
                          for key in ("products_flops", "product_calls", "other_aten_calls")}
                record.update(floor_steps=steps, products_rounds=products, **floor_summary(steps, products), **counts,
                              products_gflop=round(counts["products_flops"] / 1e9, 3))
            if "phases" in record:  # each phase's median over the rounds
                record["phases"] = {name: round(statistics.median(x["phases"][name] for x in runs[i]), DECIMALS)
                                    for name in record["phases"]}
            for ref, key, softmaxes in ((full, "speedup", ("small", "chunked")), (chunked, "speedup_vs_chunked",
                                                                                  ("small",))):
                if ref is not None and cfg["softmax"] in softmaxes:
                    ratios = [f[time_key] / s[time_key] for f, s in zip(runs[ref], runs[i])]
                    record[key] = round(statistics.median(ratios), 3)
            records.append(record)
    return records


def run_isolated(cfg: dict) -> dict:
    """One configuration in a fresh interpreter."""
    result = subprocess.run([sys.executable, "-m", "smallvocab_tools.bench.benchmark", "--worker", json.dumps(cfg)],
                            capture_output=True, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS=str(cfg["threads"])), check=False)
    if result.returncode != 0:
        raise RuntimeError(f"configuration {cfg} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
