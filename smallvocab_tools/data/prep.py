"""Data preparation helpers shared by the scripts in ``scripts/``: reading and
checking parallel text, writing output folders atomically, sentencepiece
subwords, fairseq-preprocess, and command-line checks (``int_at_least``)."""

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
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and the fix."""


OUTPUT_MARKER = ".smallvocab-output"  # written into every folder the tools below create
# in OUTPUT_MARKER, before the list of the files the tool wrote, one a line
WRITTEN_HEADER = "files it wrote (--force refuses to replace the folder while it holds any other file):"
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary symbols


def check_dest_apart_from_inputs(dest, inputs, option="--dest"):
    """Refuse an output folder that is, contains or lies inside an input
    folder: replacing it (--force) would delete the input, and writing inside
    it mixes the output with the user's files."""
    dest = Path(dest).resolve()
    for folder in inputs:
        folder = Path(folder).resolve()
        if dest == folder:
            how = "is"
        elif dest in folder.parents:
            how = "contains"
        elif folder in dest.parents:
            how = "lies inside"
        else:
            continue
        raise DataError(f"{option} {dest} {how} the input folder {folder}; choose an output folder outside "
                        "the input (nothing was written)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(final: Path):
    """Remove the temporary folders that killed runs for the same destination
    left beside it: ``.NAME.tmp-PID-*`` and ``.NAME.old-PID`` of processes no
    longer running, and ``.NAME.tmp-XXXXXXXX`` of older versions of these
    tools (random suffix, no PID).  Nothing else is touched."""
    if not final.parent.is_dir():
        return
    ours = re.compile(rf"\.{re.escape(final.name)}\.(?:tmp|old)-(\d+)(?:-[A-Za-z0-9_]+)?")
    legacy = re.compile(rf"\.{re.escape(final.name)}\.tmp-[a-z0-9_]{{8}}")
    for path in final.parent.iterdir():
        m = ours.fullmatch(path.name)
        stale = (m is not None and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1)))) or (
            m is None and legacy.fullmatch(path.name) is not None)
        if stale and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


# What fairseq and the plugin write into a data folder after these tools made
# it: fairseq-preprocess run again there, candidate lists (--candidates-dir
# DATA/..., export_candidates.py) and their temporaries.  All derived from the
# data, so --force replaces them with the rest.
_DERIVED = re.compile(r"dict\.[^/]+\.txt|[^/]+\.[^/]+-[^/]+\.[^/]+\.(?:bin|idx)|preprocess\.log"
                      r"|(?:.+/)?\.?[^/]+\.k\d+(?:\.nogold)?\.(?:npy|json)(?:\.tmp-\d+)?")
# Older versions wrote the marker without the list of files: what they wrote
_OLDER_OUTPUTS = re.compile(r"(?:(?:raw|subword)/)?(?:train|valid|test)\.[^/]+|stats\.json|spm\.[^/]+\.(?:model|vocab)"
                            r"|lexicon\.tsv|corpus\.json|config\.json")


def files_in(folder) -> List[str]:
    """Relative POSIX paths of everything under ``folder`` but folders
    (links are listed, not followed), sorted."""
    found = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found += [(rel / name).as_posix() for name in files + links]
    return sorted(found)


def foreign_files(folder) -> List[str]:
    """The files in ``folder`` that these tools did not write: those not in
    its ``OUTPUT_MARKER``'s list (every file when there is no marker), less
    what fairseq and the plugin write into data folders."""
    folder = Path(folder)
    marker = folder / OUTPUT_MARKER
    if not marker.is_file():
        return files_in(folder)
    lines = marker.read_text(encoding="utf-8", errors="replace").splitlines()
    written = set(lines[lines.index(WRITTEN_HEADER) + 1:]) if WRITTEN_HEADER in lines else None

    def ours(path):
        if path == OUTPUT_MARKER or _DERIVED.fullmatch(path):
            return True
        return path in written if written is not None else _OLDER_OUTPUTS.fullmatch(path) is not None

    return [path for path in files_in(folder) if not ours(path)]


