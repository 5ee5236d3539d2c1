"""What the data-preparation tests share: the commands (``PREPARE``, ``MULTI``), the splits, and small
helpers on the raw corpus and output folders."""

import shutil

from helpers import REPO

SPLITS = {"train": "train", "valid": "valid", "test": "test"}
PREPARE = REPO / "scripts" / "prepare_data.py"
MULTI = REPO / "scripts" / "prepare_multi30k.py"


def write_lines(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def copy_raw(tiny_raw, dest):
    shutil.copytree(tiny_raw, dest)
    return dest


def leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def snapshot(folder):
    return sorted((p.relative_to(folder).as_posix(), p.read_bytes()) for p in folder.rglob("*") if p.is_file())
