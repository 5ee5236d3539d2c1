"""Every command the documentation shows is checked, so that none can rot unnoticed (issue #29).

The commands are read from README.md, examples/**/README.md and docs/RESULTS.md (fenced bash blocks, indented
code blocks, and inline `code` that starts like a command: python scripts/..., fairseq-* DATA, bash *.sh, make,
pip, ...) and from the usage lines in the comments of examples/**/*.sh and *.yaml.  Each one must be in the table
COMMANDS below, which says what is done with it:

- ``run``: run here, on tiny data, by the named test of this file (the test says how it is adapted);
- ``elsewhere``: run on tiny data by the named test of another file (which must exist);
- ``parse``: not runnable on tiny data, for the reason given (Multi30k, hours, a GPU, ...);
- ``script``: ``bash examples/...sh`` with its settings: dry-run here (slow) with stand-ins for fairseq and the
  project's scripts, and every command it would run is parse-checked; not run for real, for the reason given;
- ``other``: not something a parser can check (make, pip, source, pytest runs, shell loops of a measurement);
  what can be checked is (the make target exists, the files named exist).

Every command of the first three kinds is also parse-checked (test_documented_commands_parse): its entry point
exists and its parser accepts its flags (fairseq's own parsers with the plugin loaded for fairseq-*, hydra's
composition for fairseq-hydra-train, the script's own argparse parser for scripts/*.py: a renamed flag, a removed
script or a removed choice fails).  A documented command missing from COMMANDS fails, so a new one cannot go in
unchecked; so does an entry of COMMANDS the documentation no longer shows.
"""

import argparse
import contextlib
import io
import json
import re
import runpy
import shlex
import sys
from pathlib import Path
from typing import Callable, NamedTuple, Optional
from unittest import mock

import pytest
from helpers import REPO, USER_DIR, load_script, run

# -- reading the commands out of the documentation -------------------------------------------------------------------

MARKDOWN = ["README.md", "docs/RESULTS.md", *sorted(str(p.relative_to(REPO)) for p in REPO.glob("examples/**/*.md"))]
COMMENTED = sorted(str(p.relative_to(REPO)) for pattern in ("examples/**/*.sh", "examples/**/*.yaml")
                   for p in REPO.glob(pattern))
_ENV = r"(?:[A-Z_][A-Z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S+)\s+)*"
# what a command starts with (a bare `fairseq-train` or `--flag` in prose is a mention, not a command)
COMMAND = re.compile(_ENV + r"(?:python3?\s+(?:\S+\.py|-c|-m)\b|bash\s+\S+\.sh\b|fairseq-[a-z-]+\s+[^-\s]"
                     r"|fairseq-hydra-train\s|make\s+[a-z]|source\s|pip\s|for\s)")
SHELL_FENCES = {"bash", "sh", "shell"}


def _logical_lines(lines):
    """(line number, text) of each logical line: backslash continuations joined, whitespace collapsed."""
    out, start, parts = [], None, []
    for number, raw in lines:
        line = raw.strip()
        if start is None:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        out.append((start, " ".join(" ".join(parts).split())))
        start, parts = None, []
    if parts:
        out.append((start, " ".join(" ".join(parts).split())))
    return out


def _without_comment(line):
    """The line up to a '#' that starts a shell comment (outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _commands_of_lines(lines, keep_all):
    """The commands of shell lines: comments dropped, `a && b` split, a for loop's body kept (its `for ... do` and
    `done` lines are syntax) without a trailing `&`; with ``keep_all`` False only lines that look like commands."""
    found = []
    for number, line in _logical_lines(lines):
        line = _without_comment(line)
        if re.match(r"(for\s.*;\s*do|done\b)", line) and not re.search(r"\bdo\s+\S", line):
            continue
        for part in re.split(r"\s&&\s", line):
            part = re.sub(r"\s*&$", "", part.strip())
            if part and (keep_all or COMMAND.match(part)):
                found.append((number, part))
    return found


def markdown_commands(text):
    """(line, command) of a markdown file: fenced shell blocks, indented blocks and inline code spans."""
    lines = text.splitlines()
    found, outside, fence = [], [], None
    for number, line in enumerate(lines, 1):
        opening = re.match(r"^```(\w*)\s*$", line)
        if fence is None and opening:
            fence = (opening.group(1), [])
        elif fence is not None and line.startswith("```"):
            if fence[0] in SHELL_FENCES:
                found += _commands_of_lines(fence[1], keep_all=True)
            fence = None
            outside.append((number, ""))
        elif fence is not None:
            fence[1].append((number, line))
        else:
            outside.append((number, line))
    indented, prose = [], []
    for number, line in outside:  # a code block indented by 4 spaces after a blank line
        in_block = line.startswith("    ") and (indented and indented[-1][0] == number - 1 or
                                               (prose and prose[-1][1].strip() == ""))
        (indented if in_block else prose).append((number, line))
    found += _commands_of_lines(indented, keep_all=False)
    text = "\n".join(line for _, line in prose)
    first = [n for n, _ in prose]
    for match in re.finditer(r"`([^`]+)`", text):
        span = " ".join(match.group(1).split())
        if COMMAND.match(span):
            found.append((first[text.count("\n", 0, match.start())], span))
    return found


def comment_commands(text):
    """(line, command) of the usage lines in a script's or config's comments (`#   bash examples/...`)."""
    # a usage line is indented inside its comment (`#   cmd`); prose starts one space after the '#'
    comments = [(n, line.lstrip()[1:]) for n, line in enumerate(text.splitlines(), 1)
                if re.match(r"\s*#\s\s", line)]
    runs, current = [], []
    for number, line in comments:  # consecutive comment lines form a block; continuations join inside one
        if current and current[-1][0] != number - 1:
            runs.append(current)
            current = []
        current.append((number, line))
    runs.append(current)
    return [found for block in runs for found in _commands_of_lines(block, keep_all=False)]


def documented_commands():
    """{command: ["file:line", ...]} of every documented command."""
    where = {}
    for name in MARKDOWN + COMMENTED:
        text = (REPO / name).read_text()
        for number, command in (markdown_commands(text) if name.endswith(".md") else comment_commands(text)):
            where.setdefault(command, []).append(f"{name}:{number}")
    return where


# -- the table -------------------------------------------------------------------------------------------------------


class Doc(NamedTuple):
    kind: str  # run, elsewhere, parse, script, other
    why: str  # run / elsewhere: how it is adapted; the others: why it is not run here
    test: str = ""  # run: a test of this file; elsewhere: tests/FILE.py::TEST
    fill: Optional[dict] = None  # parse check: text -> what stands there (placeholders of the docs)
    check: Optional[Callable] = None  # other: a check of what can be checked
    after: str = ""  # script: a documented command whose results it starts from, dry-run first in its folder
    steps: Optional[list] = None  # script: what it starts, where not its script's SCRIPT_STEPS


def ran(test, how, fill=None):
    return Doc("run", how, test, fill)


def elsewhere(test, how, fill=None):
    return Doc("elsewhere", how, test, fill)


def parse(why, fill=None):
    return Doc("parse", why, fill=fill)


def script(why, after="", steps=None):
    return Doc("script", why, after=after, steps=steps)


def other(why, check=None):
    return Doc("other", why, check=check)


COMMANDS = {}  # filled below, after the constants the run tests share


# -- parse checks ----------------------------------------------------------------------------------------------------

FAIRSEQ_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                   "fairseq-interactive": "get_interactive_generation_parser",
                   "fairseq-validate": "get_validation_parser", "fairseq-preprocess": "get_preprocessing_parser"}
REDIRECTIONS = {">", ">>", "<", "2>", "&>"}
# the settings a synthetic configuration of benchmark.py may leave unset: the arch's own layers
OPTIONAL_WORKER_SETTINGS = {"layers"}


def split_command(command, fill=None):
    """(environment, argv, {redirection: target}) of a documented command, its placeholders filled."""
    for text, value in (fill or {}).items():
        assert text in command, f"the fill {text!r} is not in the command any more: {command}"
        command = command.replace(text, value)
    command = command.replace("$PWD", str(REPO))
    tokens, env, redirect = shlex.split(command), {}, {}
    while tokens and re.match(r"[A-Z_][A-Z0-9_]*=", tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
    argv = []
    while tokens:
        token = tokens.pop(0)
        if token in REDIRECTIONS:
            redirect[token] = tokens.pop(0)
        elif token not in ("...", "2>&1"):  # "..." elides what the docs leave out
            argv.append(token)
    return env, argv, redirect


@contextlib.contextmanager
def _stderr_as_error(what):
    """A SystemExit (argparse's error) becomes an AssertionError naming ``what`` and the parser's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            yield
    except SystemExit as exit_:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise AssertionError(f"{what}: exit {exit_.code}: {lines[-1] if lines else ''}") from None


def _plugin_dir(args, cwd):
    """--user-dir given relative to ``cwd`` (or through a link) as the plugin's own path: fairseq refuses a second
    path for a module it has imported."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == "--user-dir" and (cwd / out[i + 1]).resolve() == USER_DIR.resolve():
            out[i + 1] = str(USER_DIR)
    return out


def check_fairseq(program, args, cwd=REPO):
    from fairseq import options

    assert program in FAIRSEQ_PARSERS, f"{program}: not a fairseq command this test knows"
    parser = getattr(options, FAIRSEQ_PARSERS[program])()
    with _stderr_as_error(program):
        if program == "fairseq-preprocess":
            parser.parse_args(args)
        else:
            options.parse_args_and_arch(parser, input_args=_plugin_dir(args, cwd))


_HYDRA = {}


def check_hydra(args, cwd=REPO):
    """fairseq-hydra-train's configuration composed as it composes it: the config file, then the overrides (a key
    that is in neither the file nor fairseq's configs is refused by hydra)."""
    from hydra import compose, initialize_config_dir

    options = argparse.ArgumentParser()
    options.add_argument("--config-dir", required=True)
    options.add_argument("--config-name", required=True)
    with _stderr_as_error("fairseq-hydra-train"):
        known, overrides = options.parse_known_args(args)
    if not _HYDRA:  # fairseq's configs and the plugin's, once per process
        from fairseq.dataclass.initialize import hydra_init
        from fairseq.utils import import_user_module

        hydra_init("config")
        import_user_module(argparse.Namespace(user_dir=str(USER_DIR)))
        _HYDRA["ready"] = True
    with initialize_config_dir(config_dir=str((cwd / known.config_dir).resolve()), version_base=None):
        try:
            cfg = compose(config_name=known.config_name, overrides=overrides)
        except Exception as error:  # hydra's own errors name the override
            raise AssertionError(f"fairseq-hydra-train: {type(error).__name__}: {error}") from None
    assert cfg.task._name and cfg.model._name and cfg.criterion._name


class _Parsed(Exception):
    pass


def check_script(path, args, cwd=REPO):
    """The script exists and its argparse parser accepts ``args``: it runs until its first parse_args returns
    (benchmark.py: its whole parse_args and configurations, which derive settings from the options)."""
    script = cwd / path
    assert script.is_file(), f"{path}: no such script"
    if script.name == "benchmark.py" and "--data" not in args:
        return check_benchmark(args)
    _first_parse(lambda: runpy.run_path(str(script), run_name="__main__"), [str(script), *args], path)


def _first_parse(start, argv, what):
    """Runs ``start`` with ``argv`` as sys.argv until its first ArgumentParser.parse_args returns."""
    original = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parsed), mock.patch.object(sys, "argv", argv), \
            _stderr_as_error(what):
        try:
            start()
        except _Parsed:
            return
    raise AssertionError(f"{what}: returned without parsing a command line")


