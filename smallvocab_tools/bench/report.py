"""The report: the records as markdown tables (what the command prints and
``--markdown`` writes): training steps, their phases (--phases), their
products alone (--floor), the A / B comparisons (--ab), then decoding; first
the settings a run was given (--set)."""

from smallvocab_tools.bench.phases import PHASES


def mode_label(record) -> str:
    """reinforce with N > 1 samples per input: "reinforce xN"."""
    n = record.get("rl_samples") or 1
    return f"{record['mode']} x{n}" if n > 1 else record["mode"]


def _against(r, ref, key: str, softmaxes) -> list:
    """(speedup, memory ratio) cells of record ``r`` against ``ref`` (the full or chunked softmax's record of
    its setting) where ``r``'s softmax is one of ``softmaxes``; empty cells otherwise."""
    if ref is None or r["softmax"] not in softmaxes:
        return ["", ""]
    speedup = f"{r.get(key) or ref['sec_per_step'] / r['sec_per_step']:.2f}x"
    memory = f"{ref['peak_mem_mb'] / r['peak_mem_mb']:.2f}x less" if r["peak_mem_mb"] > 0 else ""
    return [speedup, memory]


def markdown(records) -> str:
    """Training steps, then decoding, each small beside its full softmax."""
    out = []
    compared = [r for r in records if "ab" in r]  # --ab: their own table below (both settings' times pooled)
    floors = [r for r in records if "products_sec" in r]  # --floor: their own table (each batch ran twice)
    train = [r for r in records if r["mode"] != "decode" and "ab" not in r and "products_sec" not in r]
    if train:
        with_chunked = any(r["softmax"] == "chunked" for r in train)
        head = ("| device | arch | mode | V | softmax | K | d | batch | len | s/step | tokens/s | s/epoch | peak MB | "
                "peak RSS MB | speedup | memory ratio |"
                + (" speedup vs chunked | memory vs chunked |" if with_chunked else ""))
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        refs = {softmax: {(r["device"], r.get("arch"), mode_label(r), r["vocab_size"]): r for r in train
                          if r["softmax"] == softmax} for softmax in ("full", "chunked")}
        for r in train:
            key = (r["device"], r.get("arch"), mode_label(r), r["vocab_size"])
            cells = _against(r, refs["full"].get(key), "speedup", ("small", "chunked"))
            if with_chunked:
                cells += _against(r, refs["chunked"].get(key), "speedup_vs_chunked", ("small",))
            arch = r.get("shape") or r.get("arch") or "lstm_smallvocab"
            lines.append(f"| {r['device']} | {arch} | {mode_label(r)} | {r['vocab_size']:,} | {r['softmax']} | "
                         f"{r['K'] or '-'} | {r['d']} | {r['batch']} | {r['max_len']} | {r['sec_per_step']:.3f} | "
                         f"{r['tokens_per_sec']:,.0f} | {r['sec_per_epoch']:,.0f} | {r['peak_mem_mb']:,.0f} | "
                         f"{r.get('peak_rss_mb', 0):,.0f} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    largest = [r for r in train if "largest_batch" in r]
    if largest:
        head = ("| arch | mode | V | softmax | K | largest batch | s/step | sentences/s | peak MB | batch vs full | "
                "sentences/s vs full |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        full = {(r.get("arch"), mode_label(r), r["vocab_size"]): r for r in largest if r["softmax"] == "full"}
        for r in largest:
            ref = full.get((r.get("arch"), mode_label(r), r["vocab_size"]))
            small = ref is not None and r["softmax"] == "small" and ref["largest_batch"] > 0
            batch_ratio = f"{r['largest_batch'] / ref['largest_batch']:.2f}x" if small else ""
            speed_ratio = f"{r['sentences_per_sec'] / ref['sentences_per_sec']:.2f}x" if small else ""
            lines.append(f"| {r.get('arch') or 'lstm_smallvocab'} | {mode_label(r)} | {r['vocab_size']:,} | "
                         f"{r['softmax']} | {r['K'] or '-'} | {r['largest_batch']} | {r['sec_per_step']:.3f} | "
                         f"{r['sentences_per_sec']:,.1f} | {r['peak_mem_mb']:,.0f} | {batch_ratio} | {speed_ratio} |")
        out.append("The largest batch whose step fits (--largest-batch; sentences, each with its samples):\n\n"
                   + "\n".join(lines))
    timed = [r for r in train if r.get("phases")]
    if timed:
        head = ("| mode | V | softmax | K | sample limit | sample len | s/step | " + " | ".join(PHASES) +
                " | rest | sampling ms/token |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in timed:
            limit = (f"{r['sample_limit']} {r['max_sample_len']}" if r["mode"] == "reinforce" else "-")
            rest = r["sec_per_step"] - sum(r["phases"].values())
            lines.append(f"| {mode_label(r)} | {r['vocab_size']:,} | {r['softmax']} | {r['K'] or '-'} | {limit} | "
                         f"{r.get('sample_len', '-')} | {r['sec_per_step']:.3f} | " +
                         " | ".join(f"{r['phases'][name]:.3f}" for name in PHASES) + f" | {rest:.3f} | "
                         f"{'-' if r.get('ms_per_sampled_token') is None else r['ms_per_sampled_token']} |")
        out.append("Seconds per step by phase (means over the timed steps; smallvocab_tools/bench/phases.py):\n\n"
                   + "\n".join(lines))
    if floors:
        head = ("| arch | mode | V | softmax | K | batch | sample len | s/step | products alone s | step / products | "
                "GFLOP | GFLOP/s alone | product calls | other ATen calls |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in floors:
            lines.append(f"| {r.get('arch') or 'lstm_smallvocab'} | {mode_label(r)} | {r['vocab_size']:,} | "
                         f"{r['softmax']} | {r['K'] or '-'} | {r['batch']} | {r.get('sample_len', '-')} | "
                         f"{r['sec_per_step']:.3f} | {r['products_sec']:.3f} | {r['step_over_products']:.2f} | "
                         f"{r['products_gflop']:.1f} | "
                         f"{r['products_gflop'] / r['products_sec'] if r['products_sec'] else 0:.0f} | "
                         f"{r['product_calls']:,} | {r['other_aten_calls']:,} |")
        out.append("Each step's matrix products replayed alone (--floor; medians over the timed batches, step / "
                   "products: the median of the batches' ratios; smallvocab_tools/bench/floor.py):\n\n"
                   + "\n".join(lines))
    if compared:
        head = ("| mode | V | softmax | K | setting | A | B | sample len A / B | time A | time B | unit | A / B |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in compared:
            setting = r["ab"].partition("=")[0]
            decode = r["mode"] == "decode"
            mode = f"decode, batch {r['batch']}, beam {r['beam']}" if decode else mode_label(r)
            times = r["ab_ms_per_sentence"] if decode else r["ab_sec_per_step"]
            lens = (f"{r['ab_sample_len'][0]} / {r['ab_sample_len'][1]}" if r["mode"] == "reinforce" else "-")
            lines.append(f"| {mode} | {r['vocab_size']:,} | {r['softmax']} | {r['K'] or '-'} | {setting} | "
                         f"{r['ab_values'][0]} | {r['ab_values'][1]} | {lens} | {times[0]:.3f} | {times[1]:.3f} | "
                         f"{'ms/sentence' if decode else 's/step'} | {r['ab_ratio']:.3f} |")
        out.append("Two values of one setting in one process (--ab; medians over the timed batches, A / B: the "
                   "median of the batches' ratios):\n\n" + "\n".join(lines))
    decode = [r for r in records if r["mode"] == "decode" and "ab" not in r]  # --ab: its own table above
    if decode:
        head = "| device | arch | V | softmax | K | batch | beam | len | ms/sentence | tokens/s | speedup |"
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        full = {(r["device"], r.get("arch"), r["vocab_size"], r["batch"], r["beam"]): r
                for r in decode if r["softmax"] == "full"}
        for r in decode:
            ref = full.get((r["device"], r.get("arch"), r["vocab_size"], r["batch"], r["beam"]))
            speedup = (f"{r.get('speedup') or ref['ms_per_sentence'] / r['ms_per_sentence']:.2f}x"
                       if ref is not None and r["softmax"] == "small" else "")
            arch = r.get("shape") or r.get("arch") or "lstm_smallvocab"
            lines.append(f"| {r['device']} | {arch} | {r['vocab_size']:,} | {r['softmax']} | {r['K'] or '-'} | "
                         f"{r['batch']} | {r['beam']} | {r['max_len']} | {r['ms_per_sentence']:.2f} | "
                         f"{r['tokens_per_sec']:,.0f} | {speedup} |")
        out.append("\n".join(lines))
    settings = sorted({spec for r in records for spec in r.get("set") or ()})
    if settings:  # --set: what every configuration ran under
        out.insert(0, "Settings (--set): " + ", ".join(f"`{spec}`" for spec in settings))
    return "\n\n".join(out) + "\n"
