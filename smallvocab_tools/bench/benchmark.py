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
``cross_entropy``; ``reinforce``, the plugin's ``reinforce_gleu`` (the
teacher-forced CE term plus one sampled sequence per example of up to
--max-len tokens, GLEU rewards, the learned baseline and its Adam step;
``--rl-samples 1 2 4`` measures N samples per example, one configuration
each, and ``--rl-baseline loo`` the leave-one-out baseline instead).
After --warmup untimed steps, --steps steps are timed; ``--phases`` also
times the phases of each step (encoder, CE pass, sampling loop, scoring,
rewards, the rest of the loss, backward, optimizer: ``phases.py``).

With ``--data DIR`` (a binarized translation corpus, e.g. Multi30k) the
batches are real instead: the training split's first --warmup + --steps
batches of B sentences in fairseq's shuffled order (seed 1), with the K
candidates of ``--candidates-dir`` (lists from scripts/export_candidates.py;
gold words included, as in training); samples are limited as the Multi30k
recipe limits them (1.5 x the source length + 5 tokens, at most 100), or,
with ``--sample-limit flat --max-sample-len N``, may all run to N tokens (an
untrained model's do: the setting in which the steps of two implementations
compare per sampled token).  Small
and full softmax see the same batches; |V| is the corpus's target dictionary.
``--captions`` reads a captioning folder (scripts/prepare_captions.py) with
captioning_smallvocab and lstm_caption_smallvocab (samples up to 50 tokens).
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
of a pair cancels.  ``--ab MODULE.NAME=A,B`` compares two values of one of
the plugin's module-level settings instead, inside each configuration's
process: every batch runs under both values (A B, then B A), from the same
seed, and the record gives each value's median step and the median of the
batches' ratios A / B (the way to measure a change of a few per cent here,
where whole processes drift by more than that).  ``--floor`` runs each timed
batch's step a second time (same seed and state) under a recorder of its
matrix products and replays them alone (``floor.py``): the record gives the
products' seconds, GFLOP and the median ratio step / products, how far a step
is from the arithmetic it cannot avoid.

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
        --batch 32 --max-len 30 --rounds 3 --json docs/bench_transformer.json
    python scripts/benchmark.py --json docs/bench_synthetic.json --markdown docs/bench_synthetic.md
    python scripts/benchmark.py --vocab-sizes 24000 --k 1000 --modes ce reinforce --json bench.json
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 \
        --sample-limit flat --max-sample-len 99 --phases --rounds 2 --steps 8
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --no-full \
        --sample-limit flat --max-sample-len 99 --steps 8 --warmup 1 \
        --ab fairseq_smallvocab.output.restricted.TRANSPOSED_MIN_ROWS=1000000000,32
    python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de \
        --candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 \
        --sample-limit flat --max-sample-len 99 --steps 5 --warmup 1 --floor
    python scripts/benchmark.py --modes ce reinforce --data data-bin/captions --captions \
        --candidates-dir checkpoints/vp-captions/candidates --k 500 --epoch-sentences 50000
"""

import argparse
import contextlib
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

MODES = ("ce", "reinforce", "decode")


def paper_k(vocab_size: int) -> int:
    """The paper's K for this |V| (one rule: ``candidates.space.default_small_vocab_size``)."""
    from fairseq_smallvocab.candidates.space import default_small_vocab_size

    return default_small_vocab_size(vocab_size)


# ------------------------------------------------------------------------------------------------ worker


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _dictionary(size: int):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(size - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def make_batch(vocab_size, k, batch, max_len, device, seed=0, zipf=0.0):
    """Random sentence pairs of ``max_len`` tokens (eos included) and, with
    K > 0, candidate rows: specials at their ids, the gold words, then the
    most frequent words (ids in rank order) or, with ``zipf == 0``, random ones.
    Target words: Zipf-distributed over the ids with exponent ``zipf`` (the id
    is the frequency rank, as in a fairseq dictionary), uniform when 0."""
    import torch

    from fairseq_smallvocab.candidates.space import candidate_rows

    gen = torch.Generator().manual_seed(seed)
    nspecial, eos = 4, 2
    src = torch.randint(nspecial, vocab_size, (batch, max_len), generator=gen)
    if zipf > 0:
        ranks = torch.arange(1, vocab_size - nspecial + 1, dtype=torch.float64)
        draws = torch.multinomial(ranks.pow(-zipf), batch * max_len, replacement=True, generator=gen)
        tgt = (draws + nspecial).view(batch, max_len)
    else:
        tgt = torch.randint(nspecial, vocab_size, (batch, max_len), generator=gen)
    src[:, -1] = tgt[:, -1] = eos
    prev = torch.cat([torch.full((batch, 1), eos), tgt[:, :-1]], dim=1)
    net_input = {"src_tokens": src, "src_lengths": torch.full((batch,), max_len), "prev_output_tokens": prev}
    if k:
        if zipf > 0:  # a predictor's list: mostly frequent words
            score = (1.0 - torch.arange(vocab_size) / vocab_size).expand(batch, -1).clone()
        else:
            score = torch.rand(batch, vocab_size, generator=gen)
        score.scatter_(1, tgt, 2.0)  # gold words first
        score[:, :nspecial] = -1.0
        lists = score.topk(k - nspecial, dim=1).indices.numpy()
        rows = candidate_rows(lists, k, nspecial, "benchmark batch")
        net_input["candidates"] = torch.from_numpy(rows.astype("int64"))
    sample = {"id": torch.arange(batch), "net_input": net_input, "target": tgt,
              "nsentences": batch, "ntokens": batch * max_len}
    return _to(sample, device)


def _to(sample, device):
    import torch

    if isinstance(sample, dict):
        return {key: _to(value, device) for key, value in sample.items()}
    return sample.to(device) if torch.is_tensor(sample) else sample


def _setup(cfg: dict):
    """Threads and seed set; returns what the models and criteria read of a task."""
    import torch

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)

    shared = cfg.get("arch", "lstm_smallvocab") != "lstm_smallvocab"  # --share-all-embeddings: one dictionary

    class _Task:
        target_dictionary = _dictionary(cfg["vocab_size"])
        source_dictionary = target_dictionary if shared else _dictionary(cfg["src_vocab_size"])
        uses_features = False

    return _Task


