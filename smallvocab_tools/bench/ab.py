"""``--ab NAME=A,B``: two values of one of the engine's settings
(``fairseq_smallvocab.engine.settings.EngineSettings``: capture, compile,
graphed_pass, static_state, stop_check_every, ...) compared inside one
worker process, batch by batch; ``--set NAME=VALUE``: one value for a whole
run.

``parse_ab`` and ``parse_set`` read and check the options, ``settings_for``
gives a worker's settings (the defaults with every ``--set``), ``ab_steps``
runs every batch under both values (used by both workers), ``ab_summary``
gives the medians and the median ratio A / B (also used by the runner to pool
a configuration's rounds).  Parsing ``--ab`` / ``--set`` imports the plugin
(its settings), and with it torch: a command line without them loads
without torch.
"""

import statistics
import time
from typing import Optional

AB_USAGE = "give a setting's name and two values, e.g. transposed_min_rows=1000000000,32 or capture=off,cuda-graphs"
SET_USAGE = "give a setting's name and its value, e.g. capture=off"


def _parse(option: str, spec: str, usage: str):
    """``NAME=VALUES`` -> (NAME, [values as text]), the name checked against the engine's settings."""
    from fairseq_smallvocab.engine.settings import NAMES

    name, sep, values = spec.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"{option} {spec}: {usage}")
    if name not in NAMES:
        raise ValueError(f"{option} {spec}: no setting {name!r}; the settings are {', '.join(NAMES)}")
    return name, values


def _values(option: str, spec: str, name: str, parts) -> tuple:
    from fairseq_smallvocab.engine.settings import EngineSettings, parse

    try:
        values = tuple(parse(name, part) for part in parts)
        for value in values:  # the setting's own checks (e.g. >= 1), here rather than in the worker
            EngineSettings().changed(**{name: value})
        return values
    except ValueError as error:
        raise ValueError(f"{option} {spec}: {error}") from None


def parse_ab(spec: str):
    """``--ab NAME=A,B`` -> (NAME, (A, B)): one of the engine's settings and two values for it."""
    name, values = _parse("--ab", spec, AB_USAGE)
    parts = values.split(",")
    if len(parts) != 2:
        raise ValueError(f"--ab {spec}: two values are compared, not {len(parts)}; {AB_USAGE}")
    return name, _values("--ab", spec, name, parts)


def parse_set(spec: str):
    """``--set NAME=VALUE`` -> (NAME, VALUE): one of the engine's settings and the value a whole run uses."""
    name, value = _parse("--set", spec, SET_USAGE)
    (parsed,) = _values("--set", spec, name, [value])
    return name, parsed


def settings_for(specs):
    """The engine's settings with every ``--set`` of ``specs`` (the defaults without any)."""
    from fairseq_smallvocab.engine.settings import EngineSettings

    return EngineSettings().changed(**dict(parse_set(spec) for spec in specs or ()))


def ab_steps(cfg: dict, step, samples, sample_lens, seed, snapshot, restore, use, base,
             sync=lambda: None) -> dict:
    """Every batch runs once under each of the two values of ``cfg["ab"]``
    (``use(settings)`` makes the worker's step run with ``base`` so changed)
    (A B, then B A for the next batch, and so on), both from the same random
    seed and the same weights and optimizer states (``restore(snapshot())``
    between the two: an update changes what the policy samples, and so the
    step's work), in this one process: the machine's drift, which moves whole
    processes by more than the change measured, then hits both values alike
    (a change of a few per cent is measured this way).  The first
    --warmup batches are untimed.  Returns each value's step times and sample
    lengths and the median of the batches' ratios A / B."""
    name, values = parse_ab(cfg["ab"])
    arms = [base.changed(**{name: value}) for value in values]
    times, lens = ([], []), ([], [])
    try:
        for i, sample in enumerate(samples):
            state = snapshot()
            for j, arm in enumerate((0, 1) if i % 2 == 0 else (1, 0)):
                if j:
                    restore(state)
                use(arms[arm])
                seed(i)
                sync()  # the restore's copies (CUDA) are not the step's time
                start = time.perf_counter()
                step(sample)
                if i >= cfg["warmup"]:
                    times[arm].append(time.perf_counter() - start)
                    if sample_lens:  # training steps note their samples' length
                        lens[arm].append(sample_lens[-1])
    finally:
        use(base)
    del sample_lens[:]
    sample_lens.extend(lens[0] + lens[1])
    return {"ab": cfg["ab"], "ab_values": [value.strip() for value in cfg["ab"].partition("=")[2].split(",")],
            "ab_rounds": [list(t) for t in times],
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