def refuse_foreign_files(final: Path, shown=None):
    foreign = foreign_files(final)
    if foreign:
        more = f" and {len(foreign) - 10} more" if len(foreign) > 10 else ""
        raise DataError(f"{shown or final} holds {len(foreign)} file(s) that these tools did not write: "
                        f"{', '.join(foreign[:10])}{more}; --force replaces the whole folder, so it would delete "
                        f"them: move them out of {final} (or delete them yourself) and run again, or choose another "
                        "output folder (nothing was changed)")


def current_umask() -> int:
    mask = os.umask(0o022)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def chmod_like_mkdir(folder: Path):
    """Give a ``tempfile.mkdtemp`` folder the permissions ``mkdir`` would
    have: mkdtemp makes it 0700 whatever the umask, so that data prepared for
    a group would be readable by its owner alone.  The special bits (a
    set-group-ID inherited from the parent) are kept."""
    special = folder.stat().st_mode & 0o7000
    folder.chmod(special | (0o777 & ~current_umask()))


@contextlib.contextmanager
def atomic_output_dir(final, overwrite=False):
    """Yield a temporary folder beside ``final``; rename it to ``final`` only
    when the block succeeds, so that a failed or interrupted run never leaves a
    folder that looks complete.

    An existing ``final`` is an error unless ``overwrite`` (then it is
    replaced only after the new one is complete), and even then only an empty
    folder or one these tools wrote (it holds the ``OUTPUT_MARKER`` file) is
    replaced: a user's own folder never is, nor one of the tools' folders
    holding files they did not write (checked before and again just before
    the replacement).  The marker lists the files written.  A link to a
    folder is followed: the output is written at its target, the link kept.
    Temporary folders
    that killed runs left for ``final`` are removed first.  Callers with input
    folders check ``check_dest_apart_from_inputs`` before they read anything."""
    final, shown = Path(final), str(final)
    if final.is_symlink():
        # a link to a folder (often on a larger disk) is the folder for the
        # user: the output is written there and the link left as it is
        try:
            target = final.resolve(strict=True)
        except FileNotFoundError:
            raise DataError(f"{final} is a link to {os.readlink(final)}, which does not exist; create that folder "
                            "(or remove the link) and run again") from None
        except (OSError, RuntimeError) as err:  # a loop: RuntimeError before Python 3.13
            raise DataError(f"{final} is a link that cannot be followed ({err}); fix or remove it") from None
        if not target.is_dir():
            raise DataError(f"{final} is a link to the file {target}, not a folder; remove the link or choose "
                            "another output folder")
        final, shown = target, f"{final} (a link to {target})"
    if final.exists():
        if not overwrite:
            raise DataError(f"{shown} already exists; remove it or pass --force to replace it")
        if not final.is_dir():
            raise DataError(f"{shown} exists and is not a folder; --force replaces only output folders of "
                            "these tools: remove it yourself or choose another output folder")
        if any(final.iterdir()) and not (final / OUTPUT_MARKER).is_file():
            raise DataError(f"{shown} exists and was not written by this project's tools (no {OUTPUT_MARKER} "
                            "file in it), so --force does not replace it: remove it yourself or choose another "
                            "output folder")
        refuse_foreign_files(final, shown)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        written = "".join(f"{path}\n" for path in files_in(tmp))
        (tmp / OUTPUT_MARKER).write_text(f"written by {Path(sys.argv[0]).name or 'python'} "
                                         "(fairseq-smallvocab); --force may replace this folder\n"
                                         f"{WRITTEN_HEADER}\n{written}")
        chmod_like_mkdir(tmp)
        if final.exists():  # files the user put there while this ran
            refuse_foreign_files(final, shown)
            # a folder set up for the output (a group's, a link's target)
            # keeps the permissions it was given
            tmp.chmod(final.stat().st_mode & 0o7777)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def read_lines(path) -> List[str]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing input file: {path}")
    try:
        # fairseq-preprocess reads with universal newlines, where a lone "\r"
        # also ends a line: inside a line it becomes a space, so both programs
        # see the same sentence pairs
        with open(path, encoding="utf-8", newline="\n") as f:
            return [line.rstrip("\r\n").replace("\r", " ") for line in f]
    except UnicodeDecodeError:
        raise DataError(f"{path}: {first_non_utf8_line(path)}; convert the file to UTF-8 "
                        "(e.g. iconv -f LATIN1 -t UTF-8)") from None