def check_sacrebleu(args):
    from sacrebleu import sacrebleu

    _first_parse(sacrebleu.parse_args, ["sacrebleu", *args], "sacrebleu")


def check_benchmark(args):
    from smallvocab_tools.bench import benchmark as bench

    with _stderr_as_error("scripts/benchmark.py"):
        options = bench.parse_args(args)
    for cfg in bench.configurations(options):
        unset = {key for key, value in cfg.items() if value is None} - OPTIONAL_WORKER_SETTINGS
        if cfg["arch"] != "lstm_smallvocab":
            unset -= {"d"}  # a fairseq arch's own d
        assert not unset, f"scripts/benchmark.py {' '.join(args)}: the worker would get {sorted(unset)} unset"


def check_argv(argv, cwd=REPO):
    """The parse check of one command line (argv, no environment or redirections)."""
    program = argv[0]
    if program == "fairseq-hydra-train":
        check_hydra(argv[1:], cwd)
    elif program.startswith("fairseq-"):
        check_fairseq(program, argv[1:], cwd)
    elif program == "sacrebleu":
        check_sacrebleu(argv[1:])
    elif program == "make":
        check_make({}, argv)
    elif program in ("python", "python3") and argv[1] == "-c":
        compile(argv[2], "python -c", "exec")
    elif program in ("python", "python3") and argv[1].endswith(".py"):
        check_script(argv[1], argv[2:], cwd)
    else:
        raise AssertionError(f"no parse check for {program}")



# -- the table: every documented command ------------------------------------------------------------------------------

MULTI30K = "needs Multi30k (../shared/data/multi30k or a download; not in the repository)"
MULTI30K_TRAIN = "trains on Multi30k (not in the repository) for minutes to hours"
FULL_SIZE = ("a measurement at its full sizes (minutes to hours of CPU); tests/test_benchmark.py runs the same options "
             "at tiny sizes")
MULTI30K_BENCH = ("a measurement on Multi30k's batches (not in the repository) and their exported lists; "
                  "tests/test_benchmark.py::test_benchmark_on_real_batches_of_a_corpus runs --data on tiny data")
GPU = "needs CUDA"
CAPTIONS_FULL = ("the full synthetic captioning set (10,000 images, 4096-d features: minutes to hours); the tiny set "
                 "runs through the same commands in tests/test_caption_cli.py")
KIROS = ("needs Kiros et al.'s f8k / coco files (not on this machine); tests/test_caption_data.py converts files of "
         "their layout")
WMT = ("a sketch for your own corpus and Transformer checkpoint (data-bin/wmt.en-de); "
       "tests/test_stock_transformer.py runs these steps on tiny data")
SCRIPT = ("runs its fairseq commands for minutes to hours on Multi30k (not in the repository): dry-run here "
          "(test_example_scripts_dry_run)")
SCRIPT_CAPTIONS = ("runs on the full synthetic captioning set for minutes to hours: dry-run here "
                   "(test_example_scripts_dry_run)")

# a tuning variant of the Transformer recipe (CE_FROM: it starts from the recipe's CE runs), and the variants' table
TUNING_RUN = script(
    SCRIPT + "; tests/test_transformer_rl_recipe.py runs CE_FROM end to end on tiny data",
    after="bash examples/translation/run_transformer_rl_multi30k.sh",
    # each softmax's REINFORCE run with its greedy decodes (CE linked, not run), then the table
    steps=[*["fairseq-train", *["fairseq-generate", "sacrebleu"] * 2] * 2, "scripts/rl_logs.py"])
RL_RECIPE_WHY = SCRIPT + "; tests/test_transformer_rl_recipe.py runs it end to end on tiny data"
SEED3_RECIPE = "SEEDS=3 CONTROLS= bash examples/translation/run_transformer_rl_multi30k.sh"
TUNING_RUN_SEED3 = script(TUNING_RUN.why, after=SEED3_RECIPE, steps=TUNING_RUN.steps)  # from seed 3's CE runs
TUNING_TABLE = elsewhere("tests/test_analysis_scripts.py::test_rl_logs_tuning_compares_recipe_folders",
                         "two recipe folders written by the test (the second's CE run a link to the first's)")

# the commands run by this file's tests (their text is the documented one, adapted by ``adapt``)
VP_EXPORT = ("python scripts/export_candidates.py --predictor checkpoints/vp-multi30k.en-de/checkpoint_best.pt "
             "--splits train valid test --k 500 --out-dir checkpoints/vp-multi30k.en-de/candidates")
MT_CE = ("fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab -s "
         "en -t de --candidates-dir checkpoints/vp-multi30k.en-de/candidates --small-vocab-size 500 --arch "
         "lstm_smallvocab --criterion cross_entropy --optimizer sgd --momentum 0.75 --lr 1.0 --weight-decay "
         "1e-6 --clip-norm 1.0 --batch-size 128 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 "
         "--lr-patience 0 --eval-bleu --eval-bleu-args '{\"beam\": 1, \"max_len_a\": 1.5, \"max_len_b\": 10}' "
         "--best-checkpoint-metric bleu --maximize-best-checkpoint-metric --max-epoch 15 --save-dir "
         "checkpoints/mt-multi30k.en-de.k500 --no-epoch-checkpoints --cpu")
MT_GENERATE = ("fairseq-generate data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
               "-s en -t de --candidates-dir checkpoints/vp-multi30k.en-de/candidates --small-vocab-size 500 "
               "--path checkpoints/mt-multi30k.en-de.k500/checkpoint_best.pt --gen-subset test --beam 1 "
               "--batch-size 128 --scoring sacrebleu --cpu")
MT_INTERACTIVE = ("fairseq-interactive data-bin/multi30k.en-de --user-dir fairseq_smallvocab "
                  "--task translation_smallvocab -s en -t de --small-vocab-size 500 "
                  "--path checkpoints/mt-multi30k.en-de.k500/checkpoint_best.pt --beam 5 --cpu < input.en")
MT_REINFORCE = ("fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
                "-s en -t de --candidates-dir checkpoints/vp-multi30k.en-de/candidates --small-vocab-size 500 "
                "--arch lstm_smallvocab --criterion reinforce_gleu --rl-lambda 0.005 --rl-baseline learned "
                "--max-sample-len 100 --sample-len-ratio 1.5 "
                "--finetune-from-model checkpoints/mt-multi30k.en-de.k500/checkpoint_best.pt --optimizer sgd "
                "--lr 0.01 --clip-norm 1.0 --batch-size 128 --eval-bleu --eval-bleu-args '{\"beam\": 1}' "
                "--best-checkpoint-metric bleu --maximize-best-checkpoint-metric --max-epoch 3 "
                "--save-dir checkpoints/rl-multi30k.en-de.k500 --cpu")
QUICK = "python scripts/benchmark.py --quick"
USER_DIR_OF_AN_INSTALL = ("python -c \"import fairseq_smallvocab, os; "
                          "print(os.path.dirname(fairseq_smallvocab.__file__))\"")
PLOTS = "python scripts/plot_benchmark.py docs/bench_synthetic.json --out-dir docs --prefix bench"
PLOTS_README = "python scripts/plot_benchmark.py bench.json --out-dir plots"
REWARDS = "python scripts/bench_rewards.py"
REWARDS_GLEU = "python scripts/bench_rewards.py --rewards gleu --samples 1 --max-len 50 --repeats 200"
REWARDS_ALL = "python scripts/bench_rewards.py --batch 128 --samples 4 --max-len 30"
OUTPUT_LAYER = ("python scripts/bench_output_layer.py --vocab-sizes 32000 128000 --batch 32 128 --len 30 --d 512 "
                "--repeat 3")
TAIL = "python scripts/tail_stats.py demo/raw/train.tgt ../shared/data/multi30k/train.de"
CAPTIONS_RAW = "python scripts/make_synthetic_captions.py --out data/captions-raw"
CAPTIONS_BIN = "python scripts/prepare_captions.py --raw-dir data/captions-raw --dest data-bin/captions"
CAPTIONS_EXPORT = ("python scripts/export_candidates.py --predictor checkpoints/vp-captions/checkpoint_best.pt "
                   "--data data-bin/captions --source-features data-bin/captions --splits train valid test --k 500 "
                   "--out-dir checkpoints/vp-captions/candidates")

IN_PROCESS = "test_scripts_run_in_process_on_tiny_settings"
RECIPE = "test_translation_recipe_runs_on_tiny_data"
HYDRA_TEST = "tests/test_hydra.py::test_hydra_recipes_train_the_predictor_ce_and_reinforce"
HYDRA_HOW = "the same config on tiny_bin (src/tgt), 1 epoch, small d"
CAPTION_CLI = "tests/test_caption_cli.py::test_train_generate_and_multi_reference_bleu"
DEMO = "tests/test_demo.py::test_demo_script_end_to_end_small"


def _make_target(command):
    check_make(*split_command(command)[:2])


def check_make(env, argv):
    """`make TARGET [VAR=VALUE]` (after environment settings): the Makefile has the target, and each variable is one
    the Makefile or the tests read."""
    command = " ".join(argv)
    makefile = (REPO / "Makefile").read_text()
    for target in [a for a in argv[1:] if "=" not in a]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no target {target}"
    readers = makefile + (REPO / "tests" / "helpers.py").read_text()
    for name in [*env, *(a.partition("=")[0] for a in argv[1:] if "=" in a)]:
        assert name in readers, f"{command}: nothing reads {name}"


# test files that records of past runs name and that were split since: the files that hold their tests now
SPLIT_SINCE = {"tests/test_reinforce.py": ["tests/test_reinforce_gradients.py", "tests/test_reinforce_sampling.py",
                                           "tests/test_reinforce_baselines.py", "tests/test_reinforce_config.py",
                                           "tests/test_reinforce_cli.py"]}  # split by concern (#30)


def _files_named(command):
    """The tests/ paths a command names exist (for a file split since, its parts)."""
    for token in shlex.split(command):
        if token.startswith("tests/"):
            for path in SPLIT_SINCE.get(token, [token]):
                assert (REPO / path).exists(), f"{command}: {path} does not exist"


GPU_CHECKS = REPO / "scripts" / "gpu_checks.sh"


def _gpu_parts():
    """The parts scripts/gpu_checks.sh knows (its PARTS array)."""
    return re.search(r"^PARTS=\(([^)]*)\)", GPU_CHECKS.read_text(), re.M).group(1).split()


def _gpu_checks(command):
    """A verb the script has, and parts it knows."""
    argv = shlex.split(command)
    assert argv[:2] == ["bash", "scripts/gpu_checks.sh"] and argv[2] in ("wheels", "run"), command
    assert set(argv[3:]) <= set(_gpu_parts()), f"{command}: parts it does not know (it has {_gpu_parts()})"


def _setup_py(command):
    assert (REPO / "setup.py").is_file()


