"""What the tests share besides fixtures (conftest.py holds those): the
repository's paths, ``run`` (a command in a subprocess, for tests marked
``slow``), ``sigint_default`` (for a child that a test interrupts),
``launch_two`` (two workers of one distributed fairseq-train),
the tiny fairseq-train settings of the predictor, builders of dictionaries
and batches, the captioning tests' settings, and the REINFORCE tests'
model, batch and criterion (``_setup``, ``_crit``)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USER_DIR = REPO / "fairseq_smallvocab"
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


# set by conftest.py for each test before its fixtures: whether the test is marked slow
RUNNING = {"slow": True}


def load_script(script):
    """A script imported as a module, to test its functions in-process: ``script`` is its name in scripts/
    (without .py) or its Path."""
    import importlib.util

    path = script if isinstance(script, Path) else REPO / "scripts" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# How long one command a test starts may run (seconds; SMALLVOCAB_TEST_DEADLINE sets it): past it, the command
# and every process it started are killed and the test fails naming it, instead of the suite waiting for CI's
# limit. The longest command of the slow tier (the quick start end to end) takes a few minutes beside a busy CPU.
DEADLINE = float(os.environ.get("SMALLVOCAB_TEST_DEADLINE", "1200"))


def kill_group(pid):
    """Kill the process group that ``pid`` leads (the command and whatever it started), if it is still there."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reaped(proc, args, stdin=None, deadline=None):
    """``proc``'s (stdout, stderr) once it has exited (``proc`` leads its own process group: started with
    ``start_new_session=True``). Past ``deadline`` seconds (``DEADLINE``), or when the test is interrupted, the
    group is killed and waited for: nothing a test starts outlives it; a deadline passed fails the test."""
    try:
        return proc.communicate(stdin, timeout=DEADLINE if deadline is None else deadline)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"{args} still ran after {DEADLINE if deadline is None else deadline:g} s: killed "
                             f"with the processes it started\nstdout:\n{(stdout or '')[-3000:]}"
                             f"\nstderr:\n{(stderr or '')[-3000:]}") from None
    except BaseException:
        kill_group(proc.pid)
        proc.communicate()
        raise


def run(args, cwd=None, check=True, stdin=None, env=None):
    """Run a command with this interpreter's environment; returns the
    CompletedProcess (stdout/stderr as text).  ``args[0]`` may be a fairseq
    console script name or a path to one of the project's scripts.  Python
    entry points run in a process forked from a server that has imported
    torch and fairseq once (``forkserver.py``; ``SMALLVOCAB_TEST_FORK=0``
    runs every command as a plain subprocess).  Only tests marked ``slow``
    (and their fixtures) may: ``make test-fast`` leaves them out."""
    if not RUNNING["slow"]:
        raise AssertionError(f"{args[0]}: a test that runs commands in subprocesses must be marked "
                             "@pytest.mark.slow (make test-fast leaves those out)")
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    args = [str(a) for a in args]
    if args[0].endswith(".py"):
        args = [sys.executable, *args]
    kind = _forkable(args)
    if kind == "entry":  # a console script, by its path as the shell would find it
        result = _SERVER.run(kind, [str(Path(sys.executable).parent / args[0]), *args[1:]], cwd, stdin, full_env)
    elif kind is not None:  # python script.py ..., python -m module ...
        result = _SERVER.run(kind, args[1:] if kind == "script" else args[2:], cwd, stdin, full_env)
    else:
        proc = subprocess.Popen(args, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=full_env, start_new_session=True)
        stdout, stderr = reaped(proc, args, stdin)
        result = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}"
                             f"\nstderr:\n{result.stderr[-5000:]}")
    return result


