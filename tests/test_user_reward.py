"""--reward python:MODULE.FUNCTION (reinforce/user_reward.py): a function of the user's, imported from the
working directory or PYTHONPATH, called once per batch with detokenized hypotheses, references (None for a
reference-free reward), sources and target_lang; a Python GLEU gives the built-in GLEU's step exactly; a
small reward model built here (no download) scores in batches; a wrong name, count, value or a raising
reward is named in its error, as is a return that is not a sequence of numbers or a 1-d tensor (a dict, a
string, a set, ...), while the other sequences give the list's step; a reward still running after
``slow_after`` seconds is named in the log, once, by a watchdog that ends when no call runs;
fairseq-train runs with one."""

import itertools
import logging
import re
import sys
import textwrap
import threading
import time

import pytest
import torch
from helpers import USER_DIR, B, _crit, _setup, assert_same_step, reinforce_step, run

_NAMES = itertools.count()


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    """write(source) -> the name of a fresh module holding ``source``, importable from the working directory
    (the test's tmp_path)."""
    monkeypatch.chdir(tmp_path)
    written = []

    def write(source: str) -> str:
        name = f"user_reward_{next(_NAMES)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


GLEU = """
    from fairseq_smallvocab.reinforce.rewards import gleu

    CALLS = []

    def score(hypotheses, references, sources, target_lang):
        CALLS.append((list(hypotheses), references, sources, target_lang))
        return [gleu(h.split(), r.split()) for h, r in zip(hypotheses, references)]
"""


@pytest.mark.parametrize("baseline, n", [("learned", 1), ("loo", 3), ("self-critical", 2)])
def test_a_python_gleu_gives_the_builtin_gleus_step_called_once_per_batch(reward_module, baseline, n):
    name = reward_module(GLEU)
    model, task, sample = _setup()
    builtin = reinforce_step(model, task, sample, baseline, n)
    mine = reinforce_step(model, task, sample, baseline, n, reward=f"python:{name}.score")
    assert_same_step(mine, builtin)
    assert mine[2]["reward"] == pytest.approx(builtin[2]["reward"])
    calls = sys.modules[name].CALLS
    assert len(calls) == 1  # the samples and the greedy decodes in one call
    hypotheses, references, sources, target_lang = calls[0]
    rows = B * n + (B if baseline == "self-critical" else 0)
    assert len(hypotheses) == len(references) == len(sources) == rows and target_lang is None
    d, src_dict = task.target_dictionary, task.source_dictionary
    gold = [d.string(t[t.ne(d.pad()) & t.ne(d.eos())]) for t in sample["target"]]
    assert references[: B * n] == [g for g in gold for _ in range(n)] and references[B * n:] == (
        gold if baseline == "self-critical" else [])
    src = [src_dict.string(s[s.ne(src_dict.pad())]) for s in sample["net_input"]["src_tokens"]]
    assert sources[: B * n] == [s for s in src for _ in range(n)]
    assert all(isinstance(h, str) for h in hypotheses) and any(hypotheses)


def test_a_reference_free_reward_model_scores_in_batches(reward_module):
    """``needs_references = False``: references None; a small reward model (built here, no download) scores
    (hypothesis, source) pairs in one batch and returns a tensor; the rewards drive the step."""
    name = reward_module("""
        import torch

        torch.manual_seed(0)
        BAG, HEAD = torch.nn.EmbeddingBag(64, 8, mode="mean"), torch.nn.Linear(8, 1)
        CALLS = []

        def _ids(texts):
            return [torch.tensor([hash(w) % 64 for w in t.split()] or [0]) for t in texts]

        @torch.no_grad()
        def quality(hypotheses, references, sources, target_lang):
            CALLS.append((len(hypotheses), references))
            ids = _ids([h + " " + s for h, s in zip(hypotheses, sources)])
            offsets = torch.tensor([0] + [len(x) for x in ids[:-1]]).cumsum(0)
            return torch.sigmoid(HEAD(BAG(torch.cat(ids), offsets))).squeeze(1)

        quality.needs_references = False
    """)
    model, task, sample = _setup()
    loss, grads, log = reinforce_step(model, task, sample, "loo", 2, reward=f"python:{name}.quality")
    assert sys.modules[name].CALLS == [(B * 2, None)]
    assert torch.isfinite(loss) and 0 < log["reward"] < B * 2 and any(g.abs().sum() > 0 for g in grads)


def test_a_reward_module_on_pythonpath_and_a_dotted_name(tmp_path, monkeypatch):
    package = tmp_path / "elsewhere" / "my_rewards"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "lengths.py").write_text("def ratio(h, r, s, lang):\n    return [min(1.0, len(x) / 20) for x in h]\n")
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    try:
        model, task, sample = _setup()
        loss, _, log = reinforce_step(model, task, sample, "learned", 1, reward="python:my_rewards.lengths.ratio")
        assert torch.isfinite(loss) and log["reward"] > 0
    finally:
        for mod in ("my_rewards", "my_rewards.lengths"):
            sys.modules.pop(mod, None)


