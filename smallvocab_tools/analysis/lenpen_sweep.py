"""The length penalty of beam search (fairseq-generate's ``--lenpen``), chosen
on a dev set for one checkpoint: each value's BLEU and length ratio, the best
printed and recorded (JSON) for the decode of the test set.

One beam search serves every value, exactly. fairseq's ``SequenceGenerator``
uses the length penalty only when a hypothesis ends: its score, the sum of its
token log-probabilities, is divided by length ** lenpen to rank the finished
hypotheses. Which hypotheses finish, and when the search stops, depend on the
unnormalized scores alone. So one search with ``--nbest BEAM --unnormalized``
holds each sentence's BEAM finished hypotheses with their sums, and ranking
them by sum / length ** lenpen gives, for any lenpen, the hypothesis
fairseq-generate ``--lenpen`` returns (the length counts every token of the
hypothesis, eos and a forced prefix included, as fairseq's does: the
``P-`` line's entries). The tests compare it with fairseq-generate run at each
value.

    python scripts/sweep_lenpen.py --path CKPT --data DATA --beam 5 -- \\
        --user-dir fairseq_smallvocab --task translation_smallvocab -s en -t de --cpu

BLEU is the project's one BLEU (``smallvocab_tools.analysis.bleu``: sacrebleu's
corpus BLEU, ``--tokenize`` default 13a, its signature printed and recorded)
against the references (fairseq-generate's ``T-`` lines, or ``--ref``, the raw
reference file in the subset's order). It is of words: hypotheses that are
subword pieces are refused (pass ``--post-process sentencepiece`` after
``--``). Of equal BLEU, the value closest to 1 (fairseq's default) is kept.
Where the best is the grid's smallest or largest value, the grid is widened
beyond it, a step of the grid's spacing at that edge at a time (free: the same
beam search), until the best lies inside it (``--no-widen``: the grid as given).
"""

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from smallvocab_tools.analysis import bleu as one_bleu

DEFAULT_LENPENS = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0, 2.5, 3.0)
# fairseq-generate flags the sweep sets itself, or that change what a beam search is
OWN_FLAGS = {"--path": "--path", "--beam": "--beam", "--nbest": "the sweep's own --nbest (= --beam)",
             "--lenpen": "--lenpens", "--unnormalized": "nothing (the sweep sets it)",
             "--gen-subset": "--subset", "--sampling": "nothing: the sweep is for beam search",
             "--diverse-beam-groups": "nothing: the sweep is for plain beam search",
             "--diversity-rate": "nothing: the sweep is for plain beam search",
             "--match-source-len": "nothing: it fixes the length the penalty weighs",
             "--quiet": "nothing: the sweep reads the hypotheses"}


@dataclass
class Hypothesis:
    score: float  # the sum of the token log-probabilities (base 2, as fairseq-generate prints it)
    length: int  # tokens, eos (and a forced prefix) included: what fairseq divides by
    text: str


@dataclass
class Sentence:
    hyps: List[Hypothesis] = field(default_factory=list)
    ref: Optional[str] = None


