#!/usr/bin/env python3
"""Speed and peak memory of training steps, small vocabulary vs full softmax.

Every configuration runs in a fresh process (so that peak memory is its own):
the paper's model (``lstm_smallvocab``, d units), or with ``--arch`` any
fairseq translation arch (``transformer``: the base Transformer, d = 512,
6 + 6 layers, with ``--share-all-embeddings``; ``--embed-dim`` and
``--layers`` change d and the layers), restricted as ``translation_smallvocab``
restricts it, on random batches of B sentence pairs of exactly --max-len
tokens.  Target words follow a Zipf law
over |V| (``--zipf S``: the word of frequency rank r with probability
proportional to r^-S; 1.2 by default, about Multi30k German's slope; 0 draws
them uniformly); the small-vocabulary batches carry K candidates per example,
as the training lists do: the special symbols, every gold word, then the most
frequent words (with ``--zipf 0``, random words), so that a batch's candidate
lists overlap as a predictor's do.  A step is what
fairseq-train does per update: forward, loss, backward, gradient clipping to
1.0, an SGD (momentum 0.75) update.  The loss: ``ce``, fairseq's
``cross_entropy``; ``reinforce``, the plugin's ``smallvocab_reinforce`` (the
teacher-forced CE term plus one sampled sequence per example of up to
--max-len tokens, GLEU rewards, the learned baseline and its Adam step;
``--rl-samples 1 2 4`` measures N samples per example, one configuration
each, and ``--rl-baseline loo`` the leave-one-out baseline instead).
After --warmup untimed steps, --steps steps are timed; ``--phases`` also
times the phases of each step (encoder, CE pass, sampling loop, scoring,
rewards, the rest of the loss, backward, optimizer: ``phases.py``) and the
sampling loop's milliseconds per sampled token (the loop's time per step).

With ``--data DIR`` (a binarized translation corpus, e.g. Multi30k) the
batches are real instead: the training split's first --warmup + --steps
batches of B sentences in fairseq's shuffled order (seed 1), with the K
candidates of ``--candidates-dir`` (lists from scripts/export_candidates.py;
gold words included, as in training); samples are limited as the Multi30k
recipe limits them (1.5 x the source length + 5 tokens, at most 100), or,
with ``--sample-limit flat --max-sample-len N``, all run to exactly N tokens
(no step draws eos, whatever the timed steps' updates teach the model:
``flat_limit.py``; the setting in which the steps of two implementations, or
two versions, compare per sampled token; on synthetic batches too).  Small
and full softmax see the same batches; |V| is the corpus's target dictionary.
``--captions`` reads a captioning folder (scripts/prepare_captions.py) with
captioning_smallvocab and lstm_caption_smallvocab (samples up to 50 tokens).
``--model-args FLAGS`` measures the model that a training run's flags build
(``--arch`` and its settings: the Transformer recipe's
examples/translation/transformer_multi30k.args) instead of the paper's LSTM.
``--checkpoint CKPT`` starts both from a trained model's weights (an untrained
model samples to the length limit; a trained one about as long as the gold).

``decode``: fairseq's ``SequenceGenerator`` through the task's generator on
--decode-sentences random sources of --src-len words, --decode-batch sentences
per batch, beam --beam, every hypothesis exactly --max-len tokens (min and max
length both set, so small and full decode the same number of steps).  The
small-vocabulary time includes the vocabulary predictor (embed_dim 512, as the
paper's) predicting each batch's candidates.  Reports ms per sentence.

Small and full run interleaved, each in a fresh process: with ``--rounds R``
the pair runs R times (small, full, small, full, ...) and each configuration
reports the median over its rounds, and the speedup is the median of the
rounds' pairwise ratios, so that the machine's drift between the two sides
of a pair cancels.  ``--ab NAME=A,B`` compares two values of one of the
engine's settings instead (``fairseq_smallvocab/engine/settings.py``: capture,
compile, graphed_pass, static_state, ...), inside each configuration's
process: every batch runs under both values (A B, then B A), from the same
seed, and the record gives each value's median step and the median of the
batches' ratios A / B (the way to measure a change of a few per cent here,
where whole processes drift by more than that).  ``--floor`` runs each timed
batch's step a second time (same seed and state) under a recorder of its
matrix products and replays them alone (``floor.py``): the record gives the
products' seconds, GFLOP and the median ratio step / products, how far a step
is from the arithmetic it cannot avoid (on CUDA, for a fairseq arch without an
LSTM, the products replay as one captured graph: their GPU time, not their
launches').

Peak memory: CUDA, ``torch.cuda.max_memory_allocated``; CPU, the growth of the
process's peak resident set (VmHWM, reset just before the first step) over the
resident set before the first step (``peak_mem_mb``); ``peak_rss_mb`` is the
whole process's peak resident set (Python, torch and fairseq included).

Defaults: |V| = 4.5K, 14K, 24K and 70K with the paper's K (1000 above 10K
words, else 500), the K sweep 64 / 256 / 500 / 1000 / 2000 at 24K
(``--k-sweep``, ``--sweep-vocab-sizes``), CE, REINFORCE and decoding (batch 1,
greedy and beam 5).  ``--quick`` (a few minutes): |V| = 24K, K = 1000, small vs
full, CE and REINFORCE, 2 timed steps.  scripts/plot_benchmark.py draws the
JSON records.

    python scripts/benchmark.py --quick
    python scripts/benchmark.py --arch transformer --vocab-sizes 32000 64000 128000 --k 1000 --k-sweep \
        --batch 32 --max-len 30 --rounds 3 --json docs/data/bench_transformer.json
    python scripts/benchmark.py --json docs/data/bench_synthetic.json --markdown docs/data/bench_synthetic.md
    python scripts/benchmark.py --vocab-sizes 24000 --k 1000 --modes ce reinforce --json bench.json
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 \
        --sample-limit flat --max-sample-len 99 --phases --rounds 2 --steps 8
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --no-full \
        --sample-limit flat --max-sample-len 99 --steps 8 --warmup 1 \
        --ab transposed_min_rows=1000000000,32
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 \
        --sample-limit flat --max-sample-len 99 --steps 5 --warmup 1 --floor
    python scripts/benchmark.py --modes ce reinforce --data data-bin/captions --captions \
        --candidates-dir checkpoints/vp-captions/candidates --k 500 --epoch-sentences 50000
"""

