"""The training worker: one ce / reinforce configuration measured in this
process (``benchmark.py --worker``), its record returned.

A step is what fairseq-train does per update (forward, loss, backward,
gradient clipping to 1.0, an SGD update); after --warmup untimed steps,
--steps steps are timed, and peak memory is read around them.  ``--phases``
times each step's phases (``phases.py``), ``--ab`` runs each batch under two
values of a setting (``ab.py``), and ``--floor`` times each step's matrix
products alone (``floor_steps`` below, with ``floor.py``'s recorder).
"""

import contextlib
import copy
import math
import statistics
import time

from smallvocab_tools.bench.ab import ab_steps, settings_for
from smallvocab_tools.bench.largest_batch import fits_on_cuda, largest_fitting, release
from smallvocab_tools.bench.phases import DECIMALS, instrument
from smallvocab_tools.bench.workload import build_model, make_batch, real_setup, synthetic_task, to_device


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


def _ru_maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_worker(cfg: dict) -> dict:
    """Measure one ce / reinforce configuration in this process; returns its record."""
    import torch
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )
    from fairseq_smallvocab.engine import passes

    device = torch.device(cfg["device"])
    count = cfg["warmup"] + cfg["steps"]
    if cfg.get("data"):
        model, criterion, samples, epoch_sentences = real_setup(cfg, count)
        samples = [to_device(sample, device) for sample in samples]
        model, criterion = model.to(device), criterion.to(device)
    else:
        task = synthetic_task(cfg)
        model = build_model(cfg, task).to(device)
        if cfg["mode"] == "ce":
            criterion = CrossEntropyCriterion(task, sentence_avg=False)
        else:
            config = SmallVocabReinforceConfig(max_sample_len=cfg["max_sample_len"], rl_samples=cfg["rl_samples"],
                                         rl_baseline=cfg["rl_baseline"])
            if cfg["sample_limit"] == "flat":  # every sample exactly the limit long (flat_limit.py)
                from smallvocab_tools.bench.flat_limit import to_the_limit

                criterion = to_the_limit(task, config).to(device)
            else:
                criterion = SmallVocabReinforceCriterion(task, config).to(device)
        samples = [_synthetic_batch(cfg, cfg["batch"], device)] * count
        epoch_sentences = cfg["epoch_sentences"]
    cfg["d"] = cfg["d"] or model.output_weights()[0].size(1)  # a fairseq arch's (or --model-args') own d
    # (not ``base``: the memory baseline below); "auto" chosen for the device, as the criterion does
    engine_settings = passes.plan(settings_for(cfg.get("set")), device, model).settings
    if cfg["softmax"] == "chunked":  # the full softmax made chunk by chunk (no candidates: K = 0)
        engine_settings = engine_settings.changed(full_softmax="chunked")

    def use(settings):  # how the step runs: the model's plan, REINFORCE's criterion's settings (made outside timing)
        settings = passes.plan(settings, device, model).settings  # (an --ab arm may ask for "auto")
        model.plan_on(device, settings)
        if isinstance(criterion, SmallVocabReinforceCriterion):
            criterion.settings = settings

    use(engine_settings)
    model.train()
    sample_lens = []
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.75, weight_decay=1e-6)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    timer = None
    if cfg.get("phases"):
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

    searched = None
    if cfg.get("largest_batch"):  # (CUDA only) the largest batch that fits, then timed as any batch
        searched = _largest_batch(cfg, model, step, optimizer, device)
        cfg["batch"] = searched["largest_batch"]
        samples = [_synthetic_batch(cfg, cfg["batch"], device)] * count
        timed = samples[cfg["warmup"]:]
        torch.cuda.reset_peak_memory_stats(device)
    ab = floor = None
    if cfg.get("ab"):  # (never with --phases or --floor)
        ab = ab_steps(cfg, step, samples, sample_lens, torch.manual_seed, snapshot, restore, use, engine_settings,
                      sync=sync)
        sec_per_step = statistics.median(ab["ab_rounds"][0] + ab["ab_rounds"][1])
    elif cfg.get("floor"):  # (never with --phases)
        floor = floor_steps(cfg, step, samples, sample_lens, torch.manual_seed, snapshot, restore, sync=sync,
                            eager=lambda: _eager_program(use, engine_settings))
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
    phases = None if timer is None else {name: round(span / cfg["steps"], DECIMALS)
                                         for name, span in timer.spans.items()}
    if cuda:
        peak_total = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_total = _rss_mb("VmHWM") if reset else _ru_maxrss_mb()
    peak = peak_total - base
    batches = math.ceil(epoch_sentences / cfg["batch"])
    tokens = sum(int(sample["ntokens"]) for sample in timed)
    record = {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "batch", "max_len",
                                           "steps", "warmup", "threads", "zipf")}, "arch": cfg.get("arch"),
              **({"shape": cfg["shape"], "layers": cfg.get("layers")} if cfg.get("shape") else {}),
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
        ms = timer.ms_per_sampled_token()
        record["ms_per_sampled_token"] = None if ms is None else round(ms, 3)
    if ab is not None:
        record.update(ab)
    if floor is not None:
        record.update(floor)
    if searched is not None:
        record.update(searched, sentences_per_sec=round(cfg["batch"] / sec_per_step, 1))
    if cfg.get("data"):
        record.update(data=cfg["data"], zipf=None, task="captioning" if cfg.get("captions") else "translation",
                      checkpoint=cfg.get("checkpoint"),
                      vocab_size=len(model.decoder.dictionary),
                      max_len=max(sample["target"].size(1) for sample in timed),
                      mean_tgt_len=round(tokens / sum(sample["target"].size(0) for sample in timed), 2))
    return record


