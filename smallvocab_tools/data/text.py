"""Reading and checking parallel text: UTF-8 (the first line that is not,
named), sentence-aligned pairs (line counts, empty lines failed or dropped),
literal fairseq special symbols warned about; and writing lines."""

from collections import Counter
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple

from smallvocab_tools.data.errors import DataError

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary symbols


def read_lines(path) -> List[str]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing input file: {path}")
    try:
        # fairseq-preprocess reads with universal newlines, where a lone "\r"
        # also ends a line: inside a line it becomes a space, so both programs
        # see the same sentence pairs; a UTF-8 byte-order mark at the start
        # is no text (utf-8-sig drops it): every copy made of the lines,
        # the raw references scored against included, is without it
        with open(path, encoding="utf-8-sig", newline="\n") as f:
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