def build_model(cfg: dict, task):
    """The measured model, restricted as translation_smallvocab restricts it:
    ``lstm_smallvocab`` (d = --embed-dim), or a fairseq arch built as
    fairseq-train builds it (``transformer``: shared embeddings; d and the
    layers from --embed-dim and --layers when given)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
    from fairseq_smallvocab.restricted_model import restrict

    arch = cfg.get("arch", "lstm_smallvocab")
    if arch == "lstm_smallvocab":
        model = LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=cfg["d"], dropout=0.2), task)
    else:
        args = argparse.Namespace(share_all_embeddings=True, dropout=0.1, criterion="cross_entropy")
        if cfg.get("d"):
            args.encoder_embed_dim = args.decoder_embed_dim = cfg["d"]
            args.encoder_ffn_embed_dim = args.decoder_ffn_embed_dim = 4 * cfg["d"]
        if cfg.get("layers"):
            args.encoder_layers = args.decoder_layers = cfg["layers"]
        ARCH_CONFIG_REGISTRY[arch](args)
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return restrict(model, arch)


def real_setup(cfg: dict, count: int):
    """The task, model and criterion as fairseq-train builds them for a
    binarized corpus (``cfg["data"]``), and the first ``count`` training
    batches in fairseq's shuffled order (seed 1)."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)
    captions = cfg.get("captions", False)
    import fairseq_smallvocab

    argv = [cfg["data"], "--user-dir", str(Path(fairseq_smallvocab.__file__).resolve().parent),
            "--small-vocab-size", str(cfg["K"]), "--embed-dim", str(cfg["d"]),
            "--criterion", "cross_entropy" if cfg["mode"] == "ce" else "reinforce_gleu", "--cpu"]
    if captions:  # image features -> captions: samples limited by length only
        argv += ["--task", "captioning_smallvocab", "--arch", "lstm_caption_smallvocab"]
    else:
        argv += ["--task", "translation_smallvocab", "-s", cfg["source_lang"], "-t", cfg["target_lang"],
                 "--arch", "lstm_smallvocab"]
    if cfg["mode"] == "reinforce":
        argv += ["--rl-samples", str(cfg["rl_samples"]), "--rl-baseline", cfg["rl_baseline"],
                 "--max-sample-len", str(cfg["max_sample_len"])]
        if cfg["sample_limit"] == "recipe" and not captions:
            argv += ["--sample-len-ratio", "1.5"]
    if cfg["K"]:
        argv += ["--candidates-dir", cfg["candidates_dir"]]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    fcfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(fcfg.task)
    model = task.build_model(fcfg.model)
    if cfg.get("checkpoint"):  # trained weights (the same for small and full: one model, one code path)
        from fairseq import checkpoint_utils

        model.load_state_dict(checkpoint_utils.load_checkpoint_to_cpu(cfg["checkpoint"])["model"], strict=True)
    criterion = task.build_criterion(fcfg.criterion)
    task.load_dataset("train")
    dataset = task.dataset("train")
    itr = task.get_batch_iterator(dataset, max_sentences=cfg["batch"], seed=1,
                                  max_positions=1024 if captions else (1024, 1024)).next_epoch_itr(shuffle=True)
    if len(itr) < count:
        raise ValueError(f"{cfg['data']}: the training split has {len(itr)} batches of {cfg['batch']} sentences, "
                         f"{count} are needed (--warmup + --steps)")
    return model, criterion, [next(itr) for _ in range(count)], len(dataset)