def _synthetic_batch(cfg: dict, sentences: int, device):
    """A random batch of the configuration's shape with ``sentences`` sentences (``workload.make_batch``)."""
    return make_batch(cfg["vocab_size"], cfg["K"], sentences, cfg["max_len"], device, zipf=cfg["zipf"])


def _largest_batch(cfg: dict, model, step, optimizer, device) -> dict:
    """The largest batch (sentences) whose training step fits the GPU (``largest_batch.py``)."""
    from fairseq_smallvocab.engine.device_modes import capture, graphed_pass

    def reset():
        optimizer.zero_grad(set_to_none=True)
        capture.forget(model.decoder)
        graphed_pass.forget(model.decoder)

    largest, trials = largest_fitting(fits_on_cuda(step, lambda n: _synthetic_batch(cfg, n, device), reset),
                                      cfg["batch"])
    # the last trial's buckets (a larger batch's, when it did not fit) would otherwise stay beside the timed steps
    release(reset)
    if not largest:
        raise RuntimeError(f"--largest-batch: not even a batch of 1 sentence fits {device}")
    return {"largest_batch": largest, "largest_batch_trials": trials}


def floor_steps(cfg: dict, step, samples, sample_lens, seed, snapshot, restore, sync=lambda: None,
                eager=contextlib.nullcontext) -> dict:
    """``--floor``: each timed batch's step, timed, then the same step again
    from the same seed, weights and optimizer states under a
    ``ProductRecorder`` (untimed; it makes the same samples), whose matrix
    products are then replayed alone and timed (``floor.py``).  The first
    --warmup batches are plain untimed steps (their samples' lengths are
    dropped).  Returns each batch's step and products-alone times, their
    medians, the median of the batches' ratios step / products, the median
    batch's product FLOPs, product calls and other ATen calls, and the last
    batch's largest products (``products_top``).  On CUDA the recorded step
    runs its program eagerly (``_eager_program``) and the products replay as
    one captured graph (``eager()``: the block the recorded step runs in)."""
    # imported here, not at the top: floor.py imports torch, and the command line, which imports this module,
    # runs without torch
    from smallvocab_tools.bench.floor import ProductRecorder

    cuda = cfg.get("device") == "cuda"

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
        with eager() if cuda else contextlib.nullcontext(), recorder:
            step(sample)
        if sample_lens:  # the same samples again: one entry per timed step
            sample_lens.pop()
        products.append(recorder.replay(sync, graph=cuda))
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


@contextlib.contextmanager
def _eager_program(use, base):
    """While a CUDA step is recorded: a replayed graph makes no ATen calls for the recorder to see, so the
    captured sampling step and teacher-forced passes ('cuda-graphs') run as 'buckets' (the same padded program,
    eagerly) and a compiled step as the plain one; ``base`` again after the block."""
    def eager(mode):
        return "buckets" if mode == "cuda-graphs" else mode

    use(base.changed(capture=eager(base.capture), compile="off", graphed_pass=eager(base.graphed_pass)))
    try:
        yield
    finally:
        use(base)


def floor_summary(steps, products) -> dict:
    """The median products-alone time and the median of the batches' ratios step / products."""
    return {"products_sec": round(statistics.median(products), 6),
            "step_over_products": round(statistics.median(s / p for s, p in zip(steps, products)), 3)}