def parse_lenpens(text: str) -> List[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--lenpens {text!r}: give comma-separated numbers, e.g. 0.6,0.8,1.0,1.2") from None
    if not values or any(not math.isfinite(v) for v in values):
        raise SystemExit(f"--lenpens {text!r}: give at least one finite number, e.g. 0.6,0.8,1.0,1.2")
    return sorted(set(values))


def check_generate_args(extra: Sequence[str]):
    """Refuse a fairseq-generate flag the sweep sets itself, or one that makes the search something else."""
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name in OWN_FLAGS:
            raise SystemExit(f"{name} after '--': the sweep sets it itself; use {OWN_FLAGS[name]} instead")


def parse_generate(stdout: str) -> Dict[int, Sentence]:
    """fairseq-generate's output with --nbest: each sentence's hypotheses (H- and P- lines, in order) and its
    reference (T- line)."""
    sentences: Dict[int, Sentence] = {}
    pending: Dict[int, Hypothesis] = {}
    for line in stdout.splitlines():
        m = re.match(r"^([HPT])-(\d+)\t(.*)$", line)
        if not m:
            continue
        kind, i, rest = m.group(1), int(m.group(2)), m.group(3)
        sentence = sentences.setdefault(i, Sentence())
        if kind == "T":
            sentence.ref = rest
        elif kind == "H":
            score, _, text = rest.partition("\t")
            pending[i] = Hypothesis(float(score), 0, text)
        else:  # the positional scores of the hypothesis just printed: one per token, eos included
            hyp = pending.pop(i)
            hyp.length = len(rest.split())
            sentence.hyps.append(hyp)
    return sentences


def pick(sentence: Sentence, lenpen: float) -> Hypothesis:
    """fairseq's choice under ``lenpen``: the highest score / length ** lenpen (the first of equal ones)."""
    return max(sentence.hyps, key=lambda h: h.score / h.length ** lenpen)


PIECES_FIX = ("fairseq-generate printed subword pieces: pass --post-process sentencepiece (or --post-process "
              "subword_nmt for BPE) after '--', so that BLEU is of words")


def sweep(sentences: Dict[int, Sentence], lenpens: Sequence[float], refs: List[str],
          tokenize: str = one_bleu.TOKENIZE):
    """Each lenpen's corpus BLEU (``bleu.corpus``) and length ratio: a list of dicts, in the order of
    ``lenpens``; hypotheses or references that are subword pieces are refused."""
    order = sorted(sentences)
    rows = []
    for lenpen in lenpens:
        hyps = [pick(sentences[i], lenpen).text for i in order]
        score = one_bleu.corpus(hyps, refs, tokenize, what=f"the hypotheses at --lenpen {lenpen:g} ({PIECES_FIX})")
        rows.append({"lenpen": lenpen, "bleu": round(score.bleu, 2), "len_ratio": round(score.length_ratio, 4),
                     "hypotheses": hyps})
    return rows


MAX_WIDENING = 20  # steps beyond an edge at most (a best still at the new edge is then said, as for a given grid)


def widened(sentences: Dict[int, Sentence], lenpens: Sequence[float], refs: List[str],
            tokenize: str = one_bleu.TOKENIZE):
    """``sweep`` over ``lenpens``, then, while the best is the smallest or the largest value tried, over one more
    value beyond it (the grid's spacing at that edge; one value grids step by 0.2): (rows in lenpen order, the
    values tried)."""
    values = sorted(lenpens)
    rows = sweep(sentences, values, refs, tokenize)
    for _ in range(MAX_WIDENING):
        chosen = best(rows)
        if len(values) < 2 and values[0] != chosen["lenpen"]:
            break
        if chosen["lenpen"] == values[0]:
            step = values[1] - values[0] if len(values) > 1 else 0.2
            new = round(values[0] - step, 6)
        elif chosen["lenpen"] == values[-1]:
            step = values[-1] - values[-2] if len(values) > 1 else 0.2
            new = round(values[-1] + step, 6)
        else:
            break
        rows += sweep(sentences, [new], refs, tokenize)
        values = sorted(values + [new])
        rows.sort(key=lambda row: row["lenpen"])
    return rows, values


def best(rows) -> dict:
    """The highest BLEU; of equal ones, the lenpen closest to 1 (fairseq's default), then the smaller."""
    return max(rows, key=lambda r: (r["bleu"], -abs(r["lenpen"] - 1.0), -r["lenpen"]))


def default_out(path: Path, subset: str) -> Path:
    return path.with_name(f"{path.stem}.lenpen-{subset}.json")


RECORD_KEYS = {"checkpoint", "subset", "beam", "sweep", "best_lenpen"}  # what marks a file as a sweep's record
MAX_RECORD_BYTES = 10 ** 7  # far above any record: a larger file is something else (a checkpoint), left unread


def hyps_name(lenpen: float) -> str:
    return f"hyp.lenpen{lenpen:g}.txt"


HYPS_FILE = re.compile(r"^hyp\.lenpen-?[\d.]+(e-?\d+)?\.txt$")  # what ``hyps_name`` writes


def save(folder: Path, rows) -> None:
    """Each row's hypotheses into ``folder`` (``hyps_name``), and none of another sweep's values left there
    (a widened grid's: its files would pass for this sweep's)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {hyps_name(row["lenpen"]) for row in rows}
    for path in folder.iterdir():
        if HYPS_FILE.match(path.name) and path.name not in written:
            path.unlink()
    for row in rows:
        write_atomic(folder / hyps_name(row["lenpen"]), "\n".join(row["hypotheses"]) + "\n")


def is_sweep_record(path: Path) -> bool:
    """Whether ``path`` holds a record this script wrote (one a rerun may replace)."""
    if not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:  # a pipe or device is not read either
        return False
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(record, dict) and RECORD_KEYS <= record.keys()


def check_outputs(out: Path, save_hyps: Optional[Path], lenpens: Sequence[float]):
    """Refuse, before the beam search, outputs the sweep cannot write or would write over something else: an
    --out that is a folder, lies in a missing or unwritable folder or under a file, or is a file other than an
    earlier sweep's record (a rerun replaces that); a --save-hyps that is a file, cannot be made or written, or
    holds files other than the sweep's own hypotheses (``HYPS_FILE``; an earlier sweep's are replaced: ``save``)."""
    from smallvocab_tools.data.output_dir import files_in, output_file_problem, output_folder_problem

    problem = output_file_problem(out, "lenpen.json")
    if problem:
        raise SystemExit(f"--out {out}: {problem}")
    if out.exists() and not is_sweep_record(out):
        raise SystemExit(f"--out {out} exists and is not a record of scripts/sweep_lenpen.py, so the sweep would "
                         "write over it: give another --out (e.g. beside it, lenpen.json), or remove the file "
                         "yourself if it is not needed")
    if save_hyps is None:
        return
    problem = output_folder_problem(save_hyps)
    if problem:
        raise SystemExit(f"--save-hyps {save_hyps}: {problem}")
    if save_hyps.is_dir():  # (its own files of other values, a widened grid's, are replaced: ``save``)
        other = [name for name in files_in(save_hyps) if not HYPS_FILE.match(name)]
        if other:
            more = f" and {len(other) - 10} more" if len(other) > 10 else ""
            raise SystemExit(f"--save-hyps {save_hyps} holds {len(other)} file(s) this sweep does not write: "
                             f"{', '.join(other[:10])}{more}; its hypotheses would mix with them (a folder of the "
                             "sweep's own hyp.lenpenV.txt files is reused, its files replaced): give an empty or new "
                             "folder, or empty this one yourself")


def write_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(
        description="Choose fairseq-generate's --lenpen on a dev set: one beam search, every value's BLEU and "
                    "length ratio, the best printed and recorded. Flags after '--' go to fairseq-generate "
                    "(--user-dir, --task, -s / -t, --cpu, the model's candidates, ...).")
    parser.add_argument("--path", required=True, type=Path, help="the checkpoint")
    parser.add_argument("--data", required=True, help="fairseq-generate's data folder")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--subset", default="valid", help="the dev subset (fairseq's --gen-subset; default valid)")
    parser.add_argument("--lenpens", default=",".join(str(v) for v in DEFAULT_LENPENS),
                        help="the values to try, comma-separated (default %(default)s)")
    parser.add_argument("--ref", type=Path, help="the references, one per line in the subset's order (default: "
                                                 "fairseq-generate's T- lines, where unknown words read <unk>)")
    one_bleu.add_tokenize_option(parser)
    parser.add_argument("--no-widen", action="store_true",
                        help="keep the grid as given where the best is at its edge (default: widen it beyond)")
    parser.add_argument("--out", type=Path, help="the record (JSON; default: beside the checkpoint, "
                                                 "CKPT_STEM.lenpen-SUBSET.json)")
    parser.add_argument("--save-hyps", type=Path, help="also write each value's hypotheses into this folder, "
                                                       "hyp.lenpenV.txt, in the subset's order")
    args = parser.parse_args(argv)
    lenpens = parse_lenpens(args.lenpens)
    check_generate_args(extra)
    if args.beam < 2:
        raise SystemExit(f"--beam {args.beam}: a length penalty ranks a beam's finished hypotheses; give --beam >= 2")
    if not args.path.is_file():
        raise SystemExit(f"--path {args.path}: no such checkpoint")
    refs = None
    if args.ref is not None:
        if not args.ref.is_file():
            raise SystemExit(f"--ref {args.ref}: no such file")
        refs = args.ref.read_text(encoding="utf-8").splitlines()
    out = args.out or default_out(args.path, args.subset)
    check_outputs(out, args.save_hyps, lenpens)  # said before the beam search, not after it

    command = ["fairseq-generate", args.data, "--path", str(args.path), "--gen-subset", args.subset,
               "--beam", str(args.beam), "--nbest", str(args.beam), "--unnormalized", *extra]
    print(f"one beam search: {shlex.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"fairseq-generate failed (exit {done.returncode}): its message is above")
    sentences = parse_generate(done.stdout)
    if not sentences:
        raise SystemExit(f"fairseq-generate printed no hypothesis for --subset {args.subset}: is it the data's?")
    short = [i for i, s in sentences.items() if not s.hyps]
    if short:
        raise SystemExit(f"sentences without a hypothesis in fairseq-generate's output (e.g. {short[:3]})")
    if refs is None:
        refs = [sentences[i].ref or "" for i in sorted(sentences)]
    elif len(refs) != len(sentences):
        raise SystemExit(f"--ref {args.ref} has {len(refs)} lines, the subset {len(sentences)} sentences: give the "
                         f"references of --subset {args.subset}, one per line")
    try:
        rows, tried = (sweep(sentences, lenpens, refs, args.tokenize), lenpens) if args.no_widen else \
            widened(sentences, lenpens, refs, args.tokenize)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    chosen = best(rows)
    if len(tried) > len(lenpens):
        added = ", ".join(f"{v:g}" for v in tried if v not in lenpens)
        print(f"the best of --lenpens was at its edge: the grid was widened with {added} (the same beam search)",
              file=sys.stderr)
    print(f"{'lenpen':>7} {'BLEU':>7} {'len ratio':>9}")
    for row in rows:
        mark = "  <- best" if row is chosen else ""
        print(f"{row['lenpen']:>7g} {row['bleu']:>7.2f} {row['len_ratio']:>9.4f}{mark}")
    if args.save_hyps is not None:
        save(args.save_hyps, rows)
    signature = one_bleu.signature(args.tokenize)
    record = {"checkpoint": str(args.path), "data": str(args.data), "subset": args.subset, "beam": args.beam,
              "tokenize": args.tokenize, "bleu_signature": signature,
              "references": str(args.ref) if args.ref else "T- lines",
              "generate_args": extra, "sentences": len(sentences),
              "sweep": [{k: v for k, v in row.items() if k != "hypotheses"} for row in rows],
              "best_lenpen": chosen["lenpen"], "best_bleu": chosen["bleu"], "best_len_ratio": chosen["len_ratio"],
              "lenpens_given": list(lenpens), "lenpens_tried": list(tried),
              "best_at_edge": len(rows) > 1 and chosen["lenpen"] in (tried[0], tried[-1])}
    write_atomic(out, json.dumps(record, indent=1) + "\n")
    print(f"best --lenpen {chosen['lenpen']:g}: {args.subset} BLEU {chosen['bleu']:.2f} ({signature}), length "
          f"ratio {chosen['len_ratio']:.4f}; recorded in {out}")
    if record["best_at_edge"]:
        side = "smallest" if chosen["lenpen"] == tried[0] else "largest"
        fix = "widen --lenpens" if args.no_widen else f"the grid was widened {MAX_WIDENING} steps: widen --lenpens"
        print(f"warning: the best is the {side} value tried ({chosen['lenpen']:g}): a value beyond it may be better; "
              f"{fix}", file=sys.stderr)
    return record