def sigint_default():
    """``preexec_fn`` of a child that a test sends SIGINT: the child starts with SIGINT's default action (Python's
    KeyboardInterrupt), whatever this process has.  A shell that is not interactive starts its background jobs
    (``make test &``) with SIGINT ignored; pytest, its xdist workers and their children inherit that, and a tool
    rightly keeps an ignored SIGINT, so that the test's SIGINT would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    """A TCP port of this machine that nothing listens on (for a distributed run's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# fairseq-train run by ``forkserver.py --entry``: in its own process, leaving without the interpreter's teardown
LEAVING_FAIRSEQ_TRAIN = [sys.executable, str(Path(__file__).with_name("forkserver.py")), "--entry",
                         str(Path(sys.executable).parent / "fairseq-train")]

# Python code that starts a daemon thread busy in torch, as fairseq's data-buffer thread collating the next
# batches when --max-update stops a run: in the interpreter's teardown it aborts the process (exit -6,
# pytorch/pytorch#38228)
BUSY_TORCH_THREAD = """
import threading

import torch


def _collate():
    a = torch.randn(1000)
    while True:
        a + a


threading.Thread(target=_collate, daemon=True).start()
"""


def launch_two(args):
    """Two fairseq-train workers (ranks 0 and 1) of one distributed run with ``args`` (the training's own,
    the backend's included), each a subprocess with one thread: their outputs, each asserted to have exited
    0. Each runs fairseq-train through ``forkserver.py --entry``, which leaves without the interpreter's
    teardown as the fork server's commands do: in that teardown gloo's run-loop thread may still be
    releasing the last collective's tensors and abort a worker that has finished its work. Only tests
    marked ``slow`` may (as ``run``)."""
    if not RUNNING["slow"]:
        raise AssertionError("two fairseq-train workers: a test that runs them must be marked @pytest.mark.slow")
    port = free_port()
    procs = []
    for rank in (0, 1):
        ranked = [*LEAVING_FAIRSEQ_TRAIN, *map(str, args), "--distributed-init-method", f"tcp://127.0.0.1:{port}",
                  "--distributed-world-size", "2", "--distributed-rank", str(rank), "--distributed-no-spawn",
                  "--device-id", str(rank)]
        procs.append(subprocess.Popen(ranked, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True))
    import time

    end = time.monotonic() + DEADLINE
    try:  # one deadline for both ranks; a rank that waits for a dead one is killed with it
        outs = [reaped(p, f"rank {rank}", deadline=max(0.0, end - time.monotonic()))[0]
                for rank, p in enumerate(procs)]
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p.pid)
                p.communicate()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    return outs


def _forkable(args):
    """How forkserver.py runs the command: "script" (python script.py), "module" (python -m), "entry" (a
    console script beside this interpreter), or None: a plain subprocess."""
    if os.environ.get("SMALLVOCAB_TEST_FORK", "1") == "0":
        return None
    if args[0] == sys.executable:
        if len(args) > 1 and args[1].endswith(".py"):
            return "script"
        return "module" if len(args) > 2 and args[1] == "-m" else None
    if "/" not in args[0] and args[0].startswith("fairseq-") and (Path(sys.executable).parent / args[0]).exists():
        return "entry"
    return None