def worker(cfg: dict) -> dict:
    """Measure one configuration in this process; returns its record."""
    if cfg["mode"] == "decode":
        return decode_worker(cfg)
    import torch
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_smallvocab.criterions.reinforce_gleu import ReinforceGleuConfig, ReinforceGleuCriterion

    device = torch.device(cfg["device"])
    count = cfg["warmup"] + cfg["steps"]
    if cfg.get("data"):
        model, criterion, samples, epoch_sentences = real_setup(cfg, count)
        samples = [_to(sample, device) for sample in samples]
        model, criterion = model.to(device), criterion.to(device)
    else:
        _Task = _setup(cfg)
        model = build_model(cfg, _Task).to(device)
        cfg["d"] = cfg["d"] or model.output_weights()[0].size(1)
        if cfg["mode"] == "ce":
            criterion = CrossEntropyCriterion(_Task, sentence_avg=False)
        else:
            criterion = ReinforceGleuCriterion(_Task, ReinforceGleuConfig(max_sample_len=cfg["max_sample_len"],
                                               rl_samples=cfg["rl_samples"], rl_baseline=cfg["rl_baseline"])).to(device)
        samples = [make_batch(cfg["vocab_size"], cfg["K"], cfg["batch"], cfg["max_len"], device,
                              zipf=cfg["zipf"])] * count
        epoch_sentences = cfg["epoch_sentences"]
    model.train()
    sample_lens = []
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.75, weight_decay=1e-6)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    timer = None
    if cfg.get("phases"):
        from smallvocab_tools.bench.phases import instrument

        timer = instrument(model, criterion, sync=sync)

    def phase(name):
        return timer.phase(name) if timer is not None else contextlib.nullcontext()

    def step(sample):
        optimizer.zero_grad(set_to_none=True)
        with phase("loss"):
            loss, _, log = criterion(model, sample)
        sample_lens.append(log.get("sample_len", 0) / sample["target"].size(0))
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        sync()

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) / 2**20
    else:
        base = _rss_mb("VmRSS")
        reset = _reset_peak_rss()
    timed = samples[cfg["warmup"]:]

    def snapshot():
        return copy.deepcopy((model.state_dict(), criterion.state_dict(), optimizer.state_dict()))

    def restore(state):
        model.load_state_dict(state[0])
        criterion.load_state_dict(state[1])
        optimizer.load_state_dict(state[2])

    ab = floor = None
    if cfg.get("ab"):  # (never with --phases or --floor)
        ab = ab_steps(cfg, step, samples, sample_lens, torch.manual_seed, snapshot, restore, sync=sync)
        sec_per_step = statistics.median(ab["ab_rounds"][0] + ab["ab_rounds"][1])
    elif cfg.get("floor"):  # (never with --phases)
        floor = floor_steps(cfg, step, samples, sample_lens, torch.manual_seed, snapshot, restore, sync=sync)
        sec_per_step = floor.pop("sec_per_step")
    else:
        for sample in samples[: cfg["warmup"]]:
            step(sample)
        del sample_lens[:]  # the record's sample length is the timed steps'
        if timer is not None:
            timer.reset()
        start = time.perf_counter()
        for sample in timed:
            step(sample)
        sec_per_step = (time.perf_counter() - start) / cfg["steps"]
    phases = None if timer is None else {name: round(span / cfg["steps"], 4) for name, span in timer.spans.items()}
    if cuda:
        peak_total = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_total = _rss_mb("VmHWM") if reset else _ru_maxrss_mb()
    peak = peak_total - base
    batches = math.ceil(epoch_sentences / cfg["batch"])
    tokens = sum(int(sample["ntokens"]) for sample in timed)
    record = {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "batch", "max_len",
                                           "steps", "warmup", "threads", "zipf")}, "arch": cfg.get("arch"),
              "sec_per_step": round(sec_per_step, 4),
              "tokens_per_sec": round(tokens / (sec_per_step * cfg["steps"]), 1),
              "sec_per_epoch": round(batches * sec_per_step, 1), "epoch_sentences": epoch_sentences,
              "peak_mem_mb": round(peak, 1), "peak_rss_mb": round(peak_total, 1), "torch": torch.__version__}
    if cfg["mode"] == "reinforce":
        record["sample_len"] = round(sum(sample_lens) / len(sample_lens) / cfg["rl_samples"], 1)
        record.update(rl_samples=cfg["rl_samples"], rl_baseline=cfg["rl_baseline"],
                      sample_limit=cfg["sample_limit"], max_sample_len=cfg["max_sample_len"])
    if phases is not None:
        record["phases"] = phases
    if ab is not None:
        record.update(ab)
    if floor is not None:
        record.update(floor)
    if cfg.get("data"):
        record.update(data=cfg["data"], zipf=None, task="captioning" if cfg.get("captions") else "translation",
                      checkpoint=cfg.get("checkpoint"),
                      vocab_size=len(model.decoder.dictionary),
                      max_len=max(sample["target"].size(1) for sample in timed),
                      mean_tgt_len=round(tokens / sum(sample["target"].size(0) for sample in timed), 2))
    return record


