"""Does the small softmax pay on your model, here?  Small vs full softmax for
a REINFORCE step and for beam-search decoding, on your model's flags, your
corpus's |V| and K, on this machine; then which to use.

Whether the small softmax is faster depends on the model as much as on |V|:
on a deep, wide model the output layer is a small share of the step, on a
small one a large share.  This measures it instead of a rule of thumb: a
model built from your fairseq-train flags (``--model-args``, random weights),
dictionaries of your corpus's sizes, synthetic sentences as long as your
training split's on average (Zipf-distributed target words, so that a batch's
candidate lists overlap as a predictor's do), every sample and hypothesis
exactly that long.  Each configuration runs in a fresh process (peak memory
its own), small and full in turn (``--rounds`` alternates them again; the
speedup is the median of the rounds' ratios).  A REINFORCE step is
fairseq-train's update (--rl-samples samples per sentence, the ``loo``
baseline); a CE step is fairseq-train's cross-entropy update on a batch as
large as fairseq-train makes them from your training split at
``--max-tokens`` (the mean of its batches, sorted by length as fairseq sorts
them; the quick start's time budget plans CE with its pace); decoding is
``SequenceGenerator``'s beam search, the small side with the vocabulary
predictor predicting each batch's candidates.  The
REINFORCE step also runs with the smallest output layer there is (K =
``CEILING_K``: the special symbols and one word), the ceiling: what any K
could gain on this model at most, so that "0.95x of at most 1.10x" says where
the step's time goes.  A couple of minutes on 2 cores for a 3 + 3-layer
Transformer; speed on a busy machine drifts, so run it when nothing else runs
(or raise --rounds).  ``--json`` also writes the verdict, its ratios and the
paces (the quick start follows the verdict and plans its BUDGET with the
paces).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from smallvocab_tools.bench.benchmark import NSPECIAL, POSITIVE, arch_problem, model_arch, paper_k
from smallvocab_tools.bench.report import markdown
from smallvocab_tools.bench.runner import run_interleaved

# a REINFORCE step (or a decoded sentence) this much faster small counts as paying; below the lower bound the
# two are the same within this machine's drift, and the full softmax (no recall to lose) is the choice
PAYS, SAME = 1.2, 1.05
CEILING_K = NSPECIAL + 1  # the smallest output layer: the special symbols and one word


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True,
                        help="your binarized corpus (fairseq-preprocess, scripts/prepare_data.py): its dictionaries "
                             "give |V|, its training split the sentence lengths")
    parser.add_argument("-s", "--source-lang", required=True)
    parser.add_argument("-t", "--target-lang", required=True)
    parser.add_argument("--model-args", required=True, metavar="FLAGS",
                        help="your model's fairseq-train flags, --arch and its settings (the quick start's "
                             "ARCH_ARGS)")
    parser.add_argument("--k", type=POSITIVE, default=None,
                        help="candidates per sentence, special symbols included (default: the paper's rule, "
                             "1000 if |V| > 10,000 else 500)")
    parser.add_argument("--rl-samples", type=POSITIVE, default=4, help="REINFORCE samples per sentence")
    parser.add_argument("--batch", type=POSITIVE, default=64, help="REINFORCE: sentences per update")
    parser.add_argument("--max-tokens", type=POSITIVE, default=4096,
                        help="CE: fairseq-train's --max-tokens, which sizes its batches (the quick start's: 4096)")
    parser.add_argument("--beam", type=POSITIVE, default=5)
    parser.add_argument("--decode-batch", type=POSITIVE, default=64, help="decoding: sentences per batch")
    parser.add_argument("--steps", type=POSITIVE, default=2, help="timed REINFORCE steps (after one untimed)")
    parser.add_argument("--rounds", type=POSITIVE, default=1,
                        help="run small and full this many times each, alternating; medians are reported")
    parser.add_argument("--threads", type=POSITIVE, default=2, help="torch threads, as your training runs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json", type=Path, help="also write the verdict, its ratios and the records here")
    args = parser.parse_args(argv)
    arch = model_arch(args.model_args)
    if arch is None:
        parser.error(f"--model-args {args.model_args!r}: name the model's arch (--arch ARCH), as fairseq-train "
                     "takes it")
    for lang in (args.source_lang, args.target_lang):
        if not (args.data / f"dict.{lang}.txt").is_file():
            parser.error(f"{args.data / f'dict.{lang}.txt'}: not found: --data takes a folder binarized by "
                         "fairseq-preprocess (scripts/prepare_data.py), -s / -t naming its languages")
    problem = arch_problem(arch)  # before the corpus is read and any worker starts
    if problem:
        parser.error(f"--model-args {args.model_args!r}: {problem}")
    if args.json is not None:
        from smallvocab_tools.data.output_dir import output_file_problem

        problem = output_file_problem(args.json, "does-it-pay.json")
        if problem:
            parser.error(f"--json {args.json}: {problem}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device; give --device cpu")
    return args


def corpus_shape(data: Path, src: str, tgt: str, max_tokens: int = 4096) -> dict:
    """|V| of both dictionaries, the mean source and target lengths (tokens, eos included) of the training
    split, and fairseq-train's CE batches of it at ``max_tokens`` (``fairseq_batches``)."""
    import numpy as np
    from fairseq.data import Dictionary, data_utils

    dicts = {lang: Dictionary.load(str(data / f"dict.{lang}.txt")) for lang in (src, tgt)}
    lengths, sizes = {}, {}
    for lang in (src, tgt):
        prefix = next((data / f"train.{a}-{b}.{lang}" for a, b in ((src, tgt), (tgt, src))
                       if (data / f"train.{a}-{b}.{lang}.idx").is_file()), None)
        if prefix is None:
            raise SystemExit(f"error: {data}: no binarized training split train.{src}-{tgt}.{lang}: --data takes "
                             "a folder binarized by fairseq-preprocess (scripts/prepare_data.py)")
        dataset = data_utils.load_indexed_dataset(str(prefix), dicts[lang])
        sizes[lang] = np.array(dataset.sizes, dtype=np.int64)  # (a copy: the view dies with the dataset's mmap)
        lengths[lang] = max(2, round(float(statistics.mean(dataset.sizes.tolist()))))
    ce_batch, epoch_updates = fairseq_batches(sizes[src], sizes[tgt], max_tokens)
    return {"vocab_size": len(dicts[tgt]), "src_vocab_size": len(dicts[src]),
            "src_len": lengths[src], "tgt_len": lengths[tgt], "ce_batch": ce_batch, "epoch_updates": epoch_updates,
            "max_tokens": max_tokens}