def _venv(command):
    assert "VENV ?= .venv" in (REPO / "Makefile").read_text()  # make setup writes .venv/bin/activate


def _ce_proc(command):
    # the measurement script it runs is written out in docs/RESULTS.md itself
    assert "root = sys.argv[1]; k = int(sys.argv[2]); mode = sys.argv[3]" in (REPO / "docs" / "RESULTS.md").read_text()


COMMANDS.update({
    # README.md: set-up, tests, demo
    "make demo": elsewhere(DEMO, "scripts/demo.sh (what make demo runs after make setup) with tiny DEMO_* sizes"),
    "make test": other("the test suite itself (this test is part of it)", _make_target),
    "make setup": other("builds .venv (minutes; tests/test_setup.py tests scripts/setup_venv.py)", _make_target),
    "make setup SYSTEM_SITE_PACKAGES=1": other("builds .venv (minutes)", _make_target),
    "make lint": other("ruff over the repository (CI runs it)", _make_target),
    "make clean-demo": other("removes demo/", _make_target),
    "make test-fast": other("the test suite's fast part (this test is part of it)", _make_target),
    "SMALLVOCAB_TEST_FORK=0 make test": other("the test suite itself", _make_target),
    "pip install --no-deps -e /path/to/fairseq-smallvocab": other("installs into your environment", _setup_py),
    "pip install sentencepiece sacrebleu": other("installs into your environment"),
    "pip install": other("a mention of pip install in the set-up notes, not a command"),
    "source .venv/bin/activate": other("activates the environment the tests run in", _venv),
    USER_DIR_OF_AN_INSTALL: ran(IN_PROCESS, "as is"),
    # README.md: the sketches of the plugin's use
    "fairseq-train DATA --user-dir fairseq_smallvocab ...": parse(
        "a sketch (DATA, ...)", {"fairseq_smallvocab ...": "fairseq_smallvocab --arch lstm_smallvocab"}),
    "fairseq-generate DATA --user-dir fairseq_smallvocab --path ckpt.pt ...": parse("a sketch (DATA, ...)"),
    "fairseq-train DATA --user-dir /path/to/fairseq-smallvocab/fairseq_smallvocab ...": parse(
        "a sketch (DATA, ...)", {"/path/to/fairseq-smallvocab/fairseq_smallvocab ...":
                                 f"{USER_DIR} --arch lstm_smallvocab"}),
    "fairseq-generate ... --post-process sentencepiece": parse(
        "a fragment (the flag added to a decoding command)",
        {"fairseq-generate ...": "fairseq-generate DATA --user-dir fairseq_smallvocab --path ckpt.pt"}),
    "... --eval-bleu --eval-bleu-args '{\"beam\": 1}' --best-checkpoint-metric bleu --maximize-best-checkpoint-metric "
    "--lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0": elsewhere(
        "tests/test_translation_smallvocab.py::test_validation_bleu_inside_the_small_vocabulary_selects_checkpoints",
        "these flags added to a tiny translation_smallvocab training",
        {"... --eval-bleu": "fairseq-train DATA --user-dir fairseq_smallvocab --task translation_smallvocab "
                            "--arch lstm_smallvocab --eval-bleu"}),
    # README.md: your own Transformer
    "fairseq-train data-bin/wmt.en-de --user-dir fairseq_smallvocab --task vocab_prediction --arch vocab_predictor "
    "--criterion vocab_prediction_bce --optimizer adagrad --lr 0.08 --batch-size 128 --max-epoch 10 "
    "--save-dir checkpoints/vp": parse(WMT),
    "fairseq-train data-bin/wmt.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--vocab-predictor checkpoints/vp/checkpoint_best.pt --arch transformer --share-all-embeddings "
    "--finetune-from-model checkpoints/transformer/checkpoint_best.pt --criterion label_smoothed_cross_entropy "
    "--label-smoothing 0.1 --optimizer adam --lr 1e-4 --max-tokens 4096 "
    "--save-dir checkpoints/transformer-small": parse(WMT),
    "fairseq-train data-bin/wmt.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--vocab-predictor checkpoints/vp/checkpoint_best.pt --arch transformer --share-all-embeddings "
    "--finetune-from-model checkpoints/transformer-small/checkpoint_best.pt --criterion reinforce_gleu "
    "--rl-lambda 0.005 --rl-samples 4 --rl-baseline loo --max-sample-len 100 --sample-len-ratio 1.5 "
    "--optimizer adam --lr 3e-5 --clip-norm 1.0 --batch-size 64 --max-update 1000 --validate-interval-updates 50 "
    "--save-interval-updates 50 --eval-bleu --best-checkpoint-metric bleu --maximize-best-checkpoint-metric "
    "--save-dir checkpoints/transformer-rl": parse(WMT),
    "fairseq-generate data-bin/wmt.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--path checkpoints/transformer-rl/checkpoint_best.pt --beam 5 --gen-subset test": parse(WMT),
    "fairseq-generate data-bin/wmt.en-de --user-dir fairseq_smallvocab --task translation "
    "--path checkpoints/transformer-rl/checkpoint_best.pt --beam 5 --gen-subset test": parse(WMT),
    # README.md: translation, REINFORCE, captioning
    "fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--arch lstm_smallvocab --criterion cross_entropy --vocab-predictor checkpoints/vp/checkpoint_best.pt "
    "--small-vocab-size 500 --optimizer sgd --momentum 0.75 --lr 1.0 --clip-norm 1.0 --weight-decay 1e-6 "
    "--batch-size 128 --save-dir checkpoints/mt-small --cpu": elsewhere(
        "tests/test_translation_smallvocab.py::test_fairseq_train_with_small_vocabulary",
        "tiny_bin, the predictor fixture, small K and d"),
    "fairseq-generate data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--path checkpoints/mt-small/checkpoint_best.pt --vocab-predictor checkpoints/vp/checkpoint_best.pt "
    "--small-vocab-size 500 --gen-subset test --beam 5 --scoring sacrebleu --cpu": elsewhere(
        "tests/test_decoding.py::test_generate_finds_the_predictor_in_the_checkpoint_and_k_is_a_decoding_option",
        "tiny_bin, the predictor fixture, small K"),
    "fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab "
    "--arch lstm_smallvocab --vocab-predictor checkpoints/vp/checkpoint_best.pt --small-vocab-size 500 "
    "--criterion reinforce_gleu --rl-lambda 0.005 --rl-baseline learned "
    "--finetune-from-model checkpoints/mt-small/checkpoint_best.pt --optimizer sgd --lr 0.01 --clip-norm 1.0 "
    "--batch-size 128 --save-dir checkpoints/rl-small --cpu": elsewhere(
        "tests/test_reinforce_cli.py::test_distributed_data_parallel_on_cpu_with_gloo_validates_as_one_process",
        "its single-process run: tiny_bin, the predictor fixture, small K and d"),
    "python scripts/prepare_captions.py --raw-dir data/captions-raw --dest data-bin/captions": parse(CAPTIONS_FULL),
    "fairseq-train data-bin/captions --user-dir fairseq_smallvocab --task captioning_smallvocab "
    "--arch lstm_caption_smallvocab --criterion cross_entropy "
    "--vocab-predictor checkpoints/vp-captions/checkpoint_best.pt --small-vocab-size 500 --optimizer sgd "
    "--momentum 0.75 --lr 1.0 --clip-norm 1.0 --batch-size 128 --save-dir checkpoints/cap-small --cpu": elsewhere(
        "tests/conftest.py::cap_model", "the tiny captioning set, the cap_predictor fixture, K = 40, adam"),
    "fairseq-generate data-bin/captions --user-dir fairseq_smallvocab --task captioning_smallvocab "
    "--path checkpoints/cap-small/checkpoint_best.pt --small-vocab-size 500 --gen-subset test "
    "--one-caption-per-image --max-len-b 50 --cpu > gen.txt": elsewhere(CAPTION_CLI, "the tiny set, K = 40"),
    "python scripts/caption_bleu.py --data data-bin/captions --split test gen.txt": elsewhere(
        CAPTION_CLI, "on the tiny set's fairseq-generate output"),
    # README.md: the vocabulary predictor
    "fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task vocab_prediction "
    "--arch vocab_predictor --criterion vocab_prediction_bce --recall-at 100,200,500,1000 --optimizer adagrad "
    "--lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 --lr-scheduler reduce_lr_on_plateau "
    "--lr-shrink 0.5 --max-epoch 20 --validate-interval-updates 113 --save-interval-updates 113 "
    "--keep-interval-updates 1 --best-checkpoint-metric recall@500 "
    "--maximize-best-checkpoint-metric --save-dir checkpoints/vp --cpu": parse(MULTI30K_TRAIN),
    "python scripts/export_candidates.py --predictor checkpoints/vp/checkpoint_best.pt --splits train valid test "
    "--k 500 --out-dir checkpoints/vp/candidates": elsewhere(
        "tests/test_vocab_predictor.py::test_export_and_read_round_trip", "the predictor fixture, K = 50"),
    "python scripts/recall_curve.py --run \"En-De=checkpoints/vp/checkpoint_best.pt\" --png recall.png": elsewhere(
        DEMO, "demo.sh's recall_curve.py --run ... --png on the demo's tiny predictor"),
    # README.md: benchmarks
    QUICK: ran("test_benchmark_quick_runs_end_to_end", "--quick with |V| = 300, K = 40, batch 4, 1 step, REINFORCE "
                                                      "small only (d and the rest left to --quick)"),
    "python scripts/benchmark.py --json bench.json --markdown bench.md": parse(FULL_SIZE),
    PLOTS_README: ran(IN_PROCESS, "bench.json: docs/bench_synthetic.json (what the command before writes); "
                                  "--out-dir a temporary folder"),
    REWARDS: ran(IN_PROCESS, "--batch 8 --repeats 1 --vocab-size 300 --threads 1"),
    "python scripts/prepare_multi30k.py --min-count 1 --out-dir data-bin/all": parse(MULTI30K),
    "DATA=data-bin/all/multi30k.en-de SAVE=checkpoints/vp-all K=1000 bash examples/vocab_predictor/run_multi30k.sh":
        script(SCRIPT),
    "python scripts/export_candidates.py --predictor checkpoints/vp-all/checkpoint_best.pt --splits train "
    "--k 1000 --out-dir checkpoints/vp-all/candidates": parse(MULTI30K),
    "python scripts/benchmark.py --modes ce reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-all/candidates --k 1000 --steps 8 --epoch-sentences 29000": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes ce reinforce --data data-bin/captions --captions "
    "--candidates-dir checkpoints/vp-captions/candidates --k 500 --steps 8 --epoch-sentences 50000": elsewhere(
        "tests/test_caption_cli.py::test_benchmark_on_a_captioning_folder", "the tiny captioning set, K = 40, d = 8"),
    "python scripts/benchmark.py --arch transformer --vocab-sizes 32000 64000 128000 --k 1000 --k-sweep --batch 32 "
    "--max-len 30 --rounds 3 --json docs/bench_transformer.json": parse(FULL_SIZE),
    "python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-all/candidates --k 1000 --no-full --steps 30 "
    "--ab fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS=1000000000,32": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-all/candidates --k 1000 --sample-limit flat --max-sample-len 99 --floor": parse(
        MULTI30K_BENCH),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 "
    "--ab \"fairseq_smallvocab.reinforce.capture.CAPTURE='off','cuda-graphs'\"": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 --phases": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 --phases "
    "--set \"fairseq_smallvocab.reinforce.capture.CAPTURE='off'\"": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 128000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --max-len 30 --largest-batch": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 128000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 --floor": parse(GPU),
    "python scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 --k 1000 --k-sweep --batch 128 "
    "--max-len 50 --ab \"fairseq_smallvocab.reinforce.graphed_pass.MODE='off','cuda-graphs'\"": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 "
    "--ab \"fairseq_smallvocab.reinforce.capture.COMPILE='off','fuse'\"": parse(GPU),
    "bash scripts/gpu_checks.sh wheels": other(
        "downloads 21 MB of wheels; test_the_gpu_script_s_commands_parse_and_it_carries_make_setup_s_versions "
        "dry-runs it", _gpu_checks),
    "bash scripts/gpu_checks.sh run tests graphed lstm": other(
        "needs CUDA; test_the_gpu_script_s_commands_parse_and_it_carries_make_setup_s_versions dry-runs it",
        _gpu_checks),
    "python scripts/rare_words.py --dict DATA/dict.de.txt --output \"small=small/generate-test.txt\" "
    "--output \"full=full/generate-test.txt\" --output \"reference=DATA/raw/test.de\" --png rare_words.png": elsewhere(
        "tests/test_analysis_scripts.py::test_rare_words_shares_per_decile", "a 20-word dictionary and outputs"),
    # README.md: data preparation
    "python scripts/make_synthetic_corpus.py --out demo/raw --tgt-vocab-size 24000 --train-size 50000": elsewhere(
        "tests/test_synthetic.py::test_cli_refuses_existing_output_and_bad_size",
        "--tgt-vocab-size 300, 300 sentences"),
    "python scripts/prepare_data.py --raw-dir demo/raw --src src --tgt tgt --dest demo/data-bin --min-count 1":
        elsewhere("tests/test_prepare_data.py::test_cli_prints_statistics", "the tiny corpus"),
    "python scripts/prepare_multi30k.py --pairs en-de en-fr": parse(MULTI30K),
    "python scripts/prepare_multi30k.py --source DIR --pairs en-de": parse(MULTI30K),
    "python scripts/prepare_multi30k.py --download --pairs en-de": elsewhere(
        "tests/test_prepare_data.py::test_multi30k_download_path",
        "--download-url: a local stand-in for the dataset's repository (this machine has no network)"),
})