@pytest.mark.parametrize("spec, problem", [
    ("python:nowhere_module_xyz.score", r"--reward python:nowhere_module_xyz.score: no module 'nowhere_module_xyz' "
                                        r"importable from the working directory \(.*\) or PYTHONPATH"),
    ("python:score", r"--reward python:score: give python:MODULE.FUNCTION"),
    ("python:{mod}.missing", r"--reward python:{mod}.missing: module '{mod}' \(.*\) has no 'missing'"),
    ("python:{mod}.NOT_CALLABLE", r"--reward python:{mod}.NOT_CALLABLE: {mod}.NOT_CALLABLE is a int, not a "
                                  r"function"),
    ("python:{mod}_broken.score", r"--reward python:{mod}_broken.score: importing '{mod}_broken' failed: No "
                                  r"module named 'a_dependency_xyz'"),
    ("gleu2", r"unknown reward 'gleu2': --reward must be one of gleu, gleu_bp, bleu, chrf, constant, or "
              r"python:MODULE.FUNCTION"),
])
def test_a_reward_that_cannot_be_loaded_stops_the_criterion_at_start(reward_module, spec, problem):
    mod = reward_module("NOT_CALLABLE = 3\n\ndef score(h, r, s, lang):\n    return [0.5] * len(h)\n")
    (__import__("pathlib").Path.cwd() / f"{mod}_broken.py").write_text("import a_dependency_xyz\n")
    _, task, _ = _setup()
    with pytest.raises(ValueError, match="^" + problem.format(mod=mod)):
        _crit(task, reward=spec.format(mod=mod))
    sys.modules.pop(f"{mod}_broken", None)


@pytest.mark.parametrize("body, problem", [
    ("return [0.5] * (len(h) - 1)", rf"returned {2 * B - 1} values for {2 * B} hypotheses; it must return one number "
                                    "per hypothesis"),
    ("return [float('nan')] + [0.5] * (len(h) - 1)", r"returned nan for hypothesis 0 \('.*'\); a reward must be a "
                                                     r"finite number"),
    ("raise KeyError('no model loaded')", r"raised KeyError: 'no model loaded'"),
    # a reward that empties the list it was given is not blamed for the count of what it returns
    ("n = len(h); h.clear(); return [0.5] * (n + 1)", rf"returned {2 * B + 1} values for {2 * B} hypotheses"),
])
def test_a_reward_that_misbehaves_is_named_in_its_error(reward_module, body, problem):
    mod = reward_module(f"import torch\n\ndef score(h, r, s, lang):\n    {body}\n")
    model, task, sample = _setup()
    with pytest.raises((ValueError, RuntimeError), match=rf"^--reward python:{mod}\.score {problem}"):
        reinforce_step(model, task, sample, "loo", 2, reward=f"python:{mod}.score")


WANTED = (rf"; it must return one number per hypothesis \({2 * B}\): a list, tuple or numpy array of numbers, or a "
          "1-d tensor")


