#!/usr/bin/env python3
"""The project's CHANGELOG.md, made from its commits: one section per day (newest first), each commit's subject
and the first paragraph of its body (the why), so that the changelog says what the commit messages say and
nothing else has to be kept by hand.

    python scripts/changelog.py --out CHANGELOG.md            # every commit up to HEAD
    python scripts/changelog.py --since v0.1 --until HEAD     # a range, to standard output

Reads ``git log`` of the repository it is run in (``--repo``); writes ``--out`` whole or not at all (a
temporary file renamed into place)."""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# between the fields of one commit, and between commits (bytes git never writes in a message)
FIELD, RECORD = "\x1f", "\x1e"


def commits(repo: Path, until: str = "HEAD", since: Optional[str] = None) -> List[Tuple[str, str, str, str]]:
    """(short hash, date YYYY-MM-DD, subject, body) of each commit of ``since..until`` (all of ``until``'s history
    without ``since``), newest first."""
    span = f"{since}..{until}" if since else until
    out = subprocess.run(["git", "-C", str(repo), "log", f"--format=%h{FIELD}%cs{FIELD}%s{FIELD}%b{RECORD}", span],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"git log {span} in {repo} failed: {out.stderr.strip() or out.stdout.strip()}")
    found = []
    for record in out.stdout.split(RECORD):
        if record.strip():
            short, date, subject, body = record.strip("\n").split(FIELD, 3)
            found.append((short, date, subject, body))
    return found


# a work-item reference of the project's own ("(#29)", "RESULTS #32:"), not an upstream one ("pytorch/pytorch#38228")
_WORK_ITEM = re.compile(r"\s*\(#\d+\)|\s?(?<![\w/])#\d+\b")


def without_work_items(text: str) -> str:
    """``text`` without the project's work-item numbers (what changed is said in words; the numbers belong to a
    tracker the readers do not see)."""
    return _WORK_ITEM.sub("", text)


def first_paragraph(body: str) -> str:
    """The body's first paragraph on one line (its lines joined), or ""."""
    return " ".join(body.strip().split("\n\n", 1)[0].split()) if body.strip() else ""


def changelog(entries: List[Tuple[str, str, str, str]], head: str) -> str:
    """The markdown of ``entries`` (``commits``' newest first), saying it was made up to ``head``."""
    days: Dict[str, list] = {}  # (insertion order: newest day first)
    for entry in entries:
        days.setdefault(entry[1], []).append(entry)
    lines = ["# Changelog", "",
             f"Made by `scripts/changelog.py` from the commit messages up to {head} (each commit's subject and the",
             "first paragraph of its body); `python scripts/changelog.py --out CHANGELOG.md` brings it up to date.", ""]
    for day, day_entries in days.items():
        lines += [f"## {day}", ""]
        for short, _, subject, body in day_entries:
            lines.append(f"- **{without_work_items(subject)}** ({short})")
            why = without_work_items(first_paragraph(body))
            if why:
                lines += textwrap.wrap(why, width=116, initial_indent="  ", subsequent_indent="  ")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path``, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the git repository (default: this project's)")
    parser.add_argument("--until", default="HEAD", help="the newest commit (default: HEAD)")
    parser.add_argument("--since", help="leave out this commit and its history (e.g. a release tag)")
    parser.add_argument("--out", type=Path, help="write the changelog there (default: standard output)")
    args = parser.parse_args(argv)
    try:
        entries = commits(args.repo, args.until, args.since)
        head = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "--short", args.until],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (ValueError, subprocess.CalledProcessError, FileNotFoundError) as err:
        print(f"changelog.py: {err}", file=sys.stderr)
        return 2
    text = changelog(entries, head)
    if args.out:
        write_whole(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