def fairseq_batches(src_sizes, tgt_sizes, max_tokens: int):
    """(sentences in the mean batch, batches an epoch) of fairseq-train's translation batches at ``max_tokens``:
    the pairs sorted by source length, then target length (LanguagePairDataset.ordered_indices), cut by
    ``data_utils.batch_by_size`` (a pair's tokens: the longer side; sentences a multiple of 8, fairseq's
    --required-batch-size-multiple)."""
    import numpy as np
    from fairseq.data import data_utils

    src_sizes, tgt_sizes = np.asarray(src_sizes, dtype=np.int64), np.asarray(tgt_sizes, dtype=np.int64)
    order = np.lexsort((tgt_sizes, src_sizes))
    tokens = np.maximum(src_sizes, tgt_sizes)
    batches = data_utils.batch_by_size(order, lambda i: int(tokens[i]), max_tokens=max_tokens,
                                       required_batch_size_multiple=8, num_tokens_vec=tokens[order])
    return max(1, round(sum(map(len, batches)) / len(batches))), len(batches)  # (what fairseq batches, all of it)


def configurations(args, shape: dict, k: int):
    """The REINFORCE steps and the decoding runs, small (K) and full, as the benchmark's workers take them."""
    base = {"device": args.device, "vocab_size": shape["vocab_size"], "src_vocab_size": shape["src_vocab_size"],
            "arch": model_arch(args.model_args), "model_args": args.model_args, "layers": None, "d": None,
            "threads": args.threads, "zipf": 1.2, "epoch_sentences": 50000}
    for softmax, kk in (("small", k), ("full", 0)):
        yield dict(base, mode="ce", softmax=softmax, K=kk, batch=shape["ce_batch"], max_len=shape["tgt_len"],
                   steps=args.steps, warmup=1)
    for softmax, kk in (("small", k), ("small", CEILING_K), ("full", 0)):
        yield dict(base, mode="reinforce", softmax=softmax, K=kk, batch=args.batch, max_len=shape["tgt_len"],
                   steps=args.steps, warmup=1, rl_samples=args.rl_samples, rl_baseline="loo",
                   sample_limit="flat", max_sample_len=shape["tgt_len"])
    for softmax, kk in (("small", k), ("full", 0)):
        yield dict(base, mode="decode", softmax=softmax, K=kk, batch=args.decode_batch, beam=args.beam,
                   decode_batch=args.decode_batch, max_len=shape["tgt_len"], src_len=shape["src_len"],
                   decode_sentences=args.decode_batch, steps=1, warmup=1)