def parse_ab(spec: str):
    """``--ab module.NAME=A,B`` -> (module, NAME, (A, B)): a module-level
    setting of the plugin and two values for it (Python literals of its type)."""
    import ast
    import importlib

    target, sep, values = spec.partition("=")
    module_name, _, name = target.rpartition(".")
    usage = ("give a module-level setting of the plugin and two values, e.g. "
             "fairseq_smallvocab.output.restricted.TRANSPOSED_MIN_ROWS=1000000000,32")
    if not sep or not name or module_name.split(".")[0] != "fairseq_smallvocab":
        raise ValueError(f"--ab {spec}: {usage}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--ab {spec}: no module {module_name} ({error}); {usage}") from None
    if not hasattr(module, name):
        raise ValueError(f"--ab {spec}: {module_name} has no setting {name}; {usage}")
    current = getattr(module, name)
    parts = values.split(",")
    try:
        parsed = tuple(ast.literal_eval(part.strip()) for part in parts)
    except (ValueError, SyntaxError):
        raise ValueError(f"--ab {spec}: the values must be Python literals; {usage}") from None
    if len(parsed) != 2:
        raise ValueError(f"--ab {spec}: two values are compared, not {len(parsed)}; {usage}")
    allowed = (int, float) if isinstance(current, float) else (type(current),)
    for value in parsed:
        if type(value) not in allowed:
            raise ValueError(f"--ab {spec}: {value!r} is not of {name}'s type ({type(current).__name__}: "
                             f"{current!r} now)")
    return module, name, parsed


def ab_steps(cfg: dict, step, samples, sample_lens, seed, snapshot, restore, sync=lambda: None) -> dict:
    """Every batch runs once under each of the two values of ``cfg["ab"]``
    (A B, then B A for the next batch, and so on), both from the same random
    seed and the same weights and optimizer states (``restore(snapshot())``
    between the two: an update changes what the policy samples, and so the
    step's work), in this one process: the machine's drift, which moves whole
    processes by up to 2x here, then hits both values alike.  The first
    --warmup batches are untimed.  Returns each value's step times and sample
    lengths and the median of the batches' ratios A / B."""
    module, name, values = parse_ab(cfg["ab"])
    original = getattr(module, name)
    times, lens = ([], []), ([], [])
    try:
        for i, sample in enumerate(samples):
            state = snapshot()
            for j, arm in enumerate((0, 1) if i % 2 == 0 else (1, 0)):
                if j:
                    restore(state)
                setattr(module, name, values[arm])
                seed(i)
                sync()  # the restore's copies (CUDA) are not the step's time
                start = time.perf_counter()
                step(sample)
                if i >= cfg["warmup"]:
                    times[arm].append(time.perf_counter() - start)
                    if sample_lens:  # training steps note their samples' length
                        lens[arm].append(sample_lens[-1])
    finally:
        setattr(module, name, original)
    del sample_lens[:]
    sample_lens.extend(lens[0] + lens[1])
    return {"ab": cfg["ab"], "ab_values": list(values), "ab_rounds": [list(t) for t in times],
            "ab_sample_len": [round(statistics.mean(x) / cfg.get("rl_samples", 1), 1) if x else 0 for x in lens],
            **ab_summary(times)}


def floor_steps(cfg: dict, step, samples, sample_lens, seed, snapshot, restore, sync=lambda: None) -> dict:
    """``--floor``: each timed batch's step, timed, then the same step again
    from the same seed, weights and optimizer states under a
    ``ProductRecorder`` (untimed; it makes the same samples), whose matrix
    products are then replayed alone and timed (``floor.py``).  The first
    --warmup batches are plain untimed steps (their samples' lengths are
    dropped).  Returns each batch's step and products-alone times, their
    medians, the median of the batches' ratios step / products, the median
    batch's product FLOPs, product calls and other ATen calls, and the last
    batch's largest products (``products_top``)."""
    from smallvocab_tools.bench.floor import ProductRecorder

    for sample in samples[: cfg["warmup"]]:
        step(sample)
    del sample_lens[:]
    steps, products, flops, calls, other = [], [], [], [], []
    top = []
    for i, sample in enumerate(samples[cfg["warmup"]:], start=cfg["warmup"]):
        state = snapshot()
        seed(i)
        sync()
        start = time.perf_counter()
        step(sample)
        steps.append(time.perf_counter() - start)
        restore(state)
        seed(i)
        recorder = ProductRecorder()
        with recorder:
            step(sample)
        if sample_lens:  # the same samples again: one entry per timed step
            sample_lens.pop()
        products.append(recorder.replay(sync))
        flops.append(recorder.flops)
        calls.append(recorder.product_calls)
        other.append(sum(recorder.other.values()))
        top = recorder.table(6)
        del recorder
    return {"sec_per_step": statistics.median(steps), "floor_steps": [round(t, 6) for t in steps],
            "products_rounds": [round(t, 6) for t in products], **floor_summary(steps, products),
            "products_flops": int(statistics.median(flops)), "products_gflop": round(statistics.median(flops) / 1e9, 3),
            "product_calls": int(statistics.median(calls)),
            "other_aten_calls": int(statistics.median(other)),
            "products_top": [[name, [list(shape) for shape in shapes], count, round(g, 3)]
                             for name, shapes, count, g in top]}


