"""Reading the commands out of the documentation and checking them
(``test_documented_commands.py`` and ``test_documented_scripts.py``): the
documents, the table in tests/documented_commands.json, and each kind of
command's check (fairseq's parsers, hydra, the scripts' argparse, make)."""

import argparse
import contextlib
import io
import json
import re
import runpy
import shlex
import sys
from unittest import mock

from helpers import REPO, USER_DIR

# -- reading the commands out of the documentation -------------------------------------------------------------------

MARKDOWN = ["README.md", *sorted(str(p.relative_to(REPO))
                                 for pattern in ("docs/*.md", "docs/runs/*.md", "examples/**/*.md")
                                 for p in REPO.glob(pattern))]
COMMENTED = sorted(str(p.relative_to(REPO)) for pattern in ("examples/**/*.sh", "examples/**/*.yaml")
                   for p in REPO.glob(pattern))
_ENV = r"(?:[A-Z_][A-Z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S+)\s+)*"
# what a command starts with (a bare `fairseq-train` or `--flag` in prose is a mention, not a command)
COMMAND = re.compile(_ENV + r"(?:python3?\s+(?:\S+\.py|-c|-m)\b|bash\s+\S+\.sh\b|fairseq-[a-z-]+\s+[^-\s]"
                     r"|fairseq-hydra-train\s|make\s+[a-z]|source\s|pip\s|for\s)")


def _logical_lines(lines):
    """(line number, text) of each logical line: backslash continuations joined, whitespace collapsed."""
    out, start, parts = [], None, []
    for number, raw in lines:
        line, start = raw.strip(), number if start is None else start
        parts.append(line[:-1] if line.endswith("\\") else line)
        if not line.endswith("\\"):
            out.append((start, " ".join(" ".join(parts).split())))
            start, parts = None, []
    return out + ([(start, " ".join(" ".join(parts).split()))] if parts else [])


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
    found, outside, fence = [], [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"^```(\w*)\s*$", line)
        if fence is None and opening:
            fence = (opening.group(1), [])
        elif fence is not None and line.startswith("```"):
            found += _commands_of_lines(fence[1], keep_all=True) if fence[0] in ("bash", "sh", "shell") else []
            fence = None
            outside.append((number, ""))
        else:
            (fence[1] if fence is not None else outside).append((number, line))
    indented, prose = [], []
    for number, line in outside:  # a code block indented by 4 spaces after a blank line
        in_block = line.startswith("    ") and (indented and indented[-1][0] == number - 1 or
                                               (prose and prose[-1][1].strip() == ""))
        (indented if in_block else prose).append((number, line))
    found += _commands_of_lines(indented, keep_all=False)
    text, first = "\n".join(line for _, line in prose), [n for n, _ in prose]
    return found + [(first[text.count("\n", 0, m.start())], " ".join(m.group(1).split()))
                    for m in re.finditer(r"`([^`]+)`", text) if COMMAND.match(" ".join(m.group(1).split()))]


def comment_commands(text):
    """(line, command) of the usage lines in a script's or config's comments (`#   bash examples/...`)."""
    # a usage line is indented inside its comment (`#   cmd`); prose starts one space after the '#'
    comments = [(n, line.lstrip()[1:]) for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*#\s\s", line)]
    runs = [[]]
    for number, line in comments:  # consecutive comment lines form a block; continuations join inside one
        if runs[-1] and runs[-1][-1][0] != number - 1:
            runs.append([])
        runs[-1].append((number, line))
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


def _no_duplicates(pairs):
    keys = [key for key, _ in pairs]
    twice = sorted(key for key in set(keys) if keys.count(key) > 1)
    assert not twice, f"documented_commands.json has these keys twice: {twice}"
    return dict(pairs)


TABLE = json.loads((REPO / "tests" / "documented_commands.json").read_text(), object_pairs_hook=_no_duplicates)
COMMANDS = {command: {**doc, "why": TABLE["reasons"].get(doc["why"][1:], doc["why"])}
            for command, doc in TABLE["commands"].items()}
NAMED = {doc["name"]: command for command, doc in COMMANDS.items() if "name" in doc}  # the commands run here


def expand_steps(spec):
    """A list of steps, ``[n, [steps]]`` standing for n repeats."""
    return [step for item in spec for step in (expand_steps(item[1]) * item[0] if isinstance(item, list) else [item])]


# -- parse checks ----------------------------------------------------------------------------------------------------

FAIRSEQ_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                   "fairseq-interactive": "get_interactive_generation_parser",
                   "fairseq-validate": "get_validation_parser", "fairseq-preprocess": "get_preprocessing_parser"}