def first_non_utf8_line(path) -> str:
    """Where a file stops being UTF-8: 'line N, column C is not UTF-8 (bytes ...)'."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start:err.end]
                return f"line {number}, byte {err.start + 1} of the line is not UTF-8 ({bad!r})"
    return "not UTF-8 text"


def warn_special_tokens(path, lines: Sequence[str], log=print) -> int:
    """Warn about literal fairseq special symbols (<s>, <pad>, </s>, <unk>) in
    raw text: fairseq-preprocess silently binarizes them as the special ids,
    not as words.  Returns how many were found."""
    found, numbers = Counter(), []
    for number, line in enumerate(lines, start=1):
        hits = [tok for tok in line.split() if tok in SPECIAL_TOKENS]
        if hits:
            found.update(hits)
            numbers.append(number)
    total = sum(found.values())
    if total:
        kinds = ", ".join(f"{tok} x{n}" for tok, n in found.most_common())
        more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
        log(f"warning: {path}: {total} literal special token(s) ({kinds}) on line(s) "
            f"{', '.join(map(str, numbers[:5]))}{more}: fairseq binarizes them as its special symbols, not as "
            "words; remove or rewrite them if they are text")
    return total


def read_parallel(src_path, tgt_path, empty="fail") -> Tuple[List[str], List[str], int]:
    """Read a sentence-aligned pair of files.

    Returns (source lines, target lines, number of pairs dropped).  Line counts
    must match.  A pair where either side is empty (or only whitespace) is
    dropped with ``empty="drop"``; with ``empty="fail"`` it is an error naming
    the file and the 1-based line numbers."""
    if empty not in ("fail", "drop"):
        raise ValueError(f"empty must be 'fail' or 'drop', not {empty!r}")
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}; "
            "the files must be sentence-aligned, one sentence per line")
    bad = [i for i, (s, t) in enumerate(zip(src, tgt)) if not s.strip() or not t.strip()]
    if bad and empty == "fail":
        where = []
        for i in bad[:10]:
            sides = [str(p) for p, lines in ((src_path, src), (tgt_path, tgt)) if not lines[i].strip()]
            where.append(f"line {i + 1} ({', '.join(sides)})")
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise DataError(
            f"{len(bad)} empty line(s): {'; '.join(where)}{more}; fix the data or pass "
            "--empty-lines drop to drop those sentence pairs")
    if bad:
        drop = set(bad)
        src = [s for i, s in enumerate(src) if i not in drop]
        tgt = [t for i, t in enumerate(tgt) if i not in drop]
    return src, tgt, len(bad)


def write_lines(path, lines: Iterable[str]):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


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


def dictionary_size(path) -> int:
    """Number of real words in a fairseq dict.txt (no specials, no padding)."""
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("madeupword"):
                n += 1
    return n


def zipf_slope(counts: Sequence[int], top: Optional[int] = None):
    """Least-squares slope of log(frequency) against log(rank)."""
    import numpy as np  # here: the command lines that import this module's checks load without numpy

    freq = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    freq = freq[freq > 0][:top]
    ranks = np.arange(1, len(freq) + 1)
    return float(np.polyfit(np.log(ranks), np.log(freq), 1)[0])


def tail_stats(counts: Iterable[int]) -> Dict:
    """How heavy the rare-word tail of a word-count distribution is: the share
    of types seen once and at most three times, the share of tokens covered by
    the 10% most frequent types, and the Zipf slope."""
    freqs = sorted(counts, reverse=True)
    n = max(1, len(freqs))
    return {"singleton_share": round(sum(1 for c in freqs if c == 1) / n, 4),
            "at_most_3_share": round(sum(1 for c in freqs if c <= 3) / n, 4),
            "top10pct_token_share": round(sum(freqs[: len(freqs) // 10]) / max(1, sum(freqs)), 4),
            "zipf_slope": round(zipf_slope(freqs), 3)}


def corpus_stats(raw_dir, src, tgt, splits: Dict[str, str], dict_dir: Optional[Path] = None) -> Dict:
    """Sentence, token, type and length statistics of raw text splits, and the
    out-of-vocabulary rate against fairseq dictionaries when ``dict_dir`` is
    given."""
    dicts = {}
    if dict_dir is not None:
        for lang in (src, tgt):
            with open(Path(dict_dir) / f"dict.{lang}.txt", encoding="utf-8") as f:
                dicts[lang] = {line.split(" ", 1)[0] for line in f}
    stats = {"languages": [src, tgt], "splits": {}}
    for role, prefix in splits.items():
        entry = {}
        for lang in (src, tgt):
            lines = read_lines(Path(raw_dir) / f"{prefix}.{lang}")
            counts = Counter(w for line in lines for w in line.split())
            lengths = [len(line.split()) for line in lines]
            tokens = sum(lengths)
            side = {"sentences": len(lines), "tokens": tokens, "types": len(counts),
                    "mean_len": round(tokens / max(1, len(lines)), 2),
                    "min_len": min(lengths, default=0), "max_len": max(lengths, default=0)}
            if role == "train" and len(counts) > 10:
                side.update(tail_stats(counts.values()))
            if lang in dicts:
                oov = sum(c for w, c in counts.items() if w not in dicts[lang])
                side["oov_rate"] = round(oov / max(1, tokens), 5)
            entry[lang] = side
        stats["splits"][role] = entry
    if dict_dir is not None:
        stats["dictionary_words"] = {
            lang: dictionary_size(Path(dict_dir) / f"dict.{lang}.txt") for lang in (src, tgt)}
    return stats


def format_stats(stats: Dict) -> str:
    src, tgt = stats["languages"]
    rows = [f"{'split':<8}{'lang':<6}{'sents':>8}{'tokens':>11}{'types':>9}{'len mean/min/max':>19}"
            f"{'oov':>9}"]
    for role, entry in stats["splits"].items():
        for lang in (src, tgt):
            s = entry[lang]
            oov = f"{100 * s['oov_rate']:.2f}%" if "oov_rate" in s else "-"
            rows.append(f"{role:<8}{lang:<6}{s['sentences']:>8}{s['tokens']:>11}{s['types']:>9}"
                        f"{s['mean_len']:>10}/{s['min_len']}/{s['max_len']:<5}{oov:>9}")
    if "dictionary_words" in stats:
        dw = stats["dictionary_words"]
        rows.append("dictionary (words, without specials): " + ", ".join(f"{k}={v}" for k, v in dw.items()))
    train = stats["splits"].get("train", {})
    slopes = [f"{lang}={train[lang]['zipf_slope']}" for lang in (src, tgt) if "zipf_slope" in train.get(lang, {})]
    if slopes:
        rows.append("Zipf slope of train (log freq vs log rank): " + ", ".join(slopes))
    return "\n".join(rows)


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
    parser.add_argument("--workers", type=int_at_least(1), default=1, help="fairseq-preprocess's processes")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")


def prepare(raw_dir, dest, src, tgt, splits, min_count=None, subword="none", sp_vocab_size=8000,
            sp_model_type="unigram", empty_lines="fail", workers=1, force=False, log=print):
    """The work behind the CLI; ``splits`` maps train/valid/test to file
    prefixes in ``raw_dir``.  Returns the statistics dict."""
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
            for lang in (src, tgt):
                model = train_sentencepiece(texts["train"][lang], tmp / f"spm.{lang}",
                                                 sp_vocab_size, sp_model_type)
                for role, sides in texts.items():
                    write_lines(text_dir / f"{role}.{lang}", encode_sentencepiece(model, sides[lang]))
            log(f"sentencepiece ({sp_model_type}, {sp_vocab_size}) models: spm.{src}.model, spm.{tgt}.model")
        roles = {role: role for role in texts}
        fairseq_preprocess(text_dir, tmp, src, tgt, roles, min_count=min_count, workers=workers)
        stats = corpus_stats(text_dir, src, tgt, roles, dict_dir=tmp)
        stats.update(min_count=min_count, subword=subword, dropped_pairs=dropped, source=str(raw_dir))
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