def floor_summary(steps, products) -> dict:
    """The median products-alone time and the median of the batches' ratios step / products."""
    return {"products_sec": round(statistics.median(products), 6),
            "step_over_products": round(statistics.median(s / p for s, p in zip(steps, products)), 3)}


def ab_summary(times, sentences_per_batch: Optional[int] = None) -> dict:
    """Each value's median time, the median of the batches' ratios A / B, and
    for decoding (``sentences_per_batch``) each value's ms per sentence."""
    summary = {"ab_sec_per_step": [round(statistics.median(t), 4) for t in times],
               "ab_ratio": round(statistics.median(a / b for a, b in zip(*times)), 3)}
    if sentences_per_batch:
        summary["ab_ms_per_sentence"] = [round(1000 * t / sentences_per_batch, 3) for t in summary["ab_sec_per_step"]]
    return summary


def decode_worker(cfg: dict) -> dict:
    import torch

    from fairseq_smallvocab.candidates.space import candidate_rows
    from fairseq_smallvocab.generation import SmallVocabSequenceGenerator
    from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig
    from fairseq_smallvocab.predictor.inference import predict_lists

    _Task = _setup(cfg)
    tgt_dict = _Task.target_dictionary
    device = torch.device(cfg["device"])
    model = build_model(cfg, _Task).eval().to(device)
    cfg["d"] = cfg["d"] or model.output_weights()[0].size(1)
    predictor = VocabPredictor.build_model(VocabPredictorConfig(), _Task).eval() if cfg["K"] else None
    if predictor is not None:
        with torch.no_grad():  # a predictor that ranks words in some order (its output layer starts at zero)
            for p in predictor.parameters():
                p.uniform_(-0.1, 0.1)
        predictor = predictor.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    length = cfg["max_len"]
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=cfg["beam"], max_len_a=0,
                                            max_len_b=length, min_len=length)
    gen = torch.Generator().manual_seed(1)
    n, bsz, src_len = cfg["decode_sentences"], cfg["decode_batch"], cfg["src_len"]
    sources = torch.randint(4, cfg["src_vocab_size"], (n, src_len), generator=gen)
    sources[:, -1] = tgt_dict.eos()
    sources = sources.to(device)

    def decode_batch(start):
        src = sources[start: start + bsz]
        net_input = {"src_tokens": src, "src_lengths": torch.full((len(src),), src_len, device=device)}
        if predictor is not None:  # the lists as the task makes them: predicted, then rows built on the CPU
            lists = predict_lists(predictor, {"src_tokens": src}, cfg["K"], tgt_dict)
            rows = candidate_rows(lists.cpu().numpy(), cfg["K"], tgt_dict.nspecial, "benchmark")
            net_input["candidates"] = torch.from_numpy(rows.astype("int64")).to(device)
        out = generator.generate([model], {"id": torch.arange(len(src)), "net_input": net_input})
        sync()
        return sum(len(h[0]["tokens"]) for h in out)

    def decode_all():
        return sum(decode_batch(start) for start in range(0, n, bsz))

    if cfg.get("ab"):  # each batch under both values; the warm-up passes' batches untimed
        starts = list(range(0, n, bsz))
        with torch.no_grad():
            ab = ab_steps(dict(cfg, warmup=cfg["warmup"] * len(starts)), decode_batch,
                          starts * (cfg["warmup"] + 1), [], torch.manual_seed, lambda: None, lambda state: None,
                          sync=sync)
        ab.update(ab_summary(ab["ab_rounds"], bsz))
        return {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "max_len",
                                             "warmup", "threads", "beam", "src_len")}, "arch": cfg.get("arch"),
                "batch": bsz, "steps": n, "sentences": n,
                "ms_per_sentence": statistics.median(ab["ab_ms_per_sentence"]), "tokens_per_sec": None,
                "sec_per_epoch": None, "peak_mem_mb": None, "torch": torch.__version__, **ab}

    with torch.no_grad():
        for _ in range(cfg["warmup"]):
            decode_all()
        sync()
        start = time.perf_counter()
        tokens = decode_all()
        sync()
        seconds = time.perf_counter() - start
    return {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "max_len", "warmup",
                                         "threads", "beam", "src_len")}, "arch": cfg.get("arch"),
            "batch": bsz, "steps": n, "sentences": n, "ms_per_sentence": round(1000 * seconds / n, 2),
            "tokens_per_sec": round(tokens / seconds, 1), "sec_per_epoch": None, "peak_mem_mb": None,
            "torch": torch.__version__}