COMMANDS.update({
    # examples/vocab_predictor
    "python scripts/prepare_multi30k.py --pairs en-de": parse(MULTI30K),
    "fairseq-train data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task vocab_prediction "
    "--arch vocab_predictor --criterion vocab_prediction_bce --recall-at 100,200,500,1000 --label-smoothing 0.1 "
    "--optimizer adagrad --lr 0.08 --weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 "
    "--lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --max-epoch 20 --validate-interval-updates 113 "
    "--save-interval-updates 113 --keep-interval-updates 1 "
    "--best-checkpoint-metric recall@500 --maximize-best-checkpoint-metric --save-dir checkpoints/vp-multi30k.en-de "
    "--no-epoch-checkpoints --cpu": parse(MULTI30K_TRAIN),
    VP_EXPORT: ran(RECIPE, "the predictor fixture (tiny_bin), --k 60, a temporary --out-dir"),
    "python scripts/recall_curve.py --run \"En-De=checkpoints/vp-multi30k.en-de/checkpoint_best.pt\" "
    "[--run \"LABEL=OTHER.pt[@DATA]\" ...] --split valid --png docs/recall_multi30k_en_de.png": elsewhere(
        DEMO, "demo.sh's recall_curve.py --run ... --split test --png on the demo's tiny predictor",
        {" [--run \"LABEL=OTHER.pt[@DATA]\" ...]": ""}),
    # examples/translation
    MT_CE: ran(RECIPE, "tiny_bin (-s src -t tgt), the exported K = 60 lists, --small-vocab-size 50, 1 epoch, "
                       "--embed-dim 16, --num-workers 0, a temporary --save-dir"),
    MT_GENERATE: ran(RECIPE, "tiny_bin, the K = 60 lists, --small-vocab-size 50, the CE checkpoint just trained"),
    MT_INTERACTIVE: ran(RECIPE, "tiny_bin, --small-vocab-size 50, the CE checkpoint just trained (it names the "
                                "predictor of its lists), 4 test sources and an empty line on stdin"),
    MT_REINFORCE: ran(RECIPE, "as MT_CE, from the CE checkpoint just trained, 1 epoch"),
    "fairseq-train DATA ... --cpu --distributed-backend gloo --ddp-backend legacy_ddp "
    "--distributed-init-method tcp://127.0.0.1:29500 --distributed-world-size 2 --distributed-rank $r "
    "--distributed-no-spawn --device-id 0": elsewhere(
        "tests/test_reinforce_cli.py::test_distributed_data_parallel_on_cpu_with_gloo_validates_as_one_process",
        "two ranks on tiny_bin, a free port", {"DATA ...": "DATA --user-dir fairseq_smallvocab --arch lstm_smallvocab",
                                               "$r": "0"}),
    "K=500 bash examples/translation/run_transformer_multi30k.sh": script(SCRIPT),
    "K=500 CE=checkpoints/transformer-multi30k.en-de.k500/checkpoint_best.pt "
    "SAVE=checkpoints/rl-transformer-multi30k.en-de.k500 "
    "ARCH_ARGS=\"$(cat examples/translation/transformer_multi30k.args)\" "
    "bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    "bash examples/translation/run_multi30k.sh": script(SCRIPT),
    "bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    "bash examples/translation/run_transformer_multi30k.sh": script(SCRIPT),
    "bash examples/translation/run_transformer_rl_multi30k.sh": script(RL_RECIPE_WHY),
    SEED3_RECIPE: script(
        RL_RECIPE_WHY,
        # one seed x 2 softmaxes x (CE, REINFORCE), each decoded greedily and with beam 5 on 2 splits, then the table
        steps=[*["fairseq-train", *["fairseq-generate", "sacrebleu"] * 4] * 4, "scripts/rl_logs.py"]),
    "OUT=checkpoints/tune-transformer-rl/lambda0.05 CE_FROM=checkpoints/transformer-rl-multi30k.en-de SEEDS=1 "
    "LAMBDA=0.05 CONTROLS= BEAMS=1 bash examples/translation/run_transformer_rl_multi30k.sh": TUNING_RUN,
    "OUT=checkpoints/tune32/samples8 CE_FROM=checkpoints/transformer-rl-multi30k.en-de SEEDS=1 SAMPLES=8 "
    "CONTROLS= BEAMS=1 bash examples/translation/run_transformer_rl_multi30k.sh": TUNING_RUN,
    "OUT=checkpoints/tune32/ls0.1 CE_FROM=checkpoints/transformer-rl-multi30k.en-de SEEDS=3 LS=0.1 "
    "CONTROLS= BEAMS=1 bash examples/translation/run_transformer_rl_multi30k.sh": TUNING_RUN_SEED3,
    "python scripts/rl_logs.py tuning checkpoints/transformer-rl-multi30k.en-de checkpoints/tune32/* "
    "--data data-bin/multi30k.en-de": TUNING_TABLE,
    "python scripts/rl_logs.py recipe checkpoints/transformer-rl-multi30k.en-de --data data-bin/multi30k.en-de "
    "--tgt de --png docs/transformer_rl_multi30k_dev_bleu.png": elsewhere(
        "tests/test_transformer_rl_recipe.py::test_the_transformer_rl_recipe_runs_end_to_end_on_tiny_data",
        "the recipe's own folder on tiny data (its --png)"),
    "python scripts/rl_logs.py tuning checkpoints/transformer-rl-multi30k.en-de checkpoints/tune-transformer-rl/* "
    "--data data-bin/multi30k.en-de --markdown tuning.md": TUNING_TABLE,
    "python scripts/rl_logs.py recipe checkpoints/transformer-rl-multi30k.en-de --data data-bin/multi30k.en-de "
    "--tgt de --markdown table.md --png dev_bleu.png": elsewhere(
        "tests/test_transformer_rl_recipe.py::test_the_transformer_rl_recipe_runs_end_to_end_on_tiny_data",
        "the recipe's own folder on tiny data"),
    "python scripts/rl_logs.py recipe --runs docs/runs32/seed1.json --runs docs/runs32/seed2.json": elsewhere(
        "tests/test_analysis_scripts.py::test_the_seeds_tables_in_results_are_what_the_kept_records_give",
        "the records kept in docs/runs32"),
    "python scripts/rl_logs.py recipe --runs docs/runs32/seed1.json --runs docs/runs32/seed2.json "
    "--runs docs/runs32/seed3.json --png docs/transformer_rl_multi30k_dev_bleu.png": elsewhere(
        "tests/test_analysis_scripts.py::test_the_seeds_tables_in_results_are_what_the_kept_records_give",
        "the records kept in docs/runs32, the plot in a temporary folder"),
    "python scripts/rl_logs.py recipe --runs seed1/runs.json --runs seed2/runs.json --markdown table.md": elsewhere(
        "tests/test_analysis_scripts.py::test_rl_logs_recipe_joins_the_records_of_runs_made_elsewhere",
        "two seeds' records"),
    "bash examples/vocab_predictor/run_multi30k.sh": script(SCRIPT),
    # examples/captioning
    "bash examples/captioning/prepare_synthetic.sh": script(SCRIPT_CAPTIONS),
    "K=500 bash examples/captioning/run_synthetic.sh": script(SCRIPT_CAPTIONS),
    "K=500 EPOCHS=6 bash examples/captioning/run_synthetic.sh": script(SCRIPT_CAPTIONS),
    "K=0 EPOCHS=6 bash examples/captioning/run_synthetic.sh": script(SCRIPT_CAPTIONS),
    "DATA=data-bin/f8k VP=checkpoints/vp-f8k bash examples/captioning/prepare_synthetic.sh": script(KIROS),
    "DATA=data-bin/f8k CANDS=checkpoints/vp-f8k/candidates K=500 bash examples/captioning/run_synthetic.sh": script(
        KIROS),
    CAPTIONS_RAW: ran(IN_PROCESS, "the tiny set's sizes (tests/helpers.py TINY), a temporary --out"),
    CAPTIONS_BIN: elsewhere("tests/conftest.py::cap_bin", "prepare_captions(), all the script runs besides its "
                                                          "argparse (parse-checked here), on the tiny set; in-process "
                                                          "here it would start fairseq-preprocess"),
    "fairseq-train data-bin/captions --user-dir fairseq_smallvocab --task vocab_prediction "
    "--source-features data-bin/captions --arch vocab_predictor --criterion vocab_prediction_bce --recall-at 100,500 "
    "--optimizer adagrad --lr 0.08 --clip-norm 1.0 --batch-size 128 --max-epoch 5 --best-checkpoint-metric recall@500 "
    "--maximize-best-checkpoint-metric --save-dir checkpoints/vp-captions --cpu": elsewhere(
        "tests/conftest.py::cap_predictor", "the tiny captioning set, 2 epochs, --recall-at 50"),
    CAPTIONS_EXPORT: ran("test_captioning_export_runs_on_tiny_data", "the cap_predictor fixture and its tiny set, "
                                                                     "--k 40, a temporary --out-dir"),
    "fairseq-train data-bin/captions --user-dir fairseq_smallvocab --task captioning_smallvocab "
    "--candidates-dir checkpoints/vp-captions/candidates --small-vocab-size 500 --arch lstm_caption_smallvocab "
    "--criterion cross_entropy --one-caption-per-image --optimizer sgd --momentum 0.75 --lr 1.0 --clip-norm 1.0 "
    "--batch-size 128 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0 --eval-bleu "
    "--eval-bleu-args '{\"beam\": 1, \"max_len_b\": 50}' --best-checkpoint-metric bleu "
    "--maximize-best-checkpoint-metric --max-epoch 6 --save-dir checkpoints/cap-small --cpu": elsewhere(
        "tests/conftest.py::cap_model", "the tiny set, K = 40, adam, --eval-bleu with every caption"),
    "fairseq-train data-bin/captions --user-dir fairseq_smallvocab --task captioning_smallvocab "
    "--candidates-dir checkpoints/vp-captions/candidates --small-vocab-size 500 --arch lstm_caption_smallvocab "
    "--criterion reinforce_gleu --max-sample-len 50 --finetune-from-model checkpoints/cap-small/checkpoint_best.pt "
    "--optimizer sgd --lr 0.1 --clip-norm 1.0 --batch-size 128 --max-epoch 1 --save-dir checkpoints/cap-small-rl "
    "--cpu": elsewhere("tests/test_caption_cli.py::test_reinforce_through_fairseq_train", "the tiny set, K = 40"),
    "fairseq-generate data-bin/captions --user-dir fairseq_smallvocab --task captioning_smallvocab "
    "--candidates-dir checkpoints/vp-captions/candidates --small-vocab-size 500 "
    "--path checkpoints/cap-small-rl/checkpoint_best.pt --gen-subset test --one-caption-per-image --beam 1 "
    "--max-len-b 50 --cpu > gen.txt": elsewhere(CAPTION_CLI, "the tiny set, K = 40"),
    "python scripts/prepare_captions.py --kiros f8k --raw-dir ~/data/f8k --dest data-bin/f8k --min-count 5": parse(
        KIROS),
    "python scripts/prepare_captions.py --kiros coco --raw-dir ~/data/coco --dest data-bin/coco --min-count 5": parse(
        KIROS),
    # examples/hydra (README and the configs' usage lines)
    "fairseq-hydra-train --config-dir examples/hydra --config-name translation_ce "
    "common.user_dir=$PWD/fairseq_smallvocab ...": elsewhere(HYDRA_TEST, HYDRA_HOW),
    "fairseq-hydra-train --config-dir examples/hydra --config-name vocab_predictor "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de "
    "checkpoint.save_dir=$PWD/checkpoints/vp": elsewhere(HYDRA_TEST, HYDRA_HOW),
    "fairseq-hydra-train --config-dir examples/hydra --config-name translation_ce "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de "
    "task.vocab_predictor=$PWD/checkpoints/vp/checkpoint_best.pt checkpoint.save_dir=$PWD/checkpoints/mt": elsewhere(
        HYDRA_TEST, HYDRA_HOW),
    "fairseq-hydra-train --config-dir examples/hydra --config-name translation_reinforce "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de "
    "task.vocab_predictor=$PWD/checkpoints/vp/checkpoint_best.pt checkpoint.save_dir=$PWD/checkpoints/rl "
    "checkpoint.finetune_from_model=$PWD/checkpoints/mt/checkpoint_best.pt": elsewhere(HYDRA_TEST, HYDRA_HOW),
    "fairseq-hydra-train --config-dir examples/hydra --config-name vocab_predictor "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de": elsewhere(HYDRA_TEST, HYDRA_HOW),
    "fairseq-hydra-train --config-dir examples/hydra --config-name translation_ce "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de "
    "task.candidates_dir=$PWD/checkpoints/vp-multi30k.en-de/candidates": elsewhere(
        HYDRA_TEST, HYDRA_HOW + " (with task.vocab_predictor instead of exported lists)"),
    "fairseq-hydra-train --config-dir examples/hydra --config-name translation_reinforce "
    "common.user_dir=$PWD/fairseq_smallvocab task.data=$PWD/data-bin/multi30k.en-de "
    "task.candidates_dir=$PWD/checkpoints/vp-multi30k.en-de/candidates "
    "checkpoint.finetune_from_model=$PWD/checkpoints/mt/checkpoint_best.pt": elsewhere(
        HYDRA_TEST, HYDRA_HOW + " (with task.vocab_predictor instead of exported lists)"),
})