def _judge(ratio: float) -> str:
    return "pays" if ratio >= PAYS else "does not pay" if ratio < SAME else "pays little"


def judged(records, k: int) -> dict:
    """The measured ratios (full's time / small's, each the median of the rounds' ratios) and what they say:
    {"verdict": "pays" | "pays little" | "does not pay" (the REINFORCE step's), "step_ratio", "ceiling" (the
    step's ratio with the smallest output layer, ``CEILING_K``; None where not measured), "decode_ratio",
    "ce_ratio" (None where not measured), "memory_ratio", "k", "sec_per_step" ({"ce" | "reinforce": {"small" |
    "full": seconds}}) and "ms_per_sentence" ({"small" | "full": decoding's}), the paces a time budget plans
    with}."""
    def find(mode, softmax, kk=None):
        return next((r for r in records if r["mode"] == mode and r["softmax"] == softmax
                     and (kk is None or r.get("K", kk) == kk)), None)

    step, step_full, lowest = find("reinforce", "small", k), find("reinforce", "full"), \
        find("reinforce", "small", CEILING_K) if k != CEILING_K else None
    dec, dec_full = find("decode", "small"), find("decode", "full")
    ce, ce_full = find("ce", "small"), find("ce", "full")
    step_ratio = step.get("speedup") or step_full["sec_per_step"] / step["sec_per_step"]
    ceiling = None if lowest is None or lowest is step else \
        lowest.get("speedup") or step_full["sec_per_step"] / lowest["sec_per_step"]
    return {"verdict": _judge(step_ratio), "step_ratio": round(step_ratio, 3),
            "ceiling": None if ceiling is None else round(ceiling, 3),
            "ceiling_sec_per_step": None if ceiling is None else lowest["sec_per_step"],
            "decode_ratio": round(dec.get("speedup") or dec_full["ms_per_sentence"] / dec["ms_per_sentence"], 3),
            "ce_ratio": None if ce is None or ce_full is None else
            round(ce.get("speedup") or ce_full["sec_per_step"] / ce["sec_per_step"], 3),
            "sec_per_step": {"ce": {"small": ce and ce["sec_per_step"], "full": ce_full and ce_full["sec_per_step"]},
                             "reinforce": {"small": step["sec_per_step"], "full": step_full["sec_per_step"]}},
            "ms_per_sentence": {"small": dec["ms_per_sentence"], "full": dec_full["ms_per_sentence"]},
            "memory_ratio": round(step_full["peak_mem_mb"] / step["peak_mem_mb"], 3) if step["peak_mem_mb"] > 0
            else None, "k": k, "step": step, "step_full": step_full, "decode": dec, "decode_full": dec_full}