import argparse
import json
import math
import os
import shlex
import sys
from pathlib import Path

from smallvocab_tools.bench.ab import parse_ab, parse_set, settings_for
from smallvocab_tools.bench.decode_worker import decode_worker
from smallvocab_tools.bench.report import markdown
from smallvocab_tools.bench.runner import run_interleaved
from smallvocab_tools.bench.train_worker import train_worker
from smallvocab_tools.bench.workload import SHAPES
from smallvocab_tools.data.prep import int_at_least

MODES = ("ce", "reinforce", "decode")
NSPECIAL = 4  # fairseq's special symbols, at the head of every dictionary and candidate list
POSITIVE = int_at_least(1)  # counts and sizes: 0 or less would measure nothing, or fail inside a worker


def paper_k(vocab_size: int) -> int:
    """The paper's K for this |V| (one rule: ``candidates.space.default_small_vocab_size``)."""
    from fairseq_smallvocab.candidates.space import default_small_vocab_size

    return default_small_vocab_size(vocab_size)


def data_vocab_size(args) -> int:
    """Entries of the corpus's target dictionary (specials and padding included)."""
    from fairseq.data import Dictionary

    if args.captions:
        from fairseq_smallvocab.data.datasets import single_dictionary_lang

        args.target_lang = single_dictionary_lang(args.data) or args.target_lang
    path = Path(args.data) / f"dict.{args.target_lang}.txt"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: --data takes a folder binarized by fairseq-preprocess "
                         "(scripts/prepare_data.py), with --source-lang / --target-lang naming its languages")
    return len(Dictionary.load(str(path)))


