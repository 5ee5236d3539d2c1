"""Data preparation shared by the scripts in ``scripts/``: ``prepare`` (parallel
text -> sentencepiece subwords where asked -> fairseq-preprocess, into an
output folder written whole or not at all), fairseq-preprocess in a process
that does not outlive this one, and the command lines' options and checks
(``add_prepare_args``, ``int_at_least``, ``add_config_args``).  Reading and
checking the text: ``text``; output folders: ``output_dir``; statistics:
``stats``; the error they raise: ``errors.DataError``."""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Sequence

from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.output_dir import atomic_output_dir, check_dest_apart_from_inputs
from smallvocab_tools.data.stats import corpus_stats
from smallvocab_tools.data.text import read_parallel, warn_special_tokens, write_lines


def train_sentencepiece(lines: Sequence[str], model_prefix, vocab_size, model_type="unigram"):
    """Train a sentencepiece model on ``lines``; returns the .model path."""
    import sentencepiece as spm

    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        for line in lines:
            f.write(line + "\n")
        text = f.name
    try:
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=str(model_prefix), vocab_size=vocab_size,
            model_type=model_type, character_coverage=1.0, bos_id=-1, eos_id=-1,
            unk_id=0, pad_id=-1, hard_vocab_limit=False, minloglevel=2,
            num_threads=os.cpu_count() or 1)
    except RuntimeError as err:  # every character of the text is a piece (character_coverage=1.0)
        short = re.search(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)", str(err))
        if short is None:
            raise
        raise DataError(f"--sp-vocab-size {vocab_size} is too small for {Path(model_prefix).name}: its training "
                        f"text's characters and <unk> need {short.group(1)} pieces; give --sp-vocab-size "
                        f"{short.group(1)} or more") from None
    finally:
        os.unlink(text)
    return Path(f"{model_prefix}.model")


def encode_sentencepiece(model_path, lines: Sequence[str]) -> List[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_path))
    return [" ".join(pieces) for pieces in sp.encode(list(lines), out_type=str)]


def fairseq_preprocess(raw_dir, dest_dir, src, tgt, splits: Dict[str, str], min_count=2,
                       workers=1, joined_dictionary=False, extra_args: Sequence[str] = ()):
    """Binarize ``raw_dir/{split}.{src,tgt}`` with fairseq-preprocess
    (``tgt`` None: ``{split}.{src}`` alone, with --only-source).

    ``splits`` maps fairseq's roles (train/valid/test) to file prefixes.
    ``min_count``: keep words seen at least this many times in training (1 keeps
    every word); the rest become <unk>."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src,
           *(["--target-lang", tgt] if tgt else ["--only-source"]),
           "--destdir", str(dest_dir), "--workers", str(workers),
           "--thresholdsrc", str(min_count), "--thresholdtgt", str(min_count)]
    for role in ("train", "valid", "test"):
        if role in splits:
            cmd += [f"--{role}pref", str(Path(raw_dir) / splits[role])]
    if joined_dictionary:
        cmd.append("--joined-dictionary")
    cmd += list(extra_args)
    result = run_dying_with_parent(cmd)
    if result.returncode != 0:
        raise DataError(f"fairseq-preprocess failed ({' '.join(cmd)}):\n{result.stderr[-4000:]}")
    return result


def run_dying_with_parent(cmd) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` whose process
    does not outlive this one: it runs in a process group of its own (with
    what it starts: fairseq-preprocess's --workers), stopped as a whole when
    this process is interrupted (KeyboardInterrupt, or SIGTERM inside
    ``exit_on_sigterm``) and waited for; on Linux the kernel also signals it
    when this process dies in a way that runs no code here (SIGKILL)."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          preexec_fn=_die_with_parent()) as proc:
        try:
            stdout, stderr = proc.communicate()
        except BaseException:
            _stop_group(proc)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _stop_group(proc, grace=5.0):
    """SIGTERM to ``proc``'s process group, SIGKILL after ``grace`` seconds; ``proc`` waited for."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)  # its group: proc is not waited for yet, so the group id is still its own
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _die_with_parent():
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when this
    process ends (Linux's prctl PR_SET_PDEATHSIG); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec():
        prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call: no signal would come
            os._exit(1)

    return preexec


@contextlib.contextmanager
def exit_on_sigterm():
    """While the block runs, SIGTERM raises SystemExit(143) (128 + 15, the
    status a process ended by SIGTERM reports) instead of ending the process
    at once: the cleanup of ``atomic_output_dir`` (its temporary folder
    removed) and of ``run_dying_with_parent`` (its child stopped) then runs,
    as on Ctrl-C.  Only the main thread may set a handler: elsewhere the block
    runs unchanged, as it does where SIGTERM is ignored (that stays so)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def int_at_least(low: int):
    """An argparse type: a whole number >= ``low``.  argparse names the option
    in its error and exits with status 2, so that a count of 0 or less is
    refused on the command line rather than failing deep inside a run."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is too small: give {low} or more")
        return value

    return parse