@pytest.mark.parametrize("body, problem", [
    ("return {i: 0.5 for i in range(len(h))}", r"returned a dict" + WANTED + r" \(a mapping's keys would be read, not "
                                               r"its values\)$"),
    ("return '1' * len(h)", r"returned a str \('11111111.*'\)" + WANTED + r" \(a string would be read one character "
                            r"per hypothesis\)$"),
    ("return b'1' * len(h)", r"returned a bytes \(b'1111.*'\)" + WANTED + r" \(a string would be read one "
                             r"character per hypothesis\)$"),
    ("return set(range(len(h)))", r"returned a set" + WANTED + "$"),
    ("return (0.5 for _ in h)", r"returned a generator" + WANTED + "$"),
    ("return iter([0.5] * len(h))", r"returned a list_iterator" + WANTED + "$"),
    ("return None", r"returned a NoneType" + WANTED + "$"),
    ("return 0.5", r"returned a float" + WANTED + "$"),
    ("return [[0.5]] * len(h)", r"returned a list whose item 0 is a list \(\[0.5\]\)" + WANTED + "$"),
    ("return ['good'] * len(h)", r"returned a list whose item 0 is a str \('good'\)" + WANTED + "$"),
    ("return (0.5, 1j) + (0.5,) * (len(h) - 2)", r"returned a tuple whose item 1 is a complex \(1j\)" + WANTED + "$"),
    ("return [torch.ones(1)] * len(h)", r"returned a list whose item 0 is a torch.Tensor \(tensor\(\[1.\]\)\)" +
                                        WANTED + "$"),
    ("return [decimal.Decimal('0.5')] * len(h)", r"returned a list whose item 0 is a decimal.Decimal "
                                                 r"\(Decimal\('0.5'\)\)" + WANTED + "$"),
    ("return numpy.zeros((len(h), 1))", rf"returned a numpy.ndarray of shape \({2 * B}, 1\)" + WANTED + "$"),
    ("return numpy.array(['0.5'] * len(h))", r"returned a numpy.ndarray of dtype <U3" + WANTED + "$"),
    ("return torch.zeros(len(h), 2)", rf"returned a torch.Tensor of shape \({2 * B}, 2\)" + WANTED + "$"),
    ("return torch.zeros(len(h), device='meta')", r"returned a torch.Tensor on torch's 'meta' device" + WANTED +
                                                  r" \(it holds no values\)$"),
    ("return torch.zeros(len(h), dtype=torch.complex64)", r"returned a torch.Tensor of dtype torch.complex64" + WANTED
                                                          + "$"),
])
def test_a_reward_that_returns_anything_but_a_sequence_of_numbers_is_refused(reward_module, body, problem):
    """A mapping (its keys were read as the rewards), a string (one reward per character), a set (no order),
    an iterator, a single number, items that are not real numbers, an array or tensor that is not 1-d or
    not of numbers: the error names the reward, the type returned and what to return."""
    mod = reward_module(f"import decimal\n\nimport numpy\nimport torch\n\n\ndef score(h, r, s, lang):\n    {body}\n")
    model, task, sample = _setup()
    with pytest.raises(ValueError, match=rf"^--reward python:{mod}\.score {problem}"):
        reinforce_step(model, task, sample, "loo", 2, reward=f"python:{mod}.score")


RATIO = "[min(1.0, len(x) / 30) for x in h]"
EVEN = "[float(len(x) % 2 == 0) for x in h]"


@pytest.mark.parametrize("body, same_as", [
    (f"tuple({RATIO})", RATIO),
    (f"collections.deque({RATIO})", RATIO),
    (f"numpy.array({RATIO})", RATIO),
    (f"numpy.array({RATIO}, dtype=object)", RATIO),
    (f"[numpy.float32(x) for x in {RATIO}]", RATIO),
    (f"[fractions.Fraction(x) for x in {RATIO}]", RATIO),
    (f"[torch.tensor(x) for x in {RATIO}]", RATIO),
    (f"torch.tensor({RATIO}, dtype=torch.float64)", RATIO),
    ("[len(x) % 2 == 0 for x in h]", EVEN),  # bools, as 1 and 0: an exact-match reward
    ("numpy.array([len(x) % 2 == 0 for x in h])", EVEN),
    ("[int(len(x) % 2 == 0) for x in h]", EVEN),
    (f"(lambda got: (h.clear(), got)[1])({RATIO})", RATIO),  # scored, then its list emptied: counted all the same
])
def test_any_sequence_of_real_numbers_gives_the_lists_step(reward_module, body, same_as):
    mod = reward_module(f"import collections\nimport fractions\n\nimport numpy\nimport torch\n\n\n"
                        f"def score(h, r, s, lang):\n    return {body}\n\n\n"
                        f"def listed(h, r, s, lang):\n    return {same_as}\n")
    model, task, sample = _setup()
    listed = reinforce_step(model, task, sample, "loo", 2, reward=f"python:{mod}.listed")
    mine = reinforce_step(model, task, sample, "loo", 2, reward=f"python:{mod}.score")
    assert_same_step(mine, listed)
    assert mine[2]["reward"] == pytest.approx(listed[2]["reward"]) and 0 < listed[2]["reward"] < 2 * B


SLOW = """
    import threading
    import time

    WARNED = threading.Event()  # set by the test when the log says that the reward is still running
    CALLED_IN = []

    def score(h, r, s, lang):
        CALLED_IN.append(threading.get_ident())
        WARNED.wait(10)
        time.sleep(0.3)  # six times the wait: still one warning
        return [0.5] * len(h)
"""


def _watchdog_ends(before):
    """Whether the threads that were not running ``before`` have ended, within 5 s."""
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    return not set(threading.enumerate()) - before