def small_ks(args, vocab_size: int, sweep: bool = True):
    """The K values measured at one |V|: --k (default: the paper's rule), plus,
    with ``sweep``, --k-sweep at the sweep's vocabulary sizes; each below |V|
    (``check_ks`` refuses a K that no |V| measures, and a |V| that measures none)."""
    ks = list(args.k or [paper_k(vocab_size)])
    if sweep and vocab_size in args.sweep_vocab_sizes:
        ks += [k for k in args.k_sweep if k not in ks]
    return sorted(k for k in ks if k < vocab_size)


def check_ks(parser, args, vocab_sizes, where: str):
    """Every |V| measures some small K, and every K given is measured at some
    |V|: small_ks keeps the K below each |V| (a K of |V| or more is no small
    vocabulary), and would otherwise drop them silently, down to a table of
    the full softmax alone.  ``where`` names the origin of the sizes."""
    measured = set()
    for vocab_size in vocab_sizes:
        for mode in args.modes:
            ks = small_ks(args, vocab_size, sweep=mode != "decode")
            if not ks:
                given = (f"--k {' '.join(map(str, args.k))}" if args.k
                         else f"no --k: the paper's rule gives K = {paper_k(vocab_size)}")
                parser.error(f"|V| = {vocab_size} ({where}): no K below it to measure ({given}), so only the full "
                             f"softmax would run; give --k below {vocab_size}")
            measured.update(ks)
    sweeps = any(mode != "decode" for mode in args.modes) and set(vocab_sizes) & set(args.sweep_vocab_sizes)
    for option, ks in (("--k", args.k or []), ("--k-sweep", args.k_sweep if sweeps else [])):
        unused = sorted(set(ks) - measured)
        if unused:
            parser.error(f"{option} {' '.join(map(str, unused))}: not below any |V| it runs at "
                         f"({' '.join(map(str, vocab_sizes))}, {where}), so never measured; give K below |V|")


def configurations(args):
    for vocab_size in ([data_vocab_size(args)] if args.data else args.vocab_sizes):
        for mode in args.modes:
            ks = small_ks(args, vocab_size, sweep=mode != "decode")  # decoding: no K sweep
            runs = [("small", k) for k in ks] + ([("full", 0)] if not args.no_full else []) \
                + ([("chunked", 0)] if args.full_chunked and mode == "reinforce" else [])
            shapes = ([(b, beam) for b in args.decode_batches for beam in args.beams] if mode == "decode"
                      else [(args.batch, None)])
            for (batch, beam), n in [(shape, n) for shape in shapes
                                     for n in (args.rl_samples if mode == "reinforce" else [None])]:
                for softmax, k in runs:
                    cfg = {"device": args.device, "mode": mode, "softmax": softmax, "vocab_size": vocab_size,
                           "arch": args.arch, "layers": args.layers,
                           "src_vocab_size": args.src_vocab_size or vocab_size, "K": k, "d": args.embed_dim,
                           "batch": batch, "max_len": args.max_len, "steps": args.steps, "warmup": args.warmup,
                           "threads": args.threads, "epoch_sentences": args.epoch_sentences, "zipf": args.zipf}
                    if n is not None:
                        cfg.update(rl_samples=n, rl_baseline=args.rl_baseline, sample_limit=args.sample_limit,
                                   max_sample_len=args.max_sample_len)
                    if args.phases and mode != "decode":
                        cfg["phases"] = True
                    if args.ab:
                        cfg["ab"] = args.ab
                    if args.set:
                        cfg["set"] = list(args.set)
                    if args.floor and mode != "decode":
                        cfg["floor"] = True
                    if args.largest_batch and mode != "decode":
                        cfg["largest_batch"] = True
                    if args.shape:
                        cfg["shape"] = args.shape
                    if args.model_args is not None:
                        cfg.update(model_args=args.model_args, arch=model_arch(args.model_args))
                    if args.data:
                        cfg.update(data=str(args.data), candidates_dir=args.candidates_dir, captions=args.captions,
                                   checkpoint=str(args.checkpoint) if args.checkpoint else None,
                                   source_lang=args.source_lang, target_lang=args.target_lang)
                    if mode == "decode":
                        cfg.update(beam=beam, decode_batch=batch, max_len=args.decode_len, src_len=args.src_len,
                                   decode_sentences=max(args.decode_sentences, batch), warmup=1)
                    yield cfg