def add_prepare_args(parser):
    """The options of prepare(), for the data-preparation scripts."""
    parser.add_argument("--min-count", type=int_at_least(1), default=None,
                        help="keep tokens seen at least this often in train, map the rest to <unk> "
                             "(default: 2 for words, the paper's setting; 1 for subwords)")
    parser.add_argument("--subword", choices=["none", "sentencepiece"], default="none",
                        help="'sentencepiece': train one model per language on train and encode "
                             "every split before binarizing (the paper's SW setting)")
    parser.add_argument("--sp-vocab-size", type=int_at_least(1), default=8000,
                        help="with --subword sentencepiece: the pieces of each language's model")
    parser.add_argument("--sp-model-type", choices=["unigram", "bpe"], default="unigram")
    parser.add_argument("--empty-lines", choices=["fail", "drop"], default="fail",
                        help="a sentence pair with an empty side: fail naming the line, or drop "
                             "it and report the count")
    parser.add_argument("--joined-dictionary", action="store_true",
                        help="one dictionary for both languages (needed by fairseq's --share-all-embeddings); with "
                             "--subword sentencepiece, one model trained on both languages' training text")
    parser.add_argument("--workers", type=int_at_least(1), default=1, help="fairseq-preprocess's processes")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")


def prepare(raw_dir, dest, src, tgt, splits, min_count=None, subword="none", sp_vocab_size=8000,
            sp_model_type="unigram", empty_lines="fail", workers=1, force=False, log=print, joined_dictionary=False):
    """The work behind the CLI; ``splits`` maps train/valid/test to file
    prefixes in ``raw_dir``.  Returns the statistics dict.  ``joined_dictionary``:
    one dictionary for both languages (and, with sentencepiece, one model,
    written as both spm.SRC.model and spm.TGT.model)."""
    if src == tgt:
        raise DataError(f"source and target languages must differ (both {src!r})")
    if "train" not in splits:
        raise DataError("a train split is required (it defines the dictionaries)")
    if min_count is None:
        min_count = 1 if subword == "sentencepiece" else 2
    if min_count < 1:
        raise DataError(f"--min-count must be >= 1, got {min_count}")
    raw_dir, dest = Path(raw_dir), Path(dest)
    check_dest_apart_from_inputs(dest, [raw_dir])
    texts, dropped = {}, {}
    for role, prefix in splits.items():  # read and check everything before writing
        s, t, n_drop = read_parallel(raw_dir / f"{prefix}.{src}", raw_dir / f"{prefix}.{tgt}",
                                          empty=empty_lines)
        if not s:
            raise DataError(f"{raw_dir / prefix}.{{{src},{tgt}}} holds no sentence pair")
        for lang, lines in ((src, s), (tgt, t)):
            warn_special_tokens(raw_dir / f"{prefix}.{lang}", lines, log)
        texts[role] = {src: s, tgt: t}
        dropped[role] = n_drop
        if n_drop:
            log(f"{role}: dropped {n_drop} sentence pair(s) with an empty side")
    with atomic_output_dir(dest, overwrite=force) as tmp:
        (tmp / "raw").mkdir()
        for role, sides in texts.items():
            for lang, lines in sides.items():
                write_lines(tmp / "raw" / f"{role}.{lang}", lines)
        text_dir = tmp / "raw"
        if subword == "sentencepiece":
            text_dir = tmp / "subword"
            text_dir.mkdir()
            if joined_dictionary:  # one model, named for each language
                model = train_sentencepiece(texts["train"][src] + texts["train"][tgt], tmp / f"spm.{src}",
                                            sp_vocab_size, sp_model_type)
                shutil.copyfile(model, tmp / f"spm.{tgt}.model")
            for lang in (src, tgt):
                model = (tmp / f"spm.{lang}.model" if joined_dictionary else
                         train_sentencepiece(texts["train"][lang], tmp / f"spm.{lang}", sp_vocab_size, sp_model_type))
                for role, sides in texts.items():
                    write_lines(text_dir / f"{role}.{lang}", encode_sentencepiece(model, sides[lang]))
            log(f"sentencepiece ({sp_model_type}, {sp_vocab_size}) models: spm.{src}.model, spm.{tgt}.model"
                + (" (one model, trained on both languages)" if joined_dictionary else ""))
        roles = {role: role for role in texts}
        fairseq_preprocess(text_dir, tmp, src, tgt, roles, min_count=min_count, workers=workers,
                           joined_dictionary=joined_dictionary)
        stats = corpus_stats(text_dir, src, tgt, roles, dict_dir=tmp)
        stats.update(min_count=min_count, subword=subword, dropped_pairs=dropped, source=str(raw_dir),
                     joined_dictionary=joined_dictionary)
        if subword == "sentencepiece":
            stats.update(sp_vocab_size=sp_vocab_size, sp_model_type=sp_model_type)
        write_json(tmp / "stats.json", stats)
    return stats


def add_config_args(parser, config_cls):
    """One --option per field of a generator's config dataclass (its default and type)."""
    from dataclasses import fields

    defaults = config_cls()
    for f in fields(config_cls):
        value = getattr(defaults, f.name)
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(value), default=value,
                            help=f"default: {value}")


def config_from_args(args, config_cls):
    from dataclasses import fields

    return config_cls(**{f.name: getattr(args, f.name) for f in fields(config_cls)})
