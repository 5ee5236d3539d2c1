"""``--ab MODULE.NAME=A,B``: two values of one of the plugin's module-level
settings compared inside one worker process, batch by batch; ``--set
MODULE.NAME=VALUE``: one value for a whole run.

``parse_ab`` reads and checks the option, ``ab_steps`` runs every batch under
both values (used by both workers), ``ab_summary`` gives the medians and the
median ratio A / B (also used by the runner to pool a configuration's rounds).
``parse_set`` and ``apply_settings`` read and apply ``--set`` in a worker.
"""

import ast
import importlib
import statistics
import time
from typing import Optional


def _setting(option: str, spec: str, usage: str):
    """``module.NAME=VALUES`` -> (module, NAME, VALUES): a module-level setting of the plugin, checked."""
    target, sep, values = spec.partition("=")
    module_name, _, name = target.rpartition(".")
    if not sep or not name or module_name.split(".")[0] != "fairseq_smallvocab":
        raise ValueError(f"{option} {spec}: {usage}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{option} {spec}: no module {module_name} ({error}); {usage}") from None
    if not hasattr(module, name):
        raise ValueError(f"{option} {spec}: {module_name} has no setting {name}; {usage}")
    return module, name, values


def _literals(option: str, spec: str, module, name: str, parts, usage: str) -> tuple:
    """Each of ``parts`` as a Python literal of the setting's type."""
    try:
        parsed = tuple(ast.literal_eval(part.strip()) for part in parts)
    except (ValueError, SyntaxError):
        raise ValueError(f"{option} {spec}: the values must be Python literals; {usage}") from None
    current = getattr(module, name)
    allowed = (int, float) if isinstance(current, float) else (type(current),)
    for value in parsed:
        if type(value) not in allowed:
            raise ValueError(f"{option} {spec}: {value!r} is not of {name}'s type ({type(current).__name__}: "
                             f"{current!r} now)")
    return parsed


def parse_ab(spec: str):
    """``--ab module.NAME=A,B`` -> (module, NAME, (A, B)): a module-level
    setting of the plugin and two values for it (Python literals of its type)."""
    usage = ("give a module-level setting of the plugin and two values, e.g. "
             "fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS=1000000000,32")
    module, name, values = _setting("--ab", spec, usage)
    parts = values.split(",")
    if len(parts) != 2:
        raise ValueError(f"--ab {spec}: two values are compared, not {len(parts)}; {usage}")
    return module, name, _literals("--ab", spec, module, name, parts, usage)


def parse_set(spec: str):
    """``--set module.NAME=VALUE`` -> (module, NAME, VALUE): one module-level setting of the plugin and the
    value a whole run uses (a Python literal of its type; commas belong to the value)."""
    usage = ("give a module-level setting of the plugin and its value, e.g. "
             "\"fairseq_smallvocab.reinforce.capture.CAPTURE='off'\"")
    module, name, value = _setting("--set", spec, usage)
    (parsed,) = _literals("--set", spec, module, name, [value], usage)
    return module, name, parsed


def apply_settings(specs) -> None:
    """Set each ``--set`` setting in this (worker) process, before anything is built."""
    for spec in specs or ():
        module, name, value = parse_set(spec)
        setattr(module, name, value)


def ab_steps(cfg: dict, step, samples, sample_lens, seed, snapshot, restore, sync=lambda: None) -> dict:
    """Every batch runs once under each of the two values of ``cfg["ab"]``
    (A B, then B A for the next batch, and so on), both from the same random
    seed and the same weights and optimizer states (``restore(snapshot())``
    between the two: an update changes what the policy samples, and so the
    step's work), in this one process: the machine's drift, which moves whole
    processes by more than the change measured, then hits both values alike
    (measurements: docs/RESULTS.md, "Fifth pass (2026-11-23, evening): the
    union's product turned around; `benchmark.py --ab`").  The first
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


def ab_summary(times, sentences_per_batch: Optional[int] = None) -> dict:
    """Each value's median time, the median of the batches' ratios A / B, and
    for decoding (``sentences_per_batch``) each value's ms per sentence."""
    summary = {"ab_sec_per_step": [round(statistics.median(t), 4) for t in times],
               "ab_ratio": round(statistics.median(a / b for a, b in zip(*times)), 3)}
    if sentences_per_batch:
        summary["ab_ms_per_sentence"] = [round(1000 * t / sentences_per_batch, 3) for t in summary["ab_sec_per_step"]]
    return summary