def test_a_reward_still_running_after_a_while_is_named_in_the_log_once(reward_module, caplog):
    """The call stays in the calling thread; the watchdog names the reward, the time it has run and its
    hypotheses once, after ``slow_after`` seconds (0.05 here), and ends when no call runs."""
    mod = reward_module(SLOW)
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=2, max_sample_len=7, reward=f"python:{mod}.score")
    crit.reward.slow_after = 0.05
    module = sys.modules[mod]

    class Tell(logging.Handler):
        def emit(self, record):
            if "still running" in record.getMessage():
                module.WARNED.set()

    logger, tell = logging.getLogger("fairseq_smallvocab.reinforce.user_reward"), Tell()
    before = set(threading.enumerate())
    logger.addHandler(tell)
    try:
        crit(model, sample)
    finally:
        logger.removeHandler(tell)
    assert module.WARNED.is_set(), "no warning while the reward ran (it waited 10 s for one)"
    assert module.CALLED_IN == [threading.get_ident()]
    assert _watchdog_ends(before)
    said = [r for r in caplog.records if "still running" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert re.fullmatch(rf"--reward python:{mod}\.score is still running after [\d.]+ s on {2 * B} hypotheses: "
                        r"training waits for it \(a reward that never returns stops training here\)",
                        said[0].getMessage()), said[0].getMessage()


def test_a_reward_that_returns_in_time_logs_nothing_and_its_watchdog_ends(reward_module, caplog):
    """Calls that return within ``slow_after`` (0.2 s here): no warning, one watchdog for both, and it ends
    once no call runs (a later call starts another)."""
    mod = reward_module("def score(h, r, s, lang):\n    return [0.5] * len(h)\n")
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=2, max_sample_len=7, reward=f"python:{mod}.score")
    assert type(crit.reward).slow_after == 60
    crit.reward.slow_after = 0.2
    for _ in range(2):
        before = set(threading.enumerate())
        crit(model, sample)
        crit(model, sample)
        assert len(set(threading.enumerate()) - before) <= 1
        assert _watchdog_ends(before) and crit.reward.watchdog is None
    assert not [r for r in caplog.records if "still running" in r.getMessage()]


def test_rewards_outside_the_unit_interval_are_said_once(reward_module, caplog):
    mod = reward_module("def score(h, r, s, lang):\n    return [-2.0 + i for i in range(len(h))]\n")
    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=2, max_sample_len=7, reward=f"python:{mod}.score")
    for _ in range(2):
        crit(model, sample)
    said = [r.getMessage() for r in caplog.records if "outside [0, 1]" in r.getMessage()]
    assert len(said) == 1 and "the learned baseline (--rl-baseline learned, a sigmoid) fits only [0, 1]" in said[0]


@pytest.mark.slow
def test_fairseq_train_with_a_reward_of_the_users_own(tiny_bin, tmp_path):
    (tmp_path / "my_reward.py").write_text(
        "def overlap(hypotheses, references, sources, target_lang):\n"
        "    return [len(set(h.split()) & set(r.split())) / max(1, len(r.split()))\n"
        "            for h, r in zip(hypotheses, references)]\n")
    out = run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch",
               "lstm_smallvocab", "--embed-dim", "16", "--batch-size", "32", "--cpu", "--no-progress-bar",
               "--log-format", "simple", "--num-workers", "0", "--log-interval", "1", "--small-vocab-size", "0",
               "--criterion", "smallvocab_reinforce", "--reward", "python:my_reward.overlap", "--rl-samples", "2",
               "--rl-baseline", "loo", "--optimizer", "sgd", "--lr", "0.01", "--max-epoch", "1", "--no-save",
               "--max-sample-len", "20"], cwd=tmp_path)
    log = out.stdout + out.stderr
    assert "reward=" in log and "train_inner" in log


def test_the_comet_kiwi_recipe_scores_sentences_where_comet_is_installed(monkeypatch):
    """examples/rewards/comet_kiwi.py on two (source, hypothesis) pairs: reference-free, one float each, the
    faithful translation above the unrelated one.  Skipped without unbabel-comet or its model (a local
    checkpoint in COMET_KIWI_MODEL, or the hub's copy in the local cache: the tests download nothing)."""
    import os

    pytest.importorskip("comet", reason="unbabel-comet is not installed (make setup does not install it)")
    local = os.environ.get("COMET_KIWI_MODEL")
    if not (local and os.path.isfile(local)):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache("Unbabel/wmt22-cometkiwi-da", "checkpoints/model.ckpt")
        if not isinstance(cached, str):
            pytest.skip("the COMET-Kiwi model is not here (COMET_KIWI_MODEL, or the Hugging Face cache)")
        monkeypatch.setenv("COMET_KIWI_MODEL", cached)
    monkeypatch.syspath_prepend(str(USER_DIR.parent / "examples" / "rewards"))
    import comet_kiwi

    assert comet_kiwi.score.needs_references is False
    scores = comet_kiwi.score(["ein Hund läuft im Park .", "das Wetter ist schön ."], None,
                              ["a dog runs in the park .", "a dog runs in the park ."], None)
    assert len(scores) == 2 and all(isinstance(x, float) for x in scores) and scores[0] > scores[1]