COMMANDS.update({
    # docs/RESULTS.md: the commands of its measurements
    "python scripts/benchmark.py --arch transformer --vocab-sizes 32000 64000 128000 --k 1000 --k-sweep --batch 32 "
    "--max-len 30 --modes ce reinforce decode --steps 2 --warmup 1 --rounds 2 --decode-sentences 8 --beams 1 5 "
    "--json docs/bench_transformer.json --markdown docs/bench_transformer.md": parse(FULL_SIZE),
    "python scripts/benchmark.py --modes ce reinforce --data data-bin/captions --captions "
    "--candidates-dir checkpoints/vp-captions/candidates --k 500 --steps 8 --warmup 2 --threads 1 "
    "--epoch-sentences 50000 --json docs/bench_captions.json": parse(CAPTIONS_FULL),
    "python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --sample-limit flat --max-sample-len 99 "
    "--phases --steps 4 --warmup 1": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --no-full --sample-limit flat "
    "--max-sample-len 99 --steps 30 --warmup 1 "
    "--ab fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS=1000000000,32": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes decode --vocab-sizes 24000 --k 1000 --no-full --decode-batches 64 --beams 5 "
    "--decode-len 30 --decode-sentences 640 --ab ...": parse(
        FULL_SIZE, {"--ab ...": "--ab fairseq_smallvocab.output.union_scorer.TRANSPOSED_MIN_ROWS=1000000000,32"}),
    "python scripts/benchmark.py --modes reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --sample-limit flat --max-sample-len 99 "
    "--steps 8 --warmup 1 --floor --no-full": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep --batch 32 --max-len 30 "
    "--modes ce reinforce --steps 4 --warmup 1 --floor": parse(FULL_SIZE),
    TAIL: ran(IN_PROCESS, "the tiny corpus's train.tgt and train.src for the two files"),
    "python scripts/prepare_multi30k.py --pairs en-de --workers 2": elsewhere(
        "tests/test_prepare_data.py::test_real_multi30k_en_de_word_level",
        "--source ../shared/data/multi30k (skipped where it is absent)"),
    "python scripts/recall_curve.py --run \"Multi30k En-De=checkpoints/vp-multi30k.en-de/checkpoint_best.pt\" "
    "--split valid --png docs/recall_multi30k_en_de.png": parse(MULTI30K),
    "python scripts/prepare_multi30k.py --pairs en-de --min-count 1 --out-dir data-bin/all": parse(MULTI30K),
    "DATA=data-bin/all/multi30k.en-de SAVE=checkpoints/vp-multi30k.en-de.all K=1000 "
    "bash examples/vocab_predictor/run_multi30k.sh": script(SCRIPT),
    "python scripts/export_candidates.py --predictor checkpoints/vp-multi30k.en-de.all/checkpoint_best.pt "
    "--splits train --k 1000 --out-dir checkpoints/vp-multi30k.en-de.all/candidates": parse(MULTI30K),
    "python scripts/benchmark.py --modes ce reinforce --data data-bin/all/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de.all/candidates --k 1000 --steps 8 --warmup 2 "
    "--epoch-sentences 29000 --json docs/bench_multi30k_all.json": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes ce reinforce --vocab-sizes 24000 --k 1000 --steps 3 --warmup 1 "
    "--json docs/bench_train_24k.json": parse(FULL_SIZE),
    REWARDS_GLEU: ran(IN_PROCESS, "--repeats 2 (the rest as documented)"),
    "python scripts/benchmark.py --modes decode --vocab-sizes 24000 70000 --decode-sentences 32 "
    "--json docs/bench_decode.json": parse(FULL_SIZE),
    "THREADS=1 K=500 EPOCHS=15 bash examples/translation/run_multi30k.sh": script(SCRIPT),
    "THREADS=1 K=0 EPOCHS=15 bash examples/translation/run_multi30k.sh": script(SCRIPT),
    "fairseq-generate data-bin/multi30k.en-de --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de "
    "--vocab-predictor checkpoints/vp-multi30k.en-de/checkpoint_best.pt --small-vocab-size K --path CKPT "
    "--gen-subset SPLIT --beam 1 --max-len-a 1.5 --max-len-b 10": parse(MULTI30K, {"--small-vocab-size K":
                                                                                    "--small-vocab-size 500"}),
    "THREADS=1 K=500 EPOCHS=1 bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    "THREADS=1 K=500 SAMPLES=4 BASELINE=loo OPTIMIZER=adam LR=3e-5 CE=checkpoints/runs32/probe/ce-k500-s1-e18.pt "
    "SAVE=checkpoints/runs32/probe/adam3e-5 ARCH_ARGS=\"$(cat examples/translation/transformer_multi30k.args)\" "
    "EXTRA=\"--max-update 100 --validate-interval-updates 50\" bash examples/translation/run_reinforce_multi30k.sh":
        script(SCRIPT),
    "THREADS=1 K=500 EPOCHS=10 bash examples/translation/run_multi30k.sh": script(SCRIPT),
    "EPOCHS=10 bash examples/vocab_predictor/run_multi30k.sh": script(SCRIPT),
    "THREADS=1 K=500 EPOCHS=1 LR=0.1 CE=checkpoints/ce8-k500/checkpoint_best.pt SAVE=checkpoints/rl-lr0.1-k500 "
    "bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    "THREADS=1 K=500 EPOCHS=9 bash examples/translation/run_multi30k.sh": script(SCRIPT),
    "THREADS=1 VP_EPOCHS=5 bash examples/captioning/prepare_synthetic.sh": script(SCRIPT_CAPTIONS),
    "THREADS=1 EPOCHS=6 K=500 bash examples/captioning/run_synthetic.sh": script(SCRIPT_CAPTIONS),
    "python scripts/benchmark.py --steps 3 --warmup 1 --json docs/bench_synthetic.json "
    "--markdown docs/bench_synthetic.md": parse(FULL_SIZE),
    PLOTS: ran(IN_PROCESS, "--out-dir a temporary folder: the three plots docs/ holds, redrawn"),
    "python scripts/benchmark.py --data data-bin/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de/candidates --k 500 "
    "--checkpoint checkpoints/mt-multi30k.en-de.k500/checkpoint_best.pt --modes ce reinforce --steps 8 "
    "--warmup 2 --epoch-sentences 29000 --json docs/bench_multi30k_k500.json": parse(MULTI30K_BENCH),
    "THREADS=1 K=500 EPOCHS=17 bash examples/translation/run_multi30k.sh": script(SCRIPT),
    # docs/RESULTS.md, "The LSTM's 5-epoch schedule (the paper's), seed 1"
    "THREADS=1 K=500 EPOCHS=17 SAVE=checkpoints/lstm5/ce-k500 bash examples/translation/run_multi30k.sh":
        script(SCRIPT),
    "THREADS=1 K=500 EPOCHS=5 CE=checkpoints/lstm5/ce-k500/checkpoint_best.pt SAVE=checkpoints/lstm5/rl5-k500 "
    "bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    "THREADS=1 K=500 EPOCHS=1 LR=0.1 CE=checkpoints/mt-multi30k.en-de.k500/checkpoint_best.pt "
    "SAVE=checkpoints/rl17-k500 bash examples/translation/run_reinforce_multi30k.sh": script(SCRIPT),
    OUTPUT_LAYER: ran(IN_PROCESS, "--vocab-sizes 300 --batch 4 --len 3 --d 8 --repeat 1"),
    "python ce_proc.py ROOT K MODE [keep|rescore]": other(
        "a measurement against an old checkout (ROOT), with the script written out in RESULTS.md", _ce_proc),
    "for r in 1 2; do for mode in ce reinforce; do for k in 0 1000; do PYTHONPATH=/tmp/old python ce_proc.py /tmp/old "
    "$k $mode; python ce_proc.py . $k $mode; done; done; done": other(
        "a measurement against an old checkout (/tmp/old), with the script written out in RESULTS.md", _ce_proc),
    "for r in 1 2 3 4 5; do for g in keep rescore; do python ce_proc.py . 1000 reinforce $g; done; done": other(
        "a measurement with the script written out in RESULTS.md", _ce_proc),
    "python scripts/rare_words.py --dict data-bin/multi30k.en-de/dict.de.txt --output \"small (K = 500), CE=...\" "
    "--output \"full softmax, CE=...\" --output \"small, + 1 REINFORCE epoch=...\" "
    "--output \"full, + 1 REINFORCE epoch=...\" --output \"reference=data-bin/multi30k.en-de/raw/test.de\" "
    "--png docs/rare_words_multi30k.png": parse(MULTI30K),
    "python scripts/rl_logs.py table LOGS --json ...": elsewhere(
        "tests/test_analysis_scripts.py::test_rl_logs_table_and_start_epochs", "logs written by the test",
        {"--json ...": "--json records.json"}),
    "THREADS=1 DEVICE=cuda K=500 EPOCHS=22 KEEP_EPOCHS=1 SAVE=$E/ce-k500 bash examples/translation/run_multi30k.sh":
        script(GPU + " and Multi30k; dry-run here"),
    "python scripts/rl_logs.py start-epochs --ce small=ce-k500/train.log --ce full=ce-k0/train.log "
    "--rl small=rl-fig3-e1-k500/train.log ... --out docs/rl_start_epochs_multi30k.png": elsewhere(
        "tests/test_analysis_scripts.py::test_rl_logs_table_and_start_epochs", "logs written by the test"),
    REWARDS_ALL: ran(IN_PROCESS, "--batch 8 --repeats 1 --vocab-size 300 (chrF on 512 sentences takes a second)"),
    "python scripts/benchmark.py --modes reinforce --data data-bin/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de/candidates --k 500 --rl-samples 1 2 4 --rounds 2 --steps 3 "
    "--warmup 1": parse(MULTI30K_BENCH),
    "python scripts/benchmark.py --modes reinforce --data data-bin/multi30k.en-de "
    "--candidates-dir checkpoints/vp-multi30k.en-de/candidates --k 500 "
    "--model-args \"$(cat examples/translation/transformer_multi30k.args)\" "
    "--checkpoint checkpoints/transformer-rl-multi30k.en-de/ce-k500-s1/checkpoint_best.pt --batch 128 "
    "--rl-samples 4 --rl-baseline loo --threads 1 --rounds 3 --steps 8 --warmup 2 "
    "--json docs/bench_transformer_rl_multi30k.json": elsewhere(
        "tests/test_benchmark.py::test_benchmark_on_real_batches_measures_the_model_of_the_given_flags",
        "tiny_bin, K = 50 of exported K = 60 lists, a tiny Transformer's flags, 2 samples, batch 8, 1 step"),
    "pip wheel --no-deps --no-build-isolation": other("how the GPU machine's fairseq wheel was built (a record)"),
    "pip install --no-index --no-deps --target /tmp/site": other("how the GPU machine's packages went in (a record)"),
    "python3 -m pytest tests -n 8 -v -ra --timeout 280": other(
        "the test suite on the GPU machine (pytest-timeout there)", _files_named),
    "python3 scripts/benchmark.py --device cuda --modes ce reinforce --vocab-sizes 24000 70000 --k 1000 --k-sweep "
    "--batch 128 --max-len 50 --steps 20 --warmup 3 --json bench_cuda.json --markdown bench_cuda.md": parse(GPU),
    "python3 -m pytest -n 8 -q tests/test_vocab_predictor.py tests/test_translation_smallvocab.py "
    "tests/test_reinforce.py tests/test_lstm_smallvocab.py": other("test files on the GPU machine", _files_named),
    "python3 -m pytest tests -n 6 -q -ra --timeout 300": other("the test suite on the GPU machine", _files_named),
    "python3 -m pytest tests -n 8 -q -ra --timeout 300": other("the test suite on the GPU machine", _files_named),
    # docs/RESULTS.md, "#31 on the GPU (fourth GPU session, 2026-11-24)"
    "python3 -m pytest tests/test_capture.py tests/test_static_state.py -n 8": other(
        "test files on the GPU machine", _files_named),
    "python3 -m pytest tests -m \"not slow\" -n 12 --timeout 150": other(
        "the fast tier on the GPU machine (pytest-timeout there)", _files_named),
    "python scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 --k 1000 --k-sweep --batch 128 "
    "--max-len 50 --phases": parse(GPU),
    "python scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 --k 1000 --k-sweep --batch 128 "
    "--max-len 50 --phases --set \"fairseq_smallvocab.reinforce.capture.CAPTURE='off'\"": parse(GPU),
    "python scripts/benchmark.py --device cuda --modes reinforce --vocab-sizes 24000 70000 --k-sweep --batch 128 "
    "--max-len 50": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 64000 128000 --k 1000 "
    "--k-sweep --modes reinforce --rl-samples 4 --rl-baseline loo --batch 128 --max-len 32 --steps 4": parse(GPU),
    "python scripts/benchmark.py --device cuda --arch transformer --vocab-sizes 32000 --k 1000 --k-sweep --no-full "
    "--modes reinforce --rl-samples 4 --rl-baseline loo --batch 32 --max-len 30 "
    "--ab fairseq_smallvocab.reinforce.sampler.STOP_CHECK_EVERY=1,8": parse(GPU),
    "fairseq-train data-bin/all/multi30k.en-de --user-dir fairseq_smallvocab --task vocab_prediction "
    "--arch vocab_predictor --criterion vocab_prediction_bce --label-smoothing 0.1 --optimizer adagrad --lr 0.08 "
    "--weight-decay 1e-6 --clip-norm 1.0 --batch-size 128 --max-epoch 2 --cpu ...": parse(MULTI30K_TRAIN),
})