def _ru_maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------------------------ driver


def data_vocab_size(args) -> int:
    """Entries of the corpus's target dictionary (specials and padding included)."""
    from fairseq.data import Dictionary

    if args.captions:
        from fairseq_smallvocab.data import single_dictionary_lang

        args.target_lang = single_dictionary_lang(args.data) or args.target_lang
    path = Path(args.data) / f"dict.{args.target_lang}.txt"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: --data takes a folder binarized by fairseq-preprocess "
                         "(scripts/prepare_data.py), with --source-lang / --target-lang naming its languages")
    return len(Dictionary.load(str(path)))


def small_ks(args, vocab_size: int, sweep: bool = True):
    """The K values measured at one |V|: --k (default: the paper's rule), plus,
    with ``sweep``, --k-sweep at the sweep's vocabulary sizes; each below |V|."""
    ks = list(args.k or [paper_k(vocab_size)])
    if sweep and vocab_size in args.sweep_vocab_sizes:
        ks += [k for k in args.k_sweep if k not in ks]
    return sorted(k for k in ks if k < vocab_size)


def configurations(args):
    for vocab_size in ([data_vocab_size(args)] if args.data else args.vocab_sizes):
        for mode in args.modes:
            ks = small_ks(args, vocab_size, sweep=mode != "decode")  # decoding: no K sweep
            runs = [("small", k) for k in ks] + ([("full", 0)] if not args.no_full else [])
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
                    if args.floor and mode != "decode":
                        cfg["floor"] = True
                    if args.data:
                        cfg.update(data=str(args.data), candidates_dir=args.candidates_dir, captions=args.captions,
                                   checkpoint=str(args.checkpoint) if args.checkpoint else None,
                                   source_lang=args.source_lang, target_lang=args.target_lang)
                    if mode == "decode":
                        cfg.update(beam=beam, decode_batch=batch, max_len=args.decode_len, src_len=args.src_len,
                                   decode_sentences=max(args.decode_sentences, batch), warmup=1)
                    yield cfg


def pair_key(cfg: dict):
    """Configurations that differ only in the output layer (small K, full) form one interleaved group."""
    return tuple(sorted((key, json.dumps(value)) for key, value in cfg.items() if key not in ("softmax", "K")))


def run_interleaved(cfgs, rounds: int, log=lambda message: None):
    """Each group of configurations (small and full of one setting) run
    ``rounds`` times in turn (A B A B ...); returns one record per
    configuration: medians over its rounds, and for a small one, the median
    of the rounds' ratios full / small (``speedup``)."""
    groups = {}
    for cfg in cfgs:
        groups.setdefault(pair_key(cfg), []).append(cfg)
    records = []
    for group in groups.values():
        runs = [[] for _ in group]
        for r in range(rounds):
            for i, cfg in enumerate(group):
                k = f" K={cfg['K']}" if cfg["K"] else ""
                label = f"{_mode_label(cfg)} |V|={cfg['vocab_size']} {cfg['softmax']}{k}"
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
                record["phases"] = {name: round(statistics.median(x["phases"][name] for x in runs[i]), 4)
                                    for name in record["phases"]}
            if full is not None and cfg["softmax"] == "small":
                ratios = [f[time_key] / s[time_key] for f, s in zip(runs[full], runs[i])]
                record["speedup"] = round(statistics.median(ratios), 3)
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


def _mode_label(record) -> str:
    """reinforce with N > 1 samples per input: "reinforce xN"."""
    n = record.get("rl_samples") or 1
    return f"{record['mode']} x{n}" if n > 1 else record["mode"]