def model_arch(flags: str):
    """The arch that a model's fairseq-train flags name (``--arch X`` or ``--arch=X``), or None."""
    words = shlex.split(flags)
    for i, word in enumerate(words):
        if word in ("--arch", "-a") and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--arch="):
            return word.split("=", 1)[1]
    return None


# fairseq encoder-decoder archs the benchmarks build, and how to list every one fairseq and the plugin register
ARCH_EXAMPLES = "transformer, transformer_iwslt_de_en, transformer_wmt_en_de, lstm, lstm_smallvocab"
LIST_ARCHS = ("python -c \"import fairseq_smallvocab; from fairseq.models import ARCH_MODEL_REGISTRY as R, "
              "FairseqEncoderDecoderModel as E; print(*sorted(a for a, m in R.items() if issubclass(m, E)))\"")


def arch_problem(arch: str):
    """Why ``arch`` cannot be measured (None when it can): fairseq (with the plugin's archs) must know it, and it
    must build an encoder-decoder, the kind of model whose decoder a small vocabulary restricts.  Checked before
    any worker starts: a worker would fail on it with the whole configuration and a traceback."""
    from fairseq.models import ARCH_MODEL_REGISTRY, FairseqEncoderDecoderModel

    import fairseq_smallvocab  # noqa: F401  (registers the plugin's archs beside fairseq's)

    model = ARCH_MODEL_REGISTRY.get(arch)
    fix = f"give a fairseq encoder-decoder arch, e.g. {ARCH_EXAMPLES} (to list them all: {LIST_ARCHS})"
    if model is None:
        return f"--arch {arch}: fairseq knows no such arch (nor does the plugin): {fix}"
    if not issubclass(model, FairseqEncoderDecoderModel):
        return (f"--arch {arch} builds a {model.__name__}, not an encoder-decoder model: a small vocabulary "
                f"restricts the output of a translation model's decoder; {fix}")
    return None