# examples/**/*.sh that no documented command starts: the scripts that call them
CALLED_BY = {"examples/translation/decode_multi30k.sh": ["examples/translation/run_multi30k.sh",
                                                         "examples/translation/run_reinforce_multi30k.sh",
                                                         "examples/translation/run_transformer_multi30k.sh"]}


# -- the table's own checks ------------------------------------------------------------------------------------------


def test_every_documented_command_is_in_the_table():
    """A command added to the documentation needs an entry (run, elsewhere, parse, script or other) here."""
    missing = {command: where for command, where in documented_commands().items() if command not in COMMANDS}
    assert not missing, "documented commands that COMMANDS does not list (add each, saying how it is checked):\n" + \
        "\n".join(f"  {', '.join(where)}: {command}" for command, where in missing.items())


def test_every_entry_of_the_table_is_still_documented():
    gone = sorted(set(COMMANDS) - set(documented_commands()))
    assert not gone, "COMMANDS lists commands the documentation no longer shows:\n" + "\n".join(gone)


def _defines(target):
    """Whether ``tests/FILE.py::NAME`` names a test or fixture that FILE defines (a bare path: that it exists)."""
    path, _, name = target.partition("::")
    return (REPO / path).is_file() and (
        not name or re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M) is not None)


def test_the_table_names_tests_that_exist():
    problems = []
    for command, doc in COMMANDS.items():
        assert doc.kind in ("run", "elsewhere", "parse", "script", "other"), doc
        assert doc.why, command
        if doc.kind == "run" and not callable(globals().get(doc.test)):
            problems.append(f"{doc.test}: no such test in this file ({command})")
        if doc.kind == "elsewhere" and not _defines(doc.test):
            problems.append(f"{doc.test}: no such test or fixture ({command})")
    assert not problems, "\n".join(problems)


PARSED = ("run", "elsewhere", "parse")


def test_documented_commands_parse(monkeypatch):
    """Each command's entry point exists and its parser accepts its flags (placeholders filled as the table
    says), run from the repository root as the documentation runs them."""
    import logging

    monkeypatch.chdir(REPO)
    logging.disable(logging.INFO)  # the plugin's and fairseq's import chatter
    try:
        failures = []
        for command, doc in COMMANDS.items():
            if doc.kind not in PARSED:
                continue
            try:
                check_argv(split_command(command, doc.fill)[1])
            except AssertionError as error:
                failures.append(f"{command}\n    {error}")
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, f"{len(failures)} documented commands do not parse:\n" + "\n".join(failures)


def test_commands_no_parser_can_check():
    for command, doc in COMMANDS.items():
        if doc.kind == "other" and doc.check is not None:
            doc.check(command)


@pytest.mark.slow
def test_the_gpu_script_s_commands_parse_and_it_carries_make_setup_s_versions(monkeypatch):
    """scripts/gpu_checks.sh runs where a mistake costs scarce device time: each part's command (DRY=1 prints them)
    parses here, the test files and tests it names exist, the settings it compares take the values it gives, and
    the wheels it carries are the versions make setup installs."""
    import ast
    import importlib
    import logging
    import os
    import subprocess
    from importlib import metadata

    from packaging.requirements import Requirement

    def dry(*args):
        out = subprocess.run(["bash", str(GPU_CHECKS), *args], env={**os.environ, "DRY": "1"},
                             capture_output=True, text=True, check=True)
        return [shlex.split(line) for line in out.stdout.splitlines()]

    commands = dry("run")
    assert len(commands) == len(_gpu_parts()) >= 6
    assert dry("run", "lstm", "tests") == [commands[_gpu_parts().index("lstm")], commands[0]]
    monkeypatch.chdir(REPO)
    logging.disable(logging.INFO)
    try:
        for argv in commands:
            if argv[:3] == ["python3", "-m", "pytest"]:
                targets = [arg for arg in argv[3:] if arg.startswith("tests/")]
                assert targets, argv
                for target in targets:
                    assert _defines(target), f"{target}: no such test file or test"
                continue
            assert argv[:2] == ["python3", "scripts/benchmark.py"] and "--device" in argv, argv
            assert argv[argv.index("--device") + 1] == "cuda", argv
            check_argv(argv)
            for flag in ("--ab", "--set"):  # a value the module refuses only when a step runs: refused here
                for spec in [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]:
                    target, _, values = spec.partition("=")
                    module, _, name = target.rpartition(".")
                    choices = {"MODE": "MODES", "CAPTURE": "MODES"}.get(name, f"{name}_MODES")
                    allowed = getattr(importlib.import_module(module), choices)
                    for value in values.split(","):
                        assert ast.literal_eval(value) in allowed, (spec, allowed)
    finally:
        logging.disable(logging.NOTSET)
    # the versions make setup installs on Python 3.12, or, where it pins none, what the carried packages require
    download, build = dry("wheels")
    pins = dict(arg.partition("==")[::2] for arg in download + build if "==" in arg)
    setup = load_script("setup_venv")
    wanted = dict(req.partition("==")[::2] for req in [setup.fairseq_requirement((3, 12)),
                                                          *setup.FAIRSEQ_RUNTIME_DEPS] if "==" in req)
    assert set(wanted) <= set(pins), (wanted, pins)
    required = [Requirement(req) for name in pins for req in metadata.requires(name) or []
                if "extra ==" not in req]
    for name, version in pins.items():
        assert version == wanted.get(name, version), f"{name}=={version}: make setup installs {wanted[name]}"
        for req in required:
            assert req.name != name or version in req.specifier, f"{name}=={version}: {req} is required"
    with pytest.raises(subprocess.CalledProcessError):
        dry("run", "no-such-part")