class _ForkServer:
    """This test process's ``forkserver.py`` (started at its first command, stopped at exit)."""

    def __init__(self):
        self.proc = None
        self.dir = None

    def _start(self):
        import atexit
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="smallvocab-forkserver-"))
        self.log = open(self.dir / "server.log", "w")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("forkserver.py"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.pending = b""
        if self._answer(600) != "ready":  # it imports torch and fairseq
            raise RuntimeError(f"forkserver.py did not start: {(self.dir / 'server.log').read_text()[-3000:]}")
        atexit.register(self.stop)

    def _answer(self, timeout):
        """The server's next line (without its newline), "" if it has ended, or None after ``timeout`` seconds.
        Read from the pipe's descriptor, not a buffered file, so that a line already read stays visible."""
        import select
        import time

        end = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def stop(self):
        import shutil

        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.log.close()
            self.proc = None
            shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, kind, args, cwd, stdin, env):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        files = {name: self.dir / name for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(stdin or "")
        request = {"kind": kind, "argv": args, "cwd": str(cwd or os.getcwd()), "env": env,
                   **{name: str(path) for name, path in files.items()}}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        forked = self._answer(60)
        if not forked:
            raise RuntimeError(f"forkserver.py died: {(self.dir / 'server.log').read_text()[-3000:]}")
        pid = json.loads(forked)["pid"]
        try:
            answer = self._answer(DEADLINE)
        except BaseException:  # interrupted: the command does not outlive the test
            kill_group(pid)
            self._answer(60)
            raise
        if answer is None:
            kill_group(pid)
            self._answer(60)
            raise AssertionError(f"{args} still ran after {DEADLINE:g} s: killed with the processes it started"
                                 f"\nstdout:\n{files['stdout'].read_text(errors='replace')[-3000:]}"
                                 f"\nstderr:\n{files['stderr'].read_text(errors='replace')[-3000:]}")
        if not answer:
            raise RuntimeError(f"forkserver.py died: {(self.dir / 'server.log').read_text()[-3000:]}")
        returncode = json.loads(answer)["returncode"]
        return subprocess.CompletedProcess(args, returncode, files["stdout"].read_text(errors="replace"),
                                           files["stderr"].read_text(errors="replace"))


_SERVER = _ForkServer()


def make_dictionary(n):
    """A fairseq Dictionary of ``n`` entries: the 4 special symbols, then w0, w1, ..."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def translation_batch(lengths, t_src, t_tgt, k, v_src, tgt_dict):
    """A random batch as fairseq's translation data gives it: sources of
    ``lengths`` words (eos included), left-padded to ``t_src``; targets of
    ``t_tgt`` (example 3 ends early: padding after its eos) and the decoder
    input; and K candidates per example with the special symbols at their own
    ids, then the example's gold words, then other words.  Returns
    (src, prev_output_tokens, target, candidates)."""
    import torch

    pad, eos, nspecial, bsz = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.nspecial, len(lengths)
    src = torch.randint(4, v_src, (bsz, t_src))
    for b, n in enumerate(lengths.tolist()):
        src[b, : t_src - n] = pad
        src[b, -1] = eos
    tgt = torch.randint(4, len(tgt_dict), (bsz, t_tgt))
    tgt[:, -1] = eos
    tgt[3, 3:] = pad
    tgt[3, 2] = eos
    prev = torch.cat([torch.full((bsz, 1), eos), tgt[:, :-1]], dim=1).masked_fill(tgt.eq(pad), pad)
    return src, prev, tgt, candidate_batch(k, len(tgt_dict), gold=tgt, nspecial=nspecial)


def candidate_batch(k, vocab_size, gold=None, bsz=None, nspecial=4, shuffle=True):
    """B x K candidate rows as training lists give them (the plugin's
    ``candidates.space.candidate_rows``): the special ids, then each row's gold
    words (``gold[b]``'s ids >= nspecial, in order of first occurrence), then
    other words in a random order (torch's generator) or, without
    ``shuffle``, in id order."""
    import numpy as np
    import torch

    from fairseq_smallvocab.candidates.space import candidate_rows

    lists = []
    for b in range(len(gold) if gold is not None else bsz):
        first = [t for t in dict.fromkeys(gold[b].tolist()) if t >= nspecial] if gold is not None else []
        order = torch.randperm(vocab_size).tolist() if shuffle else range(vocab_size)
        lists.append(first + [t for t in order if t >= nspecial and t not in first][: k - nspecial - len(first)])
    return torch.from_numpy(candidate_rows(np.array(lists), k, nspecial, "test candidates").astype(np.int64))


VP_TRAIN = ["--user-dir", USER_DIR, "--task", "vocab_prediction", "--arch", "vocab_predictor", "--criterion",
            "vocab_prediction_bce", "--recall-at", "50", "--optimizer", "adagrad", "--lr", "0.08",
            "--batch-size", "64", "--max-epoch", "2", "--cpu", "--no-progress-bar", "--num-workers", "0",
            "--no-epoch-checkpoints"]




# -- captioning (tests/test_caption_*.py) ------------------------------------------------------------

def _caption_config():
    from smallvocab_tools.data.synthetic_captions import CaptionConfig

    return CaptionConfig(n_objects=60, n_attributes=20, n_places=15, train_images=150, valid_images=20,
                         test_images=16, feature_dim=256, active_units=8)


TINY = _caption_config()  # the tiny synthetic captioning set of the captioning fixtures
CAP = ["--user-dir", USER_DIR, "--task", "captioning_smallvocab"]
TRAIN = ["--arch", "lstm_caption_smallvocab", "--embed-dim", "24", "--optimizer", "adam", "--lr", "0.01",
         "--batch-size", "32", "--cpu", "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints",
         "--seed", "1"]
DECODE = ["--cpu", "--batch-size", "8", "--max-len-b", "30", "--small-vocab-size", "40"]


def caption_task(cap_bin, **overrides):
    """captioning_smallvocab set up on a prepared folder."""
    from fairseq_smallvocab.tasks.captioning_smallvocab import CaptioningSmallVocabConfig, CaptioningSmallVocabTask

    cfg = CaptioningSmallVocabConfig(data=str(cap_bin), **overrides)
    cfg.train_subset, cfg.dataset_impl = "train", None
    return CaptioningSmallVocabTask.setup_task(cfg)


def copy_folder(folder, tmp_path):
    """A copy of a prepared folder that a test may damage."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(folder, data)
    return data


def cut_file(path, keep):
    """Keep the first ``keep`` bytes of a file (negative: drop that many from its end)."""
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    return len(data)


def poke_token(prefix, sentence, value):
    """Set the first token of a sentence in a binarized split to ``value``."""
    import numpy as np
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    index = MMapIndexedDataset.Index(f"{prefix}.idx")
    pointer, dtype = int(index._pointers[sentence]), index.dtype
    del index
    tokens = np.memmap(f"{prefix}.bin", dtype=dtype, mode="r+")
    tokens[pointer // np.dtype(dtype).itemsize] = value
    tokens.flush()
    del tokens


# -- REINFORCE (tests/test_reinforce_*.py, test_distributed_logs.py) -------------------------------------------------

# the REINFORCE tests' sizes: source and target vocabularies, batch, source and target lengths (eos included),
# candidates per example (K), the model's dimension
V_SRC, V_TGT, B, T_SRC, T_TGT, K, D = 30, 50, 6, 6, 5, 14, 10


def _crit(task, **options):
    """The criterion as fairseq builds it: from its config (fairseq's defaults but for ``options``)."""
    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )

    return SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(**options))


def reinforce_step(model, task, sample, baseline, n, seed=6, **flags):
    """(loss, every trainable parameter's gradient, logging output) of one REINFORCE step (lambda 0.3,
    samples of at most 7 tokens, ``n`` per input, the criterion's other ``flags``), with a fresh criterion
    (a learned baseline learns at every call) and the draws of ``seed``."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    # the tests of a device mode run it on a GPU (see settings)
    flags["rl_engine"] = ",".join(filter(None, [flags.get("rl_engine"), "untested_cuda_modes=on"]))
    crit = _crit(task, ce_weight=0.3, rl_baseline=baseline, max_sample_len=7, rl_samples=n, **flags)
    model.zero_grad()
    torch.manual_seed(seed)
    loss, _, log = crit(model, sample)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in params], log


def assert_same_step(got, want):
    """Two ``reinforce_step`` results: the same loss, and the same gradients up to float32's rounding at each
    gradient's own scale. Two float32 computations of one gradient differ by rounding in proportion to the
    largest terms summed into it, not to each element: a gradient of entries up to 27 carries differences of
    about 1e-5 in all its entries, its near-zero ones included, and how large depends on the order of the
    sums (torch's threads). So each tensor is held to 1e-5 of its largest entry (plus 1e-5), which a wrong
    step (a term lost, a position or a chunk misplaced) exceeds by orders of magnitude."""
    import torch

    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    assert len(got[1]) == len(want[1])
    for i, (a, b) in enumerate(zip(got[1], want[1])):
        assert a.shape == b.shape, (i, a.shape, b.shape)
        diff, scale = float((a - b).abs().max()), float(b.abs().max())
        assert diff <= 1e-5 + 1e-5 * scale, \
            f"gradient {i} {tuple(b.shape)}: differs by {diff:.3g} at a scale of {scale:.3g}"


def _setup(small=True, seed=0):
    """(model, task, sample): a restricted lstm_smallvocab of random weights (eos likely enough that samples
    end at different steps), its task, and a batch of B sentence pairs whose targets use a few words
    (example 2 ends early), with K candidates per example unless not ``small`` (the full vocabulary)."""
    from types import SimpleNamespace

    import torch

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
    from fairseq_smallvocab.models.restricted import restrict

    torch.manual_seed(seed)
    src_dict, tgt_dict = make_dictionary(V_SRC), make_dictionary(V_TGT)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    model = restrict(LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=D, dropout=0.0), task))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.4)
        model.decoder.output_bias[2] = 3.0  # eos likely enough that samples end at different steps
    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    src = torch.randint(4, V_SRC, (B, T_SRC))
    src[:, -1] = eos
    tgt = torch.randint(4, 12, (B, T_TGT))  # a few words, so that samples share n-grams with the gold
    tgt[:, -1] = eos
    tgt[2, 3:] = torch.tensor([eos, pad])
    prev = torch.cat([torch.full((B, 1), eos), tgt[:, :-1]], 1).masked_fill(tgt.eq(pad), pad)
    net_input = {"src_tokens": src, "src_lengths": torch.full((B,), T_SRC), "prev_output_tokens": prev}
    if small:
        net_input["candidates"] = candidate_batch(K, V_TGT, gold=tgt, shuffle=False)
    sample = {"id": torch.arange(B), "net_input": net_input, "target": tgt, "nsentences": B,
              "ntokens": int(tgt.ne(pad).sum())}
    return model, task, sample


def summed_as_fairseq_does(logs):
    """One worker's view after fairseq's all-reduce of ``logs`` (both workers' batches)."""
    import torch

    return [{key: torch.as_tensor(sum(log[key] for log in logs if key in log), dtype=torch.double)
             for key in logs[0]}]


def reduced(reduce, logs):
    """The smoothed values ``reduce`` logs for ``logs``, in a fresh metrics aggregator."""
    from fairseq import metrics

    with metrics.aggregate(new_root=True) as agg:
        reduce(logs)
        return agg.get_smoothed_values()


def same_reduced_values(reduce, logs):
    """What ``reduce`` makes of two workers' ``logs``, the same as of their sum as fairseq all-reduces it
    (asserted key by key); returns the values."""
    import pytest

    plain, summed = reduced(reduce, logs), reduced(reduce, summed_as_fairseq_does(logs))
    assert set(plain) == set(summed)
    for key, value in plain.items():
        assert float(summed[key]) == pytest.approx(float(value), rel=1e-6, abs=1e-9), key
    return plain


def ranked_choices(monkeypatch, rank_of_row):
    """Replace the sampler's draw by a deterministic one: row r takes the
    ``rank_of_row(r)``-th most likely word of its step (so the same sample can
    be drawn in a batch of N samples per input and alone)."""
    import torch

    from fairseq_smallvocab.engine import loop

    def draw(logits, with_entropy=False, with_probs=False, probs_out=None, uniform=None):
        ranks = torch.tensor([rank_of_row(r) for r in range(logits.size(0))])
        choice = logits.argsort(-1, descending=True).gather(1, ranks.unsqueeze(1))
        if with_probs:  # as the real draw: the softmax written into probs_out when given
            probs = logits.softmax(-1) if probs_out is None else torch.softmax(logits, -1, out=probs_out)
            return choice, torch.zeros(logits.size(0)), probs
        return (choice, torch.zeros(logits.size(0))) if with_entropy else choice

    monkeypatch.setattr(loop, "sample_categorical", draw)


# a tiny Transformer's flags for the recipes' ARCH_ARGS
TINY_TRANSFORMER = ("--arch transformer --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 "
                    "--decoder-embed-dim 16 --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 "
                    "--encoder-attention-heads 2 --decoder-attention-heads 2 --share-decoder-input-output-embed")