def parse_args(argv=None, runnable=False):
    """The command line, --quick's settings applied (options given explicitly win), checked; with ``runnable``,
    also what running it needs beyond the command line: a CUDA device for --device cuda, and K below the
    --data corpus's |V| (off where a documented command is only parse-checked, on any machine)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--quick", action="store_true",
                        help="a few minutes: |V| = 24K, K = 1000, small vs full, CE and REINFORCE, 2 timed steps "
                             "after 1 untimed (other options still apply where given)")
    parser.add_argument("--vocab-sizes", nargs="+", type=POSITIVE, default=[4500, 14000, 24000, 70000],
                        help="target vocabulary sizes |V|")
    parser.add_argument("--src-vocab-size", type=POSITIVE, default=None, help="default: the target's")
    parser.add_argument("--k", nargs="+", type=POSITIVE, default=None,
                        help="small vocabulary sizes, each measured at the |V| above it (default: the paper's "
                             "rule, 1000 if |V| > 10K else 500)")
    parser.add_argument("--k-sweep", nargs="*", type=POSITIVE, default=[64, 256, 500, 1000, 2000],
                        help="ce / reinforce: these K as well, at --sweep-vocab-sizes (none: no sweep)")
    parser.add_argument("--sweep-vocab-sizes", nargs="*", type=POSITIVE, default=[24000],
                        help="the vocabulary sizes at which --k-sweep runs")
    parser.add_argument("--zipf", type=float, default=1.2,
                        help="exponent of the Zipf law of the synthetic target words (0: uniform words and random "
                             "candidates)")
    parser.add_argument("--no-full", action="store_true", help="skip the full-softmax runs")
    parser.add_argument("--full-chunked", action="store_true",
                        help="REINFORCE: also the chunked full softmax (--rl-full-softmax chunked: no tokens x |V| "
                             "tensor), the best full-vocabulary practice; small and full are compared with it too")
    parser.add_argument("--arch", default="lstm_smallvocab",
                        help="lstm_smallvocab (default), or a fairseq translation arch, e.g. transformer (the base "
                             "Transformer with shared embeddings), transformer_wmt_en_de")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None,
                        help="the Transformer of a multilingual checkpoint (d 1024, FFN 4096, 16 heads, 12 + 12 "
                             "layers, pre-norm, shared embeddings): m2m100_418m (|V| = 128,112), nllb200_600m "
                             "(256,206); random weights; --layers cuts its depth, --vocab-sizes its |V|")
    parser.add_argument("--embed-dim", type=POSITIVE, default=None,
                        help="d (default: 256 for lstm_smallvocab, the arch's own otherwise)")
    parser.add_argument("--layers", type=POSITIVE, default=None,
                        help="encoder and decoder layers (default: the arch's)")
    parser.add_argument("--rounds", type=POSITIVE, default=1,
                        help="run each small/full pair this many times, interleaved; medians and the median "
                             "pairwise ratio are reported")
    parser.add_argument("--rl-samples", nargs="+", type=POSITIVE, default=[1],
                        help="reinforce: samples per input (one configuration per value)")
    parser.add_argument("--rl-baseline", default="learned", choices=["learned", "loo", "self-critical", "none"],
                        help="reinforce: the baseline (loo needs --rl-samples >= 2)")
    parser.add_argument("--sample-limit", choices=["recipe", "flat"], default="recipe",
                        help="reinforce: how long samples may run. recipe: as the recipes limit them (with --data "
                             "translation, ceil(1.5 x source length) + 5 and at most --max-sample-len), each ending "
                             "at its eos; flat: every sample runs to exactly --max-sample-len tokens (eos never "
                             "drawn), the setting in which steps of different implementations and versions compare")
    parser.add_argument("--max-sample-len", type=POSITIVE, default=None,
                        help="reinforce: the longest sample, eos included (default: 100 with --data, 50 with "
                             "--captions, --max-len otherwise)")
    parser.add_argument("--phases", action="store_true",
                        help="ce / reinforce: also time each phase of the step (encoder, CE pass, sampling, scoring, "
                             "rewards, loss, backward, optimizer; smallvocab_tools/bench/phases.py)")
    parser.add_argument("--floor", action="store_true",
                        help="training steps: also time each step's matrix products alone, replayed with nothing "
                             "between them (smallvocab_tools/bench/floor.py): how far the step is from its "
                             "arithmetic; records have their own table (peak memory then includes the copies)")
    parser.add_argument("--ab", metavar="NAME=A,B",
                        help="compare two values of one of the engine's settings (capture, compile, graphed_pass, "
                             "static_state, stop_check_every, stored_probs_max_elements, transposed_min_rows, "
                             "union_max_ratio, ...: fairseq_smallvocab/engine/settings.py) in one process: each "
                             "training step or decoded batch runs under both, in alternating order, from the same "
                             "seed (e.g. transposed_min_rows=1000000000,32 or capture=off,cuda-graphs); reports each "
                             "value's median and the median ratio A / B")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="run every configuration with this value of one of the engine's settings (repeatable), "
                             "e.g. capture=off for --phases with the sampling step not captured")
    parser.add_argument("--largest-batch", action="store_true",
                        help="with --device cuda: for each softmax, first find the largest batch (sentences, each "
                             "with --rl-samples samples) whose training step fits the GPU's memory, doubling from "
                             "--batch and then bisecting to within 5%% (smallvocab_tools/bench/largest_batch.py), "
                             "then time that batch; records add largest_batch and sentences_per_sec")
    parser.add_argument("--batch", type=POSITIVE, default=128)
    parser.add_argument("--max-len", type=POSITIVE, default=50)
    parser.add_argument("--steps", type=POSITIVE, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int_at_least(0), default=2, help="untimed steps first (0: none)")
    parser.add_argument("--threads", type=POSITIVE, default=min(os.cpu_count() or 1, 2),
                        help="torch threads (default: 2, this project's reference machine)")
    parser.add_argument("--epoch-sentences", type=POSITIVE, default=50000,
                        help="sentences per epoch, for s/epoch (the synthetic corpus: 50,000; Multi30k: 29,000)")
    parser.add_argument("--decode-batches", nargs="+", type=POSITIVE, default=[1],
                        help="decode: sentences per batch")
    parser.add_argument("--beams", nargs="+", type=POSITIVE, default=[1, 5], help="decode: beam sizes")
    parser.add_argument("--decode-len", type=POSITIVE, default=30, help="decode: tokens per hypothesis")
    parser.add_argument("--src-len", type=POSITIVE, default=20, help="decode: source words per sentence")
    parser.add_argument("--decode-sentences", type=POSITIVE, default=32, help="decode: sentences timed")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--data", type=Path, default=None,
                        help="ce / reinforce on real batches of this binarized corpus (instead of --vocab-sizes)")
    parser.add_argument("--candidates-dir", default=None,
                        help="with --data: exported candidate lists (scripts/export_candidates.py) with K' >= K")
    parser.add_argument("--source-lang", default="en", help="with --data")
    parser.add_argument("--target-lang", default="de", help="with --data")
    parser.add_argument("--model-args", default=None, metavar="FLAGS",
                        help="with --data: the model's fairseq-train flags, its --arch and settings (as a training "
                             "run's ARCH_ARGS: \"$(cat examples/translation/transformer_multi30k.args)\"), instead "
                             "of the paper's LSTM at --embed-dim")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="with --data: start small and full runs from this checkpoint's weights (a model of "
                             "the same arch and --embed-dim) instead of an untrained model, so that samples are "
                             "as long as a trained model's")
    parser.add_argument("--captions", action="store_true",
                        help="with --data: a captioning folder (scripts/prepare_captions.py): captioning_smallvocab "
                             "and lstm_caption_smallvocab instead of translation")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)
    if args.worker:
        return args
    # --quick's settings become the defaults, so that options given explicitly win; the command line is parsed
    # again before anything below fills in a setting (a later parse would drop those: d = None)
    if args.quick:
        parser.set_defaults(modes=["ce", "reinforce"], vocab_sizes=[24000], k=[1000], k_sweep=[], steps=2, warmup=1)
        args = parser.parse_args(argv)
    if args.shape:
        if args.arch not in ("lstm_smallvocab", "transformer") or args.embed_dim or args.data or args.model_args:
            parser.error(f"--shape {args.shape} is a Transformer of its own d on synthetic batches: leave out "
                         "--arch, --embed-dim, --data and --model-args")
        args.arch = "transformer"
        if args.vocab_sizes is parser.get_default("vocab_sizes"):  # not given: the checkpoint's own |V|
            args.vocab_sizes = [SHAPES[args.shape]["vocab"]]
    if args.embed_dim is None and args.arch == "lstm_smallvocab" and args.model_args is None:
        args.embed_dim = 256
    if args.rl_baseline == "loo" and min(args.rl_samples) < 2:
        parser.error(f"--rl-samples {' '.join(map(str, args.rl_samples))}: each >= 1, and >= 2 with --rl-baseline "
                     "loo (the other samples of an input are its baseline)")
    if args.arch != "lstm_smallvocab" and args.data:
        parser.error("--arch goes with synthetic batches (--vocab-sizes); with --data, give the model's flags "
                     "with --model-args \"--arch ARCH ...\"")
    if args.model_args is not None:
        if not args.data or args.captions:
            parser.error("--model-args goes with --data, a translation corpus")
        if args.embed_dim is not None or args.layers is not None:
            parser.error("--model-args gives the model whole: leave out --embed-dim and --layers")
        if model_arch(args.model_args) is None:
            parser.error(f"--model-args {args.model_args!r}: name the model's arch (--arch ARCH)")
    if args.max_sample_len is None:
        args.max_sample_len = (50 if args.captions else 100) if args.data else args.max_len
    if not math.isfinite(args.zipf) or args.zipf < 0:  # NaN fails every comparison: `zipf > 0` drew uniform words
        parser.error(f"--zipf {args.zipf}: the exponent must be a finite number >= 0 (0: uniform)")
    for k in (args.k or []) + args.k_sweep:
        if k <= NSPECIAL:
            parser.error(f"--k {k}: K must exceed the {NSPECIAL} special symbols")
    if not args.data:
        for size in args.vocab_sizes:
            if size <= NSPECIAL + 1:  # NSPECIAL < K < |V|
                parser.error(f"--vocab-sizes {size}: a small vocabulary holds the {NSPECIAL} special symbols and "
                             f"some words, and fewer than |V|; give |V| of {NSPECIAL + 2} or more")
        if args.src_vocab_size is not None and args.src_vocab_size <= NSPECIAL:
            parser.error(f"--src-vocab-size {args.src_vocab_size}: a vocabulary must hold words besides the "
                         f"{NSPECIAL} special symbols; give more than {NSPECIAL}")
        check_ks(parser, args, args.vocab_sizes, "--vocab-sizes")
    if args.floor and (args.phases or args.ab):
        parser.error("--floor times whole steps and their products: leave out --phases and --ab")
    if args.floor and args.modes == ["decode"]:
        parser.error("--floor measures training steps: use --modes ce reinforce")
    if args.floor and args.device != "cpu" and (args.data or "lstm" in args.arch) \
            and not settings_for(args.set).untested_cuda_modes:
        parser.error("--floor on CUDA for an LSTM (its cuDNN RNN kernels recorded and replayed with the products, "
                     "smallvocab_tools/bench/floor.py) has not run on a GPU yet: add --set untested_cuda_modes=on "
                     "to run it anyway (its numbers unchecked), or give a fairseq arch without an LSTM (--arch "
                     "transformer) with synthetic batches")
    if args.largest_batch and (args.device == "cpu" or args.data or args.modes == ["decode"] or args.floor):
        parser.error("--largest-batch searches a GPU's memory with synthetic training batches: give --device cuda "
                     "and --modes ce and/or reinforce, without --data and --floor")
    if args.ab:
        if args.phases:
            parser.error("--ab times whole steps: leave out --phases")
        try:
            parse_ab(args.ab)
        except ValueError as error:
            parser.error(str(error))
    for spec in args.set:
        try:
            parse_set(spec)
        except ValueError as error:
            parser.error(str(error))
    names = [spec.partition("=")[0].strip() for spec in args.set]
    for name in set(names):
        if names.count(name) > 1:
            parser.error(f"--set gives {name} {names.count(name)} values: give each setting once")
    if args.ab and args.ab.partition("=")[0].strip() in names:
        parser.error(f"--ab {args.ab} compares the setting that --set fixes: leave one out")
    if args.data and "decode" in args.modes:
        parser.error("--data measures training steps: use --modes ce reinforce")
    if args.checkpoint and not args.data:
        parser.error("--checkpoint goes with --data")
    if args.checkpoint and not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file")
    if args.captions and not args.data:
        parser.error("--captions goes with --data (a folder written by scripts/prepare_captions.py)")
    if args.data and not args.candidates_dir:
        parser.error("--data needs --candidates-dir, the small-vocabulary runs' candidate lists "
                     "(write them with scripts/export_candidates.py --k K)")
    if runnable:  # an arch a worker cannot build: said now, not by each worker's traceback
        problem = arch_problem(model_arch(args.model_args) if args.model_args is not None else args.arch)
        if problem:
            parser.error(problem)
    if runnable and args.data:
        check_ks(parser, args, [data_vocab_size(args)], f"the target dictionary of {args.data}")
    if runnable and args.device == "cuda":
        import torch  # only here: a CPU run's command line loads without torch

        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            parser.error(f"--device cuda: torch sees no CUDA device (torch {torch.__version__}, {build}); run on a "
                         "machine with a GPU and a CUDA build of torch, or give --device cpu")
    return args


def worker(cfg: dict) -> dict:
    """Measure one configuration in this process (``--worker``, which the runner starts); returns its record
    (with the ``--set`` settings it ran under)."""
    record = decode_worker(cfg) if cfg["mode"] == "decode" else train_worker(cfg)
    if cfg.get("set"):
        record["set"] = cfg["set"]
    return record


def main(argv=None):
    args = parse_args(argv, runnable=True)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    records = run_interleaved(list(configurations(args)), args.rounds,
                              log=lambda message: print(message, file=sys.stderr, flush=True))
    table = markdown(records)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
