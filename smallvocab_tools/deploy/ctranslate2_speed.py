"""Tokens per second of an exported CTranslate2 model with and without its vocabulary map, timed as the Deploy
code runs it (README, "Deploy with CTranslate2"), and whether the map pays: what the export's check
(``ctranslate2_bench.map_verdict``) and ``scripts/bench_ctranslate2.py`` measure.

What is timed is the Deploy code's call and nothing else: ``translator.translate_batch(pieces, beam_size=B,
use_vmap=...)`` on consecutive batches of the sentences' pieces, the translator loaded and every batch translated
twice each way before any timing (a first call allocates CTranslate2's buffers and caches: a first pass took 5x
the next one here), and tokens counted as the Deploy code gets them: the pieces of each best hypothesis (no eos).
The timing runs in a process of its own that imports ctranslate2 alone, as a Deploy script does: in the export's
process PyTorch has just computed the map's coverage on several threads, and CTranslate2 ran 2-4x slower after
that in the same process (measured on 2 cores; the two bring OpenMP runtimes of their own).  It runs on
``threads`` intra-op threads (``intra_threads``, and OMP_NUM_THREADS alike), the user's number: more threads than
free cores stall every operation at its barrier (on 2 cores that others were using, a pass on 2 threads once ran
80x slower than the passes right after it).

The sides alternate in rounds, the order swapped every round, so that a slow spell of a shared machine falls on
both; a round translates the sentences enough times each way to last ``MIN_SECONDS`` (timer and scheduler noise
are then small beside it).  Each round gives a paired ratio, (tokens/s with the map) / (tokens/s without); the
verdict takes their median and their range: over n rounds, the range holds the true median ratio with probability
1 - 2^(1 - n) (94% for the default 5), whatever the noise's distribution.  The map pays where the whole range lies
above 1 and the median is at least ``MARGIN`` above it, slows where the range lies below 1 and the median as far
below; anything else is no clear difference."""

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

SIDES = ("vmap", "full")  # with the map, without it
DEFAULT_THREADS = 2  # where neither --threads nor OMP_NUM_THREADS says
DEFAULT_ROUNDS = 5  # the rounds' range then holds the median ratio with probability 94%
MIN_ROUNDS = 3  # fewer: the range of the rounds holds the median ratio only half (2) or no (1) of the time
MIN_SECONDS = 1.0  # each side of a round lasts at least this long (the sentences translated again where needed)
MAX_REPEATS = 50
# A median ratio within 5% of 1 is no clear difference even where every round agrees: the speed of two identical
# runs on a shared machine moved by more (12% between the runs of docs/runs/deployment-ctranslate2.md), and so
# small a gain does not pay for the words the map leaves out.
MARGIN = 0.05
PAYS, SLOWS, UNCLEAR = "pays", "slows", "unclear"


class SpeedError(RuntimeError):
    """A timing that could not be made, with the reason and the fix."""