@pytest.mark.parametrize("bad, message", [
    ("python scripts/no_such_script.py --k 1", "no such script"),
    ("python scripts/export_candidates.py --predictor p.pt --top-k 5 --out-dir o", "required: --k"),
    ("python scripts/benchmark.py --quik", "unrecognized arguments: --quik"),
    ("fairseq-train DATA --user-dir fairseq_smallvocab --task translation_smallvocab --arch lstm_smallvocab "
     "--small-vocab 500", "unrecognized arguments: --small-vocab 500"),
    ("fairseq-generate DATA --user-dir fairseq_smallvocab --task translation_smallvocab --candidates-dirs c",
     "unrecognized arguments: --candidates-dirs"),
    ("fairseq-hydra-train --config-dir examples/hydra --config-name translation_ce common.user_dir=x "
     "task.vocab_predicter=p.pt", "task.vocab_predicter"),
    ("sacrebleu -tok nothing -b ref.txt -i hyp.txt", "invalid choice: 'nothing'"),
])
def test_the_parse_check_catches_what_rots(bad, message, monkeypatch):
    """What the parse check is for: a removed script, a renamed flag, a misspelt hydra key."""
    monkeypatch.chdir(REPO)
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_argv(split_command(bad)[1])


def test_reading_the_documentation():
    """What counts as a command: fenced shell lines (continuations joined, comments and loop syntax dropped,
    `a && b` split), indented blocks and inline code that start like a command, usage lines of scripts."""
    text = "\n".join([
        "Run `python scripts/x.py --a 1` or `fairseq-train` (a mention) and `K=5 bash examples/y.sh`.",
        "```bash", "source .venv/bin/activate && fairseq-train DATA \\", "  --lr 1  # the rate", "for r in 0 1; do",
        "  fairseq-train DATA --rank $r &", "done; wait", "```", "```", "python scripts/output.py", "```", "",
        "    python scripts/indented.py --b \\", "        2", "text `python3 scripts/z.py", "--c` more"])
    assert [c for _, c in markdown_commands(text)] == [
        "source .venv/bin/activate", "fairseq-train DATA --lr 1", "fairseq-train DATA --rank $r",
        "python scripts/indented.py --b 2", "python scripts/x.py --a 1", "K=5 bash examples/y.sh",
        "python3 scripts/z.py --c"]
    script_text = "#!/bin/bash\n# Run it:\n#   K=1 bash examples/a.sh \\\n#     && echo\n# fairseq-train flags, prose\n"
    assert comment_commands(script_text) == [(3, "K=1 bash examples/a.sh")]
    assert split_command("X=1 fairseq-generate D --k 2 > out.txt < in.txt", {"--k 2": "--k 3"}) == (
        {"X": "1"}, ["fairseq-generate", "D", "--k", "3"], {">": "out.txt", "<": "in.txt"})


# -- the example scripts ---------------------------------------------------------------------------------------------


def _script_of(command):
    """(environment, the example script a command starts, or None): scripts/gpu_checks.sh is a tool, not an example."""
    env, argv, _ = split_command(command)
    return env, (argv[1] if argv[0] == "bash" and argv[1].startswith("examples/") else None)


def test_every_example_script_is_started_by_a_documented_command():
    """Each examples/**/*.sh is started by a documented command (dry-run below) or by a script that is; each
    setting a documented command gives is one its script reads."""
    started = {}
    for command, doc in COMMANDS.items():
        env, path = _script_of(command)
        if path:
            assert doc.kind == "script", command
            assert not doc.after or doc.after in COMMANDS and COMMANDS[doc.after].kind == "script", command
            started.setdefault(path, []).append(command)
            text = (REPO / path).read_text()
            for name in env:
                assert re.search(rf"\${{?{name}\b", text), f"{command}: {path} does not read {name}"
    scripts = {str(p.relative_to(REPO)) for p in REPO.glob("examples/**/*.sh")}
    assert scripts == set(started) | set(CALLED_BY), (scripts, set(started), set(CALLED_BY))
    for path, callers in CALLED_BY.items():
        for caller in callers:
            assert caller in started and Path(path).name in (REPO / caller).read_text(), (path, caller)


# A stand-in for fairseq's commands, sacrebleu and python (bash: it starts in milliseconds, and the scripts start
# many): records its command line and OMP_NUM_THREADS, prints what the example scripts read of its output.
STUB = """#!/usr/bin/env bash
name=$(basename "$0")
if [ "$name" = python ] && [ "${1-}" = -c ]; then exec "$REAL_PYTHON" "$@"; fi  # the scripts' own arithmetic
# one record, one write: scripts that run steps side by side (PARALLEL=1) append to the log at the same time, and
# two writes per record let their records interleave
record=$(printf '%s\x1f' "$name" "$@"; printf '%s\x1e' "${OMP_NUM_THREADS-}")
printf '%s' "$record" >> "$STUB_LOG"
case "$name" in
  fairseq-train) echo "done training" ;;
  fairseq-generate) printf 'H-0\t-0.5\tword\nGenerate test with beam=1: BLEU4 = 1.00\n' ;;
  sacrebleu) echo 1.0 ;;
esac
if [ "${1-}" = scripts/prepare_multi30k.py ]; then  # the stats.json it writes (prep.py), as far as read
  out=data-bin; prev=
  for arg in "$@"; do [ "$prev" = --out-dir ] && out=$arg; prev=$arg; done
  mkdir -p "$out/multi30k.en-de"
  echo '{"splits": {"train": {"en": {"sentences": 29000}}}}' > "$out/multi30k.en-de/stats.json"
fi
"""
STUBBED = ["fairseq-train", "fairseq-generate", "sacrebleu", "python"]
# what each script starts, in order, in a fresh folder (the data missing: the data steps run too)
SCRIPT_STEPS = {
    "examples/vocab_predictor/run_multi30k.sh": ["scripts/prepare_multi30k.py", "fairseq-train",
                                                 "scripts/export_candidates.py", "scripts/recall_curve.py"],
    "examples/translation/run_multi30k.sh": ["fairseq-train", *["fairseq-generate", "sacrebleu"] * 2],
    "examples/translation/run_reinforce_multi30k.sh": ["fairseq-train", *["fairseq-generate", "sacrebleu"] * 2],
    "examples/translation/run_transformer_multi30k.sh": ["fairseq-train", *["fairseq-generate", "sacrebleu"] * 2],
    "examples/captioning/prepare_synthetic.sh": ["scripts/make_synthetic_captions.py", "scripts/prepare_captions.py",
                                                 "fairseq-train", "scripts/export_candidates.py",
                                                 "scripts/recall_curve.py"],
    "examples/captioning/run_synthetic.sh": [*["fairseq-train", "fairseq-generate", "scripts/caption_bleu.py"] * 2],
    # 2 seeds x 2 softmaxes x (CE, REINFORCE, 2 controls): training with its greedy decodes, then beam 5
    "examples/translation/run_transformer_rl_multi30k.sh": [
        *["fairseq-train", *["fairseq-generate", "sacrebleu"] * 4] * 16, "scripts/rl_logs.py"],
}
# scripts whose steps run side by side (PARALLEL=1): their order is not compared, only what they start
UNORDERED = {"examples/translation/run_transformer_rl_multi30k.sh"}


def _step(argv):
    return argv[1] if argv[0] == "python" else argv[0]


@pytest.mark.slow
def test_example_scripts_dry_run(tmp_path):
    """Every documented ``bash examples/...sh`` command, exactly as documented, in a fresh folder whose fairseq
    commands, sacrebleu and python scripts are stand-ins that record their command lines: the script runs to its
    end, starts the steps it should, passes on the settings given, and every command it would run parses."""
    import logging
    import os

    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "stub").write_text(STUB)
    (stubs / "stub").chmod(0o755)
    for name in STUBBED:
        os.symlink(stubs / "stub", stubs / name)
    commands = [command for command, doc in COMMANDS.items() if doc.kind == "script"]
    failures = []
    logging.disable(logging.INFO)
    try:
        for i, command in enumerate(commands):
            env, path = _script_of(command)
            work = tmp_path / f"w{i}"
            work.mkdir()
            for name in ("examples", "scripts", "fairseq_smallvocab"):  # the scripts run from the project root
                (work / name).symlink_to(REPO / name)
            log = work / "calls.jsonl"
            doc = COMMANDS[command]
            for step in ([doc.after] if doc.after else []) + [command]:  # only the command's own calls are kept
                log.unlink(missing_ok=True)
                result = run(["bash", "-c", f'export PATH="{stubs}:$PATH"; {step}'], cwd=work, check=False,
                             env={"STUB_LOG": str(log), "REAL_PYTHON": sys.executable, "E": str(work / "e")})
                if result.returncode != 0:
                    break
            records = log.read_text().split("\x1e")[:-1] if log.exists() else []
            calls = [{"argv": fields[:-1], "threads": fields[-1]} for fields in (r.split("\x1f") for r in records)]
            if result.returncode != 0:
                failures.append(f"{step}: exit {result.returncode}\n{result.stderr[-2000:]}")
                continue
            steps, want = [_step(call["argv"]) for call in calls], doc.steps or SCRIPT_STEPS[path]
            if (sorted(steps) if path in UNORDERED else steps) != (sorted(want) if path in UNORDERED else want):
                failures.append(f"{command}: started {steps}, not {want}")
            trains = [call["argv"] for call in calls if call["argv"][0] == "fairseq-train"]
            for name, value in env.items():
                if name == "THREADS":
                    ok = all(call["threads"] == value for call in calls)
                elif name == "DEVICE":
                    ok = all(("--cpu" in argv) == (value == "cpu") for argv in trains)
                elif name == "KEEP_EPOCHS":
                    ok = all(("--no-epoch-checkpoints" in argv) != (value == "1") for argv in trains)
                elif name == "CE_FROM":  # OUT's CE runs are links to CE_FROM's
                    links = list((work / env["OUT"]).glob("ce-k*-s*"))
                    ok = bool(links) and all(p.is_symlink() and p.resolve().parent == (work / value).resolve()
                                             for p in links)
                elif name == "CONTROLS" and not value:  # none: no control run
                    ok = not any("/ctl-" in arg for call in calls for arg in call["argv"])
                else:  # the value reaches a command (a value built by the shell is not compared); several
                    # words (EXTRA's flags) reach it as consecutive arguments
                    words = value.split()
                    ok = "$" in value or any(value in call["argv"] or any(value in arg.split() for arg in call["argv"])
                                             or bool(words) and any(call["argv"][i:i + len(words)] == words
                                                                    for i in range(len(call["argv"])))
                                             for call in calls)
                if not ok:
                    failures.append(f"{command}: the setting {name}={value} reaches no command: {calls}")
            if path == "examples/vocab_predictor/run_multi30k.sh":  # half an epoch of 29,000 sentences
                for flag in ("--validate-interval-updates", "--save-interval-updates"):  # saved where validated
                    assert trains[0][trains[0].index(flag) + 1] == "113", flag
            for call in calls:
                try:
                    check_argv(call["argv"], cwd=work)
                except AssertionError as error:
                    failures.append(f"{command}: {' '.join(call['argv'])}\n    {error}")
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, "\n".join(failures)