REDIRECTIONS = {">", ">>", "<", "2>", "&>"}


def split_command(command, fill=None):
    """(environment, argv, {redirection: target}) of a documented command, its placeholders filled."""
    for text, value in (fill or {}).items():
        assert text in command, f"the fill {text!r} is not in the command any more: {command}"
        command = command.replace(text, value)
    tokens, env, redirect, argv = shlex.split(command.replace("$PWD", str(REPO))), {}, {}, []
    while tokens and re.match(r"[A-Z_][A-Z0-9_]*=", tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
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


def check_fairseq(program, args, cwd=REPO):
    from fairseq import options

    assert program in FAIRSEQ_PARSERS, f"{program}: not a fairseq command this test knows"
    args = list(args)  # --user-dir relative to cwd (or through a link): the plugin's own path, as fairseq imported it
    for i, arg in enumerate(args[:-1]):
        if arg == "--user-dir" and (cwd / args[i + 1]).resolve() == USER_DIR.resolve():
            args[i + 1] = str(USER_DIR)
    parser = getattr(options, FAIRSEQ_PARSERS[program])()
    with _stderr_as_error(program):
        if program == "fairseq-preprocess":
            parser.parse_args(args)
        else:
            options.parse_args_and_arch(parser, args)


_HYDRA = {}


def check_hydra(args, cwd=REPO):
    """fairseq-hydra-train's configuration composed as it composes it (a key in neither the file nor fairseq's
    configs is refused by hydra)."""
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
    # hydra's version base is the process's: fairseq's @hydra.main leaves it unspecified (hydra's compatibility
    # level, 1.1), and fairseq's later hydra.experimental.initialize (convert_namespace_to_omegaconf) refuses to
    # run in a process whose base is 1.2 or above; composed at 1.1, and the base put back for the tests after
    from hydra.version import VersionBase

    base = VersionBase.instance().version_base  # (hydra's "unspecified" marker too, which setbase refuses)
    try:
        with initialize_config_dir(config_dir=str((cwd / known.config_dir).resolve()), version_base="1.1"):
            try:
                cfg = compose(config_name=known.config_name, overrides=overrides)
            except Exception as error:  # hydra's own errors name the override
                raise AssertionError(f"fairseq-hydra-train: {type(error).__name__}: {error}") from None
    finally:
        VersionBase.instance().version_base = base
    assert cfg.task._name and cfg.model._name and cfg.criterion._name


class _Parsed(Exception):
    pass


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


def check_benchmark(args):
    """benchmark.py's whole parse_args (--ab and --set included) and every configuration it makes: none leaves a
    setting its worker reads unset (a fairseq arch may leave d and layers to itself). With --data, whose checks
    read the data, its argparse parser and the settings of --ab and --set."""
    from smallvocab_tools.bench import ab
    from smallvocab_tools.bench import benchmark as bench

    if "--data" in args:
        _first_parse(lambda: bench.main(args), ["benchmark.py", *args], "scripts/benchmark.py")
        for flag, parse in (("--ab", ab.parse_ab), ("--set", ab.parse_set)):
            for spec in [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]:
                try:
                    parse(spec)
                except ValueError as error:
                    raise AssertionError(f"scripts/benchmark.py {flag} {spec}: {error}") from None
        return
    with _stderr_as_error("scripts/benchmark.py"):
        options = bench.parse_args(args)
    for cfg in bench.configurations(options):
        unset = {key for key, value in cfg.items() if value is None} - {"layers"} - (
            {"d"} if cfg["arch"] != "lstm_smallvocab" else set())
        assert not unset, f"scripts/benchmark.py {' '.join(args)}: the worker would get {sorted(unset)} unset"


def check_argv(argv, cwd=REPO):
    """The parse check of one command line (argv, no environment or redirections)."""
    program = argv[0]
    if program == "fairseq-hydra-train":
        check_hydra(argv[1:], cwd)
    elif program.startswith("fairseq-"):
        check_fairseq(program, argv[1:], cwd)
    elif program == "sacrebleu":
        from sacrebleu import sacrebleu

        _first_parse(sacrebleu.parse_args, argv, "sacrebleu")
    elif program == "make":
        check_make({}, argv)
    elif program in ("python", "python3") and argv[1] == "-c":
        compile(argv[2], "python -c", "exec")
    elif program in ("python", "python3") and argv[1].endswith(".py"):
        script = cwd / argv[1]
        assert script.is_file(), f"{argv[1]}: no such script"
        if script.name == "benchmark.py":
            return check_benchmark(argv[2:])
        if script.name == "sweep_lenpen.py" and "--" in argv:  # what follows '--' is fairseq-generate's
            at = argv.index("--")
            data = argv[argv.index("--data") + 1] if "--data" in argv[:at] else "data-bin"
            check_argv(["fairseq-generate", data, *argv[at + 1:]], cwd)
            argv = argv[:at]
        if script.name == "budget_probe.py" and "--" in argv:  # fairseq-train's flags after '--', each arm's added
            at = argv.index("--")
            arms = [argv[i + 1].partition("=")[2] for i in range(2, at) if argv[i] == "--arm"]
            for arm in arms or [""]:
                check_argv(["fairseq-train", *argv[at + 1:], *shlex.split(arm)], cwd)
            argv = argv[:at]
        _first_parse(lambda: runpy.run_path(str(script), run_name="__main__"), [str(script), *argv[2:]], argv[1])
    else:
        raise AssertionError(f"no parse check for {program}")


def check_make(env, argv):
    """`make TARGET [VAR=VALUE]`: the Makefile has the target, and each variable is one the Makefile or the tests
    read."""
    makefile = (REPO / "Makefile").read_text()
    for target in [a for a in argv[1:] if "=" not in a]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no target {target}"
    for name in [*env, *(a.partition("=")[0] for a in argv[1:] if "=" in a)]:
        assert name in makefile + (REPO / "tests" / "helpers.py").read_text(), f"{' '.join(argv)}: nothing reads {name}"


GPU_CHECKS = REPO / "scripts" / "gpu_checks.sh"


def _gpu_parts():
    """The parts scripts/gpu_checks.sh knows (its PARTS array)."""
    return re.search(r"^PARTS=\(([^)]*)\)", GPU_CHECKS.read_text(), re.M).group(1).split()


def _gpu_checks(command):
    argv = shlex.split(command)
    assert argv[:2] == ["bash", "scripts/gpu_checks.sh"] and argv[2] in ("wheels", "run"), command
    assert set(argv[3:]) <= set(_gpu_parts()), f"{command}: parts it does not know (it has {_gpu_parts()})"


def _compat_switch(command):
    """`export SMALLVOCAB_COMPAT=VALUE`: a value the plugin takes."""
    from fairseq_smallvocab import compat

    name, _, value = shlex.split(command)[1].partition("=")
    assert name == compat.ENV, command
    compat.chosen(value)


def _test_order(command):
    """`make test PYTEST_ARGS="--order ORDER"`: the target and variable, and an ORDER the tests' conftest takes."""
    from conftest import reordered

    env, argv = split_command(command)[:2]
    check_make(env, argv)
    args = shlex.split(next(a for a in argv if a.startswith("PYTEST_ARGS=")).partition("=")[2])
    assert args[0] == "--order" and len(args) == 2, command
    reordered([1, 2, 3], args[1])


# what an entry of kind "other" can have checked
OTHER_CHECKS = {"make_target": lambda command: check_make(*split_command(command)[:2]),
                "setup_py": lambda command: (REPO / "setup.py").is_file(),
                "venv": lambda command: "VENV ?= .venv" in (REPO / "Makefile").read_text(),  # make setup's .venv
                "gpu_checks": _gpu_checks,
                "compat_switch": lambda command: _compat_switch(command),
                "test_order": _test_order}


# -- the table's own checks ------------------------------------------------------------------------------------------


def _defines(target):
    """Whether ``tests/FILE.py::NAME`` names a test or fixture that FILE defines (a bare path: that it exists)."""
    path, _, name = target.partition("::")
    return (REPO / path).is_file() and (
        not name or re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M) is not None)