def threads_from(threads: Optional[int], environ=None) -> Tuple[int, str]:
    """The intra-op threads to time on and where the number comes from: ``threads`` where given (--threads), else
    OMP_NUM_THREADS (its first level, as OpenMP reads "4,2"; the quick start exports THREADS there), else
    ``DEFAULT_THREADS``.  A number that is not a whole number >= 1 is a ``ValueError`` naming it and the fix."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads {threads}: the threads to translate on must be 1 or more")
        return threads, "--threads"
    environ = os.environ if environ is None else environ
    value = environ.get("OMP_NUM_THREADS", "").strip()
    if not value:
        return DEFAULT_THREADS, "the default; OMP_NUM_THREADS is not set"
    first = value.split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ValueError(f"OMP_NUM_THREADS={value!r} is not a number of threads: set it to a whole number >= 1 "
                         "(e.g. export OMP_NUM_THREADS=2), or give --threads N")
    return int(first), f"OMP_NUM_THREADS={value}"


def describe_threads(threads: int, where: str) -> str:
    return f"{threads} thread{'s' if threads != 1 else ''} ({where})"


def batches_of(sources: Sequence, batch: int) -> List[Sequence]:
    """Consecutive batches of ``batch`` sentences: what a Deploy script gives translate_batch, one call each."""
    if batch < 1:
        raise ValueError(f"batch {batch}: a batch holds 1 sentence or more")
    return [sources[i:i + batch] for i in range(0, len(sources), batch)]


def timed_pass(translate: Callable, batches: Sequence, side: str, clock: Callable[[], float]):
    """(best hypotheses as piece lists, seconds) of one pass of ``translate(batch, use_vmap)`` over ``batches``:
    only the calls are timed."""
    hyps, seconds = [], 0.0
    for batch in batches:
        start = clock()
        out = translate(batch, side == "vmap")
        seconds += clock() - start
        hyps.extend(out)
    return hyps, seconds


def output_tokens(hyps: Sequence[Sequence[str]]) -> int:
    """The tokens the Deploy code gets: the pieces of each best hypothesis (CTranslate2 returns no eos)."""
    return sum(len(h) for h in hyps)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 90 else f"{seconds / 60:.1f} minutes"


def time_rounds(translate: Callable, sources: Sequence, batch: int, rounds: int, sides: Sequence[str] = SIDES,
                clock: Callable[[], float] = time.perf_counter, say: Callable[[str], None] = _stderr,
                min_seconds: float = MIN_SECONDS) -> dict:
    """Time ``translate(batch_of_sources, use_vmap) -> best hypotheses`` (the Deploy call) on ``sources`` in
    batches of ``batch``: two warm-up passes each way (not counted), then ``rounds`` rounds of the ``sides``
    alternating, the order swapped every round, each side translating the sentences ``repeats`` times (enough to
    last ``min_seconds``, from the second warm-up pass's time).  Each step is said through ``say`` as it
    finishes.  Returns {"sides", "repeats", "tokens" (per pass, per side), "warmup" (the second pass's seconds),
    "rounds": [{"first", "seconds"}], "hyps"} (JSON as it is)."""
    if rounds < 1:
        raise ValueError(f"rounds {rounds}: 1 or more")
    if not sources:
        raise SpeedError("no sentences to translate: the split is empty")
    batches = batches_of(sources, batch)
    hyps, warm, first = {}, {}, {}
    for side in sides:  # a first call's allocations and caches (a first pass took 5x the next one here)
        first[side] = timed_pass(translate, batches, side, clock)[1]
    say("  warm-up: a first pass over the sentences took " + ", ".join(
        f"{first[s]:.2f} s {'with the map' if s == 'vmap' else 'without it'}" for s in sides) + " (not counted)")
    for side in sides:  # a pass as it now goes: how many make a round
        hyps[side], warm[side] = timed_pass(translate, batches, side, clock)
    tokens = {side: output_tokens(hyps[side]) for side in sides}
    empty = [side for side in sides if tokens[side] == 0]
    if empty:
        raise SpeedError(f"the model translated all {len(sources)} sentences into nothing "
                         f"({' and '.join('with the map' if s == 'vmap' else 'without it' for s in empty)}): there "
                         "is no speed to measure; check the model (it is not trained?) and its data folder")
    fastest = min(warm.values())
    if fastest <= 0:
        raise SpeedError("the clock did not advance over a whole pass of the sentences: no speed to measure")
    repeats = max(1, min(MAX_REPEATS, math.ceil(min_seconds / fastest)))
    per_round = repeats * sum(warm.values())
    took = ", ".join(f"{warm[s]:.2f} s {'with the map' if s == 'vmap' else 'without it'}" for s in sides)
    say(f"  warm-up done (two passes each way, not counted; the second took {took}); each round translates the "
        f"{len(sources)} sentences {repeats} time(s) each way: about {_duration(per_round)} a round, "
        f"{_duration(rounds * per_round)} in all")
    records = []
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        seconds = {}
        for side in order:
            total = 0.0
            for _ in range(repeats):
                hyps[side], s = timed_pass(translate, batches, side, clock)
                total += s
            seconds[side] = total
        records.append({"first": order[0], "seconds": seconds})
        rates = {side: repeats * tokens[side] / max(seconds[side], 1e-12) for side in sides}
        if "vmap" in rates and "full" in rates:
            said = (f"{rates['vmap']:.0f} tokens/s with the map, {rates['full']:.0f} without "
                    f"({rates['vmap'] / rates['full']:.2f}x)")
        else:
            said = ", ".join(f"{rates[s]:.0f} tokens/s {'with the map' if s == 'vmap' else 'without it'}"
                             for s in sides)
        first = f" ({'with' if order[0] == 'vmap' else 'without'} the map first)" if len(sides) > 1 else ""
        say(f"  round {r + 1}/{rounds}{first}: {said}")
    return {"sides": list(sides), "repeats": repeats, "tokens": tokens, "warmup": warm, "rounds": records,
            "hyps": hyps}


def speeds(result: dict) -> dict:
    """A ``time_rounds`` result summed up: each side's tokens/s and seconds per pass (the medians of the rounds);
    with both sides, each round's ratio (with / without), their median and their range."""
    repeats, tokens = result["repeats"], result["tokens"]
    rates = [{side: repeats * tokens[side] / max(r["seconds"][side], 1e-12) for side in result["sides"]}
             for r in result["rounds"]]
    out = {"rounds": len(rates), "repeats": repeats}
    for side in result["sides"]:
        out[side] = {"tokens_per_s": statistics.median(r[side] for r in rates),
                     "seconds": statistics.median(r["seconds"][side] / repeats for r in result["rounds"]),
                     "tokens": tokens[side]}
    if len(result["sides"]) == 2:
        ratios = [r["vmap"] / r["full"] for r in rates]
        out.update(ratios=ratios, ratio=statistics.median(ratios), low=min(ratios), high=max(ratios))
    return out


def judge(ratio: float, low: float, high: float, margin: float = MARGIN) -> str:
    """``PAYS`` where every round's ratio is above 1 and their median at least ``margin`` above it, ``SLOWS``
    where every round's is below 1 and the median at most 1 / (1 + ``margin``), else ``UNCLEAR``: a ratio whose
    rounds reach 1, or that is too close to it to repeat, is the machine's noise."""
    if low > 1 and ratio >= 1 + margin:
        return PAYS
    if high < 1 and ratio <= 1 / (1 + margin):
        return SLOWS
    return UNCLEAR


# --- the timing in a process of its own (ctranslate2 alone, as the Deploy code runs) ------------------------------

def measure(model_dir, sources: Sequence[Sequence[str]], threads: int, batch: int, beam: int, rounds: int,
            sides: Sequence[str] = SIDES, compute_type: str = "default", max_len: int = 256,
            min_seconds: float = MIN_SECONDS, echo=None) -> dict:
    """``time_rounds`` of the Deploy call on ``model_dir`` in a new Python process that imports ctranslate2 alone
    (see the module's doc), its progress lines passed on to ``echo`` (stderr) as they come.  A failure is a
    ``SpeedError`` with the process's last lines."""
    from smallvocab_tools.data.prep import _die_with_parent, _stop_group

    echo = echo or (lambda line: sys.stderr.write(line) or sys.stderr.flush())
    request = {"model": os.path.abspath(model_dir), "sources": [list(s) for s in sources], "threads": threads,
               "batch": batch, "beam": beam, "rounds": rounds, "sides": list(sides), "compute_type": compute_type,
               "max_len": max_len, "min_seconds": min_seconds}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])  # this checkout first: the worker is this module
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory(prefix="ct2-speed-") as tmp:
        request_file, result_file = Path(tmp, "request.json"), Path(tmp, "result.json")
        request_file.write_text(json.dumps(request))
        # its own process group, stopped with this process (Ctrl-C, SIGTERM in exit_on_sigterm, SIGKILL on Linux)
        proc = subprocess.Popen([sys.executable, "-m", "smallvocab_tools.deploy.ctranslate2_speed",
                                 str(request_file), str(result_file)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                                preexec_fn=_die_with_parent())
        last = deque(maxlen=20)
        try:
            for line in proc.stderr:
                echo(line)
                last.append(line.rstrip("\n"))
            proc.wait()
        except BaseException:
            _stop_group(proc)
            raise
        finally:
            proc.stderr.close()
        if proc.returncode != 0 or not result_file.is_file():
            told = [line for line in last if line.startswith("error: ")]
            raise SpeedError(told[-1][len("error: "):] if told else
                             f"the timing process failed (exit {proc.returncode}): " + " / ".join(last))
        return json.loads(result_file.read_text())


def _worker(request_file, result_file) -> None:
    """The timing process: the translator loaded and timed as ``measure`` asked, the result written as JSON."""
    req = json.loads(Path(request_file).read_text())
    try:
        import ctranslate2
    except ImportError:
        raise SystemExit("error: ctranslate2 is not installed: pip install ctranslate2 (make setup installs it)") \
            from None
    _stderr("  loading the model in a process of its own (ctranslate2 alone, as the Deploy code runs it) and "
            "warming it up")
    try:
        translator = ctranslate2.Translator(req["model"], device="cpu", compute_type=req["compute_type"],
                                            intra_threads=req["threads"], inter_threads=1)
    except (RuntimeError, ValueError) as err:
        raise SystemExit(f"error: CTranslate2 cannot load {req['model']}: {err}") from None

    def translate(batch, use_vmap):  # the Deploy code's call
        results = translator.translate_batch(batch, beam_size=req["beam"], use_vmap=use_vmap,
                                             max_decoding_length=req["max_len"])
        return [r.hypotheses[0] for r in results]

    try:
        result = time_rounds(translate, req["sources"], req["batch"], req["rounds"], req["sides"],
                             min_seconds=req["min_seconds"])
    except (SpeedError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    Path(result_file).write_text(json.dumps(result))


if __name__ == "__main__":
    _worker(*sys.argv[1:3])