def markdown(records) -> str:
    """Training steps, then decoding, each small beside its full softmax."""
    out = []
    compared = [r for r in records if "ab" in r]  # --ab: their own table below (both settings' times pooled)
    floors = [r for r in records if "products_sec" in r]  # --floor: their own table (each batch ran twice)
    train = [r for r in records if r["mode"] != "decode" and "ab" not in r and "products_sec" not in r]
    if train:
        head = ("| device | arch | mode | V | softmax | K | d | batch | len | s/step | tokens/s | s/epoch | peak MB | "
                "peak RSS MB | speedup | memory ratio |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        full = {(r["device"], r.get("arch"), _mode_label(r), r["vocab_size"]): r for r in train
                if r["softmax"] == "full"}
        for r in train:
            ref = full.get((r["device"], r.get("arch"), _mode_label(r), r["vocab_size"]))
            small = ref is not None and r["softmax"] == "small"
            speedup = f"{r.get('speedup') or ref['sec_per_step'] / r['sec_per_step']:.2f}x" if small else ""
            memory = f"{ref['peak_mem_mb'] / r['peak_mem_mb']:.2f}x less" if small and r["peak_mem_mb"] > 0 else ""
            arch = r.get("arch") or "lstm_smallvocab"
            lines.append(f"| {r['device']} | {arch} | {_mode_label(r)} | {r['vocab_size']:,} | {r['softmax']} | "
                         f"{r['K'] or '-'} | {r['d']} | {r['batch']} | {r['max_len']} | {r['sec_per_step']:.3f} | "
                         f"{r['tokens_per_sec']:,.0f} | {r['sec_per_epoch']:,.0f} | {r['peak_mem_mb']:,.0f} | "
                         f"{r.get('peak_rss_mb', 0):,.0f} | {speedup} | {memory} |")
        out.append("\n".join(lines))
    timed = [r for r in train if r.get("phases")]
    if timed:
        from smallvocab_tools.bench.phases import PHASES

        head = ("| mode | V | softmax | K | sample limit | sample len | s/step | " + " | ".join(PHASES) +
                " | rest |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in timed:
            limit = (f"{r['sample_limit']} {r['max_sample_len']}" if r["mode"] == "reinforce" else "-")
            rest = r["sec_per_step"] - sum(r["phases"].values())
            lines.append(f"| {_mode_label(r)} | {r['vocab_size']:,} | {r['softmax']} | {r['K'] or '-'} | {limit} | "
                         f"{r.get('sample_len', '-')} | {r['sec_per_step']:.3f} | " +
                         " | ".join(f"{r['phases'][name]:.3f}" for name in PHASES) + f" | {rest:.3f} |")
        out.append("Seconds per step by phase (means over the timed steps; smallvocab_tools/bench/phases.py):\n\n"
                   + "\n".join(lines))
    if floors:
        head = ("| arch | mode | V | softmax | K | batch | sample len | s/step | products alone s | step / products | "
                "GFLOP | GFLOP/s alone | product calls | other ATen calls |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in floors:
            lines.append(f"| {r.get('arch') or 'lstm_smallvocab'} | {_mode_label(r)} | {r['vocab_size']:,} | "
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
            setting = r["ab"].partition("=")[0].rpartition(".")[2]
            decode = r["mode"] == "decode"
            mode = f"decode, batch {r['batch']}, beam {r['beam']}" if decode else _mode_label(r)
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
            arch = r.get("arch") or "lstm_smallvocab"
            lines.append(f"| {r['device']} | {arch} | {r['vocab_size']:,} | {r['softmax']} | {r['K'] or '-'} | "
                         f"{r['batch']} | {r['beam']} | {r['max_len']} | {r['ms_per_sentence']:.2f} | "
                         f"{r['tokens_per_sec']:,.0f} | {speedup} |")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def parse_args(argv=None):
    """The command line, --quick's settings applied (options given explicitly win), checked."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--quick", action="store_true",
                        help="a few minutes: |V| = 24K, K = 1000, small vs full, CE and REINFORCE, 2 timed steps "
                             "after 1 untimed (other options still apply where given)")
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=[4500, 14000, 24000, 70000],
                        help="target vocabulary sizes |V|")
    parser.add_argument("--src-vocab-size", type=int, default=None, help="default: the target's")
    parser.add_argument("--k", nargs="+", type=int, default=None,
                        help="small vocabulary sizes (default: the paper's rule, 1000 if |V| > 10K else 500)")
    parser.add_argument("--k-sweep", nargs="*", type=int, default=[64, 256, 500, 1000, 2000],
                        help="ce / reinforce: these K as well, at --sweep-vocab-sizes (none: no sweep)")
    parser.add_argument("--sweep-vocab-sizes", nargs="*", type=int, default=[24000],
                        help="the vocabulary sizes at which --k-sweep runs")
    parser.add_argument("--zipf", type=float, default=1.2,
                        help="exponent of the Zipf law of the synthetic target words (0: uniform words and random "
                             "candidates)")
    parser.add_argument("--no-full", action="store_true", help="skip the full-softmax runs")
    parser.add_argument("--arch", default="lstm_smallvocab",
                        help="lstm_smallvocab (default), or a fairseq translation arch, e.g. transformer (the base "
                             "Transformer with shared embeddings), transformer_wmt_en_de")
    parser.add_argument("--embed-dim", type=int, default=None,
                        help="d (default: 256 for lstm_smallvocab, the arch's own otherwise)")
    parser.add_argument("--layers", type=int, default=None, help="encoder and decoder layers (default: the arch's)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each small/full pair this many times, interleaved; medians and the median "
                             "pairwise ratio are reported")
    parser.add_argument("--rl-samples", nargs="+", type=int, default=[1],
                        help="reinforce: samples per input (one configuration per value)")
    parser.add_argument("--rl-baseline", default="learned", choices=["learned", "loo", "self-critical", "none"],
                        help="reinforce: the baseline (loo needs --rl-samples >= 2)")
    parser.add_argument("--sample-limit", choices=["recipe", "flat"], default="recipe",
                        help="reinforce: how long samples may run. recipe: as the recipes limit them (with --data "
                             "translation, ceil(1.5 x source length) + 5 and at most --max-sample-len); flat: every "
                             "sample may run to --max-sample-len tokens (an untrained model does), the setting in "
                             "which steps of different implementations compare")
    parser.add_argument("--max-sample-len", type=int, default=None,
                        help="reinforce: the longest sample, eos included (default: 100 with --data, 50 with "
                             "--captions, --max-len otherwise)")
    parser.add_argument("--phases", action="store_true",
                        help="ce / reinforce: also time each phase of the step (encoder, CE pass, sampling, scoring, "
                             "rewards, loss, backward, optimizer; smallvocab_tools/bench/phases.py)")
    parser.add_argument("--floor", action="store_true",
                        help="training steps: also time each step's matrix products alone, replayed with nothing "
                             "between them (smallvocab_tools/bench/floor.py): how far the step is from its "
                             "arithmetic; records have their own table (peak memory then includes the copies)")
    parser.add_argument("--ab", metavar="MODULE.NAME=A,B",
                        help="compare two values of one of the plugin's module-level settings in one process: each "
                             "training step or decoded batch runs under both, in alternating order, from the same "
                             "seed (e.g. fairseq_smallvocab.output.restricted.TRANSPOSED_MIN_ROWS="
                             "1000000000,32); reports each value's median and the median ratio A / B. The setting "
                             "must be read where it is used: one copied at import or when a model is built (`from "
                             "... import NAME`) does not change, and both sides then measure the same code")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 2),
                        help="torch threads (default: 2, this project's reference machine)")
    parser.add_argument("--epoch-sentences", type=int, default=50000,
                        help="sentences per epoch, for s/epoch (the synthetic corpus: 50,000; Multi30k: 29,000)")
    parser.add_argument("--decode-batches", nargs="+", type=int, default=[1], help="decode: sentences per batch")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5], help="decode: beam sizes")
    parser.add_argument("--decode-len", type=int, default=30, help="decode: tokens per hypothesis")
    parser.add_argument("--src-len", type=int, default=20, help="decode: source words per sentence")
    parser.add_argument("--decode-sentences", type=int, default=32, help="decode: sentences timed")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--data", type=Path, default=None,
                        help="ce / reinforce on real batches of this binarized corpus (instead of --vocab-sizes)")
    parser.add_argument("--candidates-dir", default=None,
                        help="with --data: exported candidate lists (scripts/export_candidates.py) with K' >= K")
    parser.add_argument("--source-lang", default="en", help="with --data")
    parser.add_argument("--target-lang", default="de", help="with --data")
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
    # again before anything below fills in a setting (a later parse would drop those: d = None, issue #29)
    if args.quick:
        parser.set_defaults(modes=["ce", "reinforce"], vocab_sizes=[24000], k=[1000], k_sweep=[], steps=2, warmup=1)
        args = parser.parse_args(argv)
    if args.embed_dim is None and args.arch == "lstm_smallvocab":
        args.embed_dim = 256
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least 1")
    if min(args.rl_samples) < 1 or (args.rl_baseline == "loo" and min(args.rl_samples) < 2):
        parser.error(f"--rl-samples {' '.join(map(str, args.rl_samples))}: each >= 1, and >= 2 with --rl-baseline "
                     "loo (the other samples of an input are its baseline)")
    if args.arch != "lstm_smallvocab" and args.data:
        parser.error("--arch goes with synthetic batches (--vocab-sizes); --data measures the recipe's model")
    if args.max_sample_len is None:
        args.max_sample_len = (50 if args.captions else 100) if args.data else args.max_len
    if args.max_sample_len < 1:
        parser.error(f"--max-sample-len {args.max_sample_len}: at least 1")
    if args.zipf < 0:
        parser.error(f"--zipf {args.zipf}: the exponent must be >= 0 (0: uniform)")
    for k in (args.k or []) + args.k_sweep:
        if k <= 4:
            parser.error(f"--k {k}: K must exceed the 4 special symbols")
    if args.floor and (args.phases or args.ab):
        parser.error("--floor times whole steps and their products: leave out --phases and --ab")
    if args.floor and args.modes == ["decode"]:
        parser.error("--floor measures training steps: use --modes ce reinforce")
    if args.floor and args.device != "cpu":
        parser.error("--floor counts the CPU's products (cuDNN's fused RNN kernels are not among them): "
                     "leave out --device cuda")
    if args.ab:
        if args.phases:
            parser.error("--ab times whole steps: leave out --phases")
        try:
            parse_ab(args.ab)
        except ValueError as error:
            parser.error(str(error))
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
    return args


def main(argv=None):
    args = parse_args(argv)
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
