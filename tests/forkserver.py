"""Commands for the slow tests without paying for torch's and fairseq's import
each time: a server process imports them once, then forks a child for each
command (a fairseq console script, a project script, or ``python -m``).

Why: the slow tier runs about 120 commands, and each fresh interpreter
imports torch and fairseq again, a large share of the suite's CPU time
(measured on the CPU).  A forked child starts from the imported modules
and still is a process of its own: its own argv, cwd, environment,
stdin/stdout/stderr (files), exit status, registries and global state, gone
when it exits.

What the server imports is only libraries (torch, numpy, fairseq and the
packages fairseq loads), never ``fairseq_cli`` (whose modules configure
logging when imported) nor the plugin (``--user-dir`` imports it in the
child, as in a fresh process).  The server runs no torch operation before
forking, so no thread pool exists to be broken by ``fork``.  Importing
fairseq configures the root logger, which decides where a command's log
lines go (fairseq-train configures logging before it imports fairseq,
fairseq-generate after): the server undoes it, and a child redoes it at its
command's first ``import fairseq...`` statement, as in a fresh process, and
hands the command's logging the records the import logged (a warning about
tensorboardX).

``python tests/forkserver.py --entry PATH ARGS...`` runs one console script
the same way in its own fresh process, without forking (for commands that
must run side by side, as the ranks of a distributed run).

Commands that are not Python entry points (``bash``, ``make``,
``python -c``), and every command when ``SMALLVOCAB_TEST_FORK=0``, run as
plain subprocesses (``helpers.run`` decides).

Protocol (one JSON object per line): the test writes {"kind", "argv",
"cwd", "env", "stdin", "stdout", "stderr"} (kind: "script", "module" or
"entry"; argv: the script, module or console script path, then its
arguments; the last three are file paths) to the server's stdin; the server
answers {"pid"} (the child's, which leads its own process group) when it
has forked and {"returncode"} when the child has exited.
"""

import json
import logging
import os
import sys


def _entry_point(path):
    """The console script at ``path`` (e.g. .venv/bin/fairseq-train): its entry point's function, imported."""
    from importlib.metadata import entry_points

    name = os.path.basename(path)
    found = [ep for ep in entry_points(group="console_scripts") if ep.name == name]
    if not found:
        raise ValueError(f"{path}: not a console script of this environment")
    return found[0].load()


# how importing fairseq leaves the root logger in a fresh interpreter (basicConfig's arguments), or None,
# and the log records that the import emits
_FAIRSEQ_LOGGING = None
_IMPORT_RECORDS = []


def _log_like_a_fresh_import():
    """Until the command first imports fairseq, the root logger is a fresh
    interpreter's; at that import statement it is configured as fairseq's
    import configures it, unless the command configured logging before (as
    fairseq-train does: its basicConfig then wins, as in a fresh process),
    and the records the import logged are handed to the command's logging."""
    import builtins

    original = builtins.__import__

    def hooked(name, *args, **kwargs):
        if name == "fairseq" or name.startswith("fairseq."):
            builtins.__import__ = original
            if not logging.root.handlers and _FAIRSEQ_LOGGING is not None:
                logging.basicConfig(**_FAIRSEQ_LOGGING)
            for record in _IMPORT_RECORDS:
                logger = logging.getLogger(record.name)
                if logger.isEnabledFor(record.levelno):
                    logger.handle(record)
        return original(name, *args, **kwargs)

    if _FAIRSEQ_LOGGING is not None:
        builtins.__import__ = hooked


def _child(request):
    """In the forked child: become the command; never returns."""
    try:
        os.setpgid(0, 0)  # a group of its own: a test past its deadline kills the command with what it started
        os.chdir(request["cwd"] or os.getcwd())
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, (path, flags) in enumerate([(request["stdin"], os.O_RDONLY),
                                            (request["stdout"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
                                            (request["stderr"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT)]):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        # fresh text streams on the new descriptors (what an interpreter started with -u would have)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    run_and_leave(request["kind"], request["argv"])


def run_and_leave(kind, argv):
    """Run the command in this process, then its atexit handlers, and leave with its exit status without the
    interpreter's teardown (in which a torch thread that still holds work, as fairseq's data-buffer thread or
    gloo's run loop, aborts the process: pytorch/pytorch#38228); never returns."""
    code = 1
    try:
        _log_like_a_fresh_import()
        import runpy

        sys.argv = list(argv)
        if kind == "script":  # python path/to/script.py ...
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        elif kind == "module":  # python -m module ...
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        else:  # a console script, by its path
            sys.path[0] = os.path.dirname(argv[0])
            sys.exit(_entry_point(argv[0])())
        code = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve():
    records = []  # what the imports log, replayed in each child at the same point
    handle = logging.Logger.handle
    logging.Logger.handle = lambda logger, record: (records.append(record), handle(logger, record))[1]
    import fairseq  # noqa: F401
    import fairseq.checkpoint_utils  # noqa: F401
    import fairseq.options  # noqa: F401
    import fairseq.sequence_generator  # noqa: F401
    import fairseq.trainer  # noqa: F401
    import numpy  # noqa: F401
    import sacrebleu  # noqa: F401
    import torch  # noqa: F401

    logging.Logger.handle = handle
    _IMPORT_RECORDS.extend(records)
    # importing fairseq configures the root logger (a model module calls basicConfig(level=DEBUG)): the
    # children start from a fresh interpreter's logging and redo that at their first import of fairseq
    global _FAIRSEQ_LOGGING
    if logging.root.handlers:
        handler = logging.root.handlers[0]
        _FAIRSEQ_LOGGING = {"level": logging.root.level,
                            "format": handler.formatter._fmt if handler.formatter else None}
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    channel_in, channel_out = sys.stdin, sys.stdout
    channel_out.write("ready\n")
    channel_out.flush()
    for line in channel_in:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        try:  # (the child does so too: whichever runs first, the group exists before the test may kill it)
            os.setpgid(pid, pid)
        except OSError:  # the child has already exec'd or ended
            pass
        channel_out.write(json.dumps({"pid": pid}) + "\n")
        channel_out.flush()
        _, status = os.waitpid(pid, 0)
        channel_out.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        channel_out.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--entry"]:  # one console script in this process: forkserver.py --entry PATH ARGS...
        run_and_leave("entry", sys.argv[2:])
    serve()