def verdict(records, shape: dict, k: int, args) -> str:
    """Which softmax to use, from the measured ratios (``judged``)."""
    said = judged(records, k)
    step, step_full, dec, dec_full = said["step"], said["step_full"], said["decode"], said["decode_full"]
    step_ratio, dec_ratio, memory, ceiling = said["step_ratio"], said["decode_ratio"], said["memory_ratio"], \
        said["ceiling"]
    lowest = "" if ceiling is None else \
        f"the step with a {CEILING_K}-word output layer: {said['ceiling_sec_per_step']:.3f} s, {ceiling:.2f}x"
    if ceiling is None:
        of_at_most = ""
    elif ceiling < SAME:  # no K could gain what this machine's drift would not hide
        of_at_most = f" ({lowest}: the output layer costs nothing measurable here)"
    elif ceiling < step_ratio:  # the smaller output layer measured slower: the machine's drift, not the model
        of_at_most = (f" ({lowest}, no faster than K = {k}'s: the two differ by this machine's drift, which is "
                      "larger than the output layer's share here)")
    else:
        share = 1 - 1 / ceiling
        of_at_most = f" of at most {ceiling:.2f}x ({lowest}; the output layer is {share:.0%} of the full step)"
    lines = [f"|V| = {shape['vocab_size']:,}, K = {k}, {model_arch(args.model_args)} as --model-args builds it, "
             f"sentences of {shape['src_len']} -> {shape['tgt_len']} tokens (your training split's means), "
             f"{args.threads} thread(s), {args.device}:",
             f"- a REINFORCE step ({args.rl_samples} samples per sentence, {args.batch} sentences): small "
             f"{step['sec_per_step']:.3f} s, full {step_full['sec_per_step']:.3f} s: {step_ratio:.2f}x faster small"
             + of_at_most + (f", {memory:.2f}x less memory" if memory else "") + f" ({_judge(step_ratio)})",
             *([] if said["ce_ratio"] is None else [
                 f"- a CE step (fairseq-train's batches at --max-tokens {shape['max_tokens']:,}: "
                 f"{shape['ce_batch']:,} sentences, {shape['epoch_updates']:,} an epoch): small "
                 f"{said['sec_per_step']['ce']['small']:.3f} s, full {said['sec_per_step']['ce']['full']:.3f} s: "
                 f"{said['ce_ratio']:.2f}x faster small"]),
             f"- beam {args.beam} decoding ({args.decode_batch} sentences a batch, the predictor included): small "
             f"{dec['ms_per_sentence']:.2f} ms, full {dec_full['ms_per_sentence']:.2f} ms a sentence: "
             f"{dec_ratio:.2f}x faster small ({_judge(dec_ratio)})"]
    what_k_costs = (f"what K = {k} costs is the share of reference words outside the candidates (fairseq-train "
                    "logs it for validation and warns at 5%; scripts/recall_curve.py gives the predictor's recall)")
    if step_ratio >= PAYS:
        lines.append(f"Verdict: the small softmax pays here for REINFORCE ({step_ratio:.2f}x faster): train and "
                     f"decode with --small-vocab-size {k}; {what_k_costs}.")
    elif step_ratio < SAME:
        lines.append(f"Verdict: the small softmax does not pay on this model here ({step_ratio:.2f}x): its output "
                     "layer is a small share of the step. Train with the full softmax (--small-vocab-size 0: the "
                     "same model and code), which loses no reference word outside the candidates.")
    else:
        lines.append(f"Verdict: the small softmax pays little here ({step_ratio:.2f}x): take it only where memory "
                     f"binds or K costs nothing measurable, else the full softmax (--small-vocab-size 0); "
                     f"{what_k_costs}.")
    if args.rounds == 1:
        lines.append("(one round: a busy machine drifts by tens of percent; --rounds 3 on a quiet one to be sure)")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    shape = corpus_shape(args.data, args.source_lang, args.target_lang, args.max_tokens)
    k = args.k or paper_k(shape["vocab_size"])
    if not NSPECIAL < k < shape["vocab_size"]:
        raise SystemExit(f"error: --k {k}: K must exceed the {NSPECIAL} special symbols and be below |V| = "
                         f"{shape['vocab_size']:,} of {args.data / f'dict.{args.target_lang}.txt'}")
    records = run_interleaved(list(configurations(args, shape, k)), args.rounds,
                              log=lambda message: print(message, file=sys.stderr, flush=True))
    print(markdown(records))
    print()
    print(verdict(records, shape, k, args))
    if args.json:
        said = {key: value for key, value in judged(records, k).items()
                if key not in ("step", "step_full", "decode", "decode_full")}
        args.json.write_text(json.dumps({**said, **shape, "threads": args.threads,
                                         "device": args.device, "rounds": args.rounds, "records": records},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