# -- the commands run here -------------------------------------------------------------------------------------------


def adapt(command, values=None, extra=(), fill=None):
    """The argv of a documented command run on tiny data: ``values`` maps a documented token to the tiny one, or a
    flag (``--k``) to its new value; each must be in the command (an adaptation cannot outlive what it adapts)."""
    _, argv, redirect = split_command(command, fill)
    values = dict(values or {})
    out, used = [], set()
    for i, token in enumerate(argv):
        if i and argv[i - 1] in values and argv[i - 1].startswith("-"):
            out.append(str(values[argv[i - 1]]))
            used.add(argv[i - 1])
        elif token in values and not token.startswith("-"):
            out.append(str(values[token]))
            used.add(token)
        else:
            out.append(token)
    assert used == set(values), f"not in the command any more: {set(values) - used}: {command}"
    out += [str(e) for e in extra]
    if out[0] in ("python", "python3") and out[1].endswith(".py"):  # helpers.run forks it from its server
        out = [str(REPO / out[1]), *out[2:]]
    return out


def _run_in_process(argv, capsys):
    """A project script (or python -c) in this process, as `python ...` runs it; returns its stdout."""
    capsys.readouterr()
    if argv[:2] == ["python", "-c"]:
        exec(compile(argv[2], "python -c", "exec"), {"__name__": "__main__"})
    else:
        with mock.patch.object(sys, "argv", argv):
            try:
                runpy.run_path(argv[0], run_name="__main__")
            except SystemExit as exit_:
                assert exit_.code in (None, 0), f"{' '.join(argv)}: exit {exit_.code}\n{capsys.readouterr().err}"
    return capsys.readouterr().out


def test_scripts_run_in_process_on_tiny_settings(tiny_raw, tmp_path, capsys):
    """The documented commands that take a second or two, run in this process (no subprocess), each adapted
    as the table says."""
    from helpers import TINY

    runs = {
        USER_DIR_OF_AN_INSTALL: adapt(USER_DIR_OF_AN_INSTALL),
        PLOTS_README: adapt(PLOTS_README, {"bench.json": REPO / "docs" / "bench_synthetic.json",
                                           "--out-dir": tmp_path / "plots"}),
        PLOTS: adapt(PLOTS, {"--out-dir": tmp_path / "docs"}),
        REWARDS: adapt(REWARDS, extra=["--batch", "8", "--repeats", "1", "--vocab-size", "300", "--threads", "1"]),
        REWARDS_GLEU: adapt(REWARDS_GLEU, {"--repeats": 2}),
        REWARDS_ALL: adapt(REWARDS_ALL, {"--batch": 8}, extra=["--repeats", "1", "--vocab-size", "300"]),
        OUTPUT_LAYER: adapt(OUTPUT_LAYER, {"--vocab-sizes": 300, "--batch": 4, "--len": 3, "--d": 8, "--repeat": 1},
                            extra=["--k", "40", "--threads", "1"], fill={"32000 128000": "32000", "32 128": "32"}),
        TAIL: adapt(TAIL, {"demo/raw/train.tgt": tiny_raw / "train.tgt",
                           "../shared/data/multi30k/train.de": tiny_raw / "train.src"}),
        CAPTIONS_RAW: adapt(CAPTIONS_RAW, {"--out": tmp_path / "captions-raw"}, extra=[
            arg for name, value in TINY.__dict__.items() for arg in (f"--{name.replace('_', '-')}", value)]),
    }
    assert set(runs) == {c for c, doc in COMMANDS.items() if doc.kind == "run" and doc.test == IN_PROCESS}
    import torch

    threads = torch.get_num_threads()
    try:
        out = {command: _run_in_process(argv, capsys) for command, argv in runs.items()}
    finally:  # the benchmarks set torch's threads for the process: the tests after this one keep theirs
        torch.set_num_threads(threads)

    assert out[USER_DIR_OF_AN_INSTALL].strip() == str(USER_DIR)  # what --user-dir takes
    for name in ("speedup", "time_vs_k", "memory"):  # the plots docs/ shows, redrawn from its records
        assert (REPO / "docs" / f"bench_{name}.png").exists() and (tmp_path / "docs" / f"bench_{name}.png").exists()
        assert (tmp_path / "plots" / f"bench_{name}.png").exists()
    for command, rewards in ((REWARDS, {"gleu", "bleu", "chrf", "constant"}), (REWARDS_GLEU, {"gleu"}),
                             (REWARDS_ALL, {"gleu", "bleu", "chrf", "constant"})):
        records = [json.loads(line) for line in out[command].splitlines() if line.startswith("{")]
        assert {r["reward"] for r in records} == rewards and all(r["median_ms"] >= 0 for r in records), out[command]
    assert "32000" not in out[OUTPUT_LAYER] and "300" in out[OUTPUT_LAYER]
    assert "train.tgt" in out[TAIL] and "train.src" in out[TAIL]
    written = sorted(path.name for path in (tmp_path / "captions-raw").iterdir())
    assert {"train.npy", "train.index", "train.en", "test.index"} <= set(written), written


@pytest.mark.slow
def test_translation_recipe_runs_on_tiny_data(predictor, tiny_bin, tiny_raw, tmp_path):
    """examples/vocab_predictor's export and examples/translation's CE training, decoding (fairseq-generate on
    the exported lists, fairseq-interactive on the predictor the checkpoint names) and REINFORCE, on tiny_bin."""
    cands, ce, rl = tmp_path / "candidates", tmp_path / "ce", tmp_path / "rl"
    data = {"data-bin/multi30k.en-de": tiny_bin, "-s": "src", "-t": "tgt"}
    small = {**data, "--candidates-dir": cands, "--small-vocab-size": 50}
    tiny_model = ["--embed-dim", "16", "--num-workers", "0", "--no-progress-bar"]
    run(adapt(VP_EXPORT, {"--predictor": predictor, "--k": 60, "--out-dir": cands}), cwd=REPO)
    assert (cands / "train.k60.npy").exists() and (cands / "test.k60.json").exists()

    # from the repository root, as documented (--user-dir fairseq_smallvocab); every output goes to tmp_path
    out = run(adapt(MT_CE, {**small, "--max-epoch": 1, "--save-dir": ce}, extra=tiny_model), cwd=REPO)
    log = out.stdout + out.stderr
    assert "gold_outside_cands" in log and "| bleu " in log and (ce / "checkpoint_best.pt").exists()

    out = run(adapt(MT_GENERATE, {**small, "--path": ce / "checkpoint_best.pt"}), cwd=REPO)
    hypotheses = re.findall(r"^H-\d+\t", out.stdout, re.M)
    assert len(hypotheses) == len((tiny_raw / "test.src").read_text().splitlines()) and "BLEU" in out.stdout

    sources = (tiny_raw / "test.src").read_text().splitlines()[:4] + [""]
    out = run(adapt(MT_INTERACTIVE, {**data, "--small-vocab-size": 50, "--path": ce / "checkpoint_best.pt"}),
              stdin="\n".join(sources) + "\n", cwd=REPO)
    assert len(re.findall(r"^H-\d+\t", out.stdout, re.M)) == len(sources), out.stdout + out.stderr[-3000:]

    out = run(adapt(MT_REINFORCE, {**small, "--finetune-from-model": ce / "checkpoint_best.pt", "--max-epoch": 1,
                                   "--save-dir": rl}, extra=tiny_model), cwd=REPO)
    assert " reward " in out.stdout + out.stderr and (rl / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_captioning_export_runs_on_tiny_data(cap_predictor, cap_bin, tmp_path):
    """examples/captioning's export of the predictor's lists from image features."""
    out = tmp_path / "candidates"
    run(adapt(CAPTIONS_EXPORT, {"--predictor": cap_predictor, "data-bin/captions": cap_bin, "--k": 40,
                                "--out-dir": out}), cwd=REPO)
    for split, gold in (("train", True), ("valid", False), ("test", False)):
        meta = json.loads((out / f"{split}.k40.json").read_text())
        assert meta["gold_included"] is gold and (out / f"{split}.k40.npy").exists()


def test_benchmark_quick_sets_every_setting_the_worker_reads():
    """``benchmark.py --quick`` (README, docs/RESULTS.md) is its options spelled out: the same
    configurations, each with every setting its worker reads (issue #29: --quick re-parsed the
    command line after d had been defaulted, and every worker died on d = None)."""
    from smallvocab_tools.bench import benchmark as bench

    quick = list(bench.configurations(bench.parse_args(["--quick"])))
    spelled = list(bench.configurations(bench.parse_args(
        ["--modes", "ce", "reinforce", "--vocab-sizes", "24000", "--k", "1000", "--k-sweep", "--steps", "2",
         "--warmup", "1"])))
    assert quick == spelled
    for cfg in quick:
        assert cfg["d"] == 256 and cfg["steps"] == 2 and cfg["warmup"] == 1, cfg
        assert not {key for key, value in cfg.items() if value is None} - OPTIONAL_WORKER_SETTINGS, cfg
    # an explicit option still wins over --quick's, and the d default still follows it
    small = bench.parse_args(["--quick", "--embed-dim", "32", "--steps", "4"])
    assert (small.embed_dim, small.steps, small.warmup, small.vocab_sizes) == (32, 4, 1, [24000])


@pytest.mark.slow
def test_benchmark_quick_runs_end_to_end(tmp_path):
    """``python scripts/benchmark.py --quick`` as documented, shrunk to a tiny |V| and batch (d and
    everything else left to --quick), through the worker process it starts."""
    run(adapt(QUICK, extra=["--vocab-sizes", "300", "--k", "40", "--batch", "4", "--max-len", "6", "--steps", "1",
                            "--threads", "1", "--modes", "reinforce", "--no-full", "--json", tmp_path / "q.json"]),
        cwd=REPO)
    record, = json.loads((tmp_path / "q.json").read_text())
    assert (record["mode"], record["softmax"], record["K"], record["d"]) == ("reinforce", "small", 40, 256)
    assert record["steps"] == 1 and record["warmup"] == 1 and record["sec_per_step"] > 0
