"""Output folders of the data-preparation tools and of the CTranslate2
export, written whole or not at all (``atomic_output_dir``): the folder is
replaced only when complete, never a user's folder or one holding files the
tools did not write (``--force`` refuses those), its mode as ``mkdir``'s
under the umask, the temporary folders of killed runs removed; and an output
folder kept apart from the input (``check_dest_apart_from_inputs``); and why
a file or folder a tool is to write cannot be written there, told before the
work that makes it (``output_file_problem``, ``output_folder_problem``)."""

import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from smallvocab_tools.data.errors import DataError

OUTPUT_MARKER = ".smallvocab-output"  # written into every folder the tools below create
# in OUTPUT_MARKER, before the list of the files the tool wrote, one a line
WRITTEN_HEADER = "files it wrote (--force refuses to replace the folder while it holds any other file):"


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


def _nearest_existing(path: Path) -> Path:
    return next(parent for parent in path.parents if parent.exists())


def _unwritable_place(folder: Path) -> Optional[str]:
    """Why nothing can be written into ``folder`` (None when it can): it is a file, it cannot be written, or it
    does not exist and cannot be made (``mkdir -p``: a file on its way, or the nearest folder read-only)."""
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is not a folder: it is a file; choose another path"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"the folder {folder} is not writable; choose another path"
        return None
    above = _nearest_existing(folder)
    if not above.is_dir():
        return f"{folder} cannot be made: {above} is not a folder, it is a file; choose another path"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"{folder} cannot be made: the folder {above} is not writable; choose another path"
    return None


def output_file_problem(path, example: str) -> Optional[str]:
    """Why a tool cannot write the file ``path`` (None when it can): it is a folder (``example``: a file name
    to suggest inside it), its folder does not exist, is a file, or is not writable."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        return f"{path} is a folder; give a file name, e.g. {path / example}"
    if not folder.exists():
        above = _nearest_existing(folder)
        if not above.is_dir():
            return f"the folder {folder} cannot exist: {above} is not a folder, it is a file; choose another path"
        return f"the folder {folder} does not exist; create it (mkdir -p {folder}) or choose another path"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is not writable; choose another path"
    return _unwritable_place(folder)


def output_folder_problem(folder) -> Optional[str]:
    """Why a tool cannot write files into ``folder``, made where it does not exist (None when it can)."""
    return _unwritable_place(Path(folder))


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


def foreign_files(folder, derived=_DERIVED, unmarked=None) -> List[str]:
    """The files in ``folder`` that these tools did not write: those not in
    its ``OUTPUT_MARKER``'s list, less ``derived`` (a pattern of relative
    paths: by default what fairseq and the plugin write into data folders;
    None: nothing).  Without a marker: every file that ``unmarked`` (what a
    tool wrote before it marked its folders) does not match, every file when
    it is None."""
    folder = Path(folder)
    marker = folder / OUTPUT_MARKER
    if not marker.is_file():
        return [path for path in files_in(folder) if unmarked is None or not unmarked.fullmatch(path)]
    lines = marker.read_text(encoding="utf-8", errors="replace").splitlines()
    written = set(lines[lines.index(WRITTEN_HEADER) + 1:]) if WRITTEN_HEADER in lines else None

    def ours(path):
        if path == OUTPUT_MARKER or (derived is not None and derived.fullmatch(path)):
            return True
        return path in written if written is not None else _OLDER_OUTPUTS.fullmatch(path) is not None

    return [path for path in files_in(folder) if not ours(path)]


def refuse_foreign_files(final: Path, shown=None, derived=_DERIVED, unmarked=None):
    foreign = foreign_files(final, derived, unmarked)
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
def atomic_output_dir(final, overwrite=False, derived=_DERIVED, unmarked=None):
    """Yield a temporary folder beside ``final``; rename it to ``final`` only
    when the block succeeds, so that a failed or interrupted run never leaves a
    folder that looks complete.

    An existing ``final`` is an error unless ``overwrite`` (then it is
    replaced only after the new one is complete), and even then only an empty
    folder or one these tools wrote (it holds the ``OUTPUT_MARKER`` file) is
    replaced: a user's own folder never is, nor one of the tools' folders
    holding files they did not write (checked before and again just before
    the replacement; ``derived`` and ``unmarked`` as in ``foreign_files``:
    a folder without the marker is replaced when ``unmarked`` matches every
    file in it).  The marker lists the files written.  A link to a
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
        if unmarked is None and any(final.iterdir()) and not (final / OUTPUT_MARKER).is_file():
            raise DataError(f"{shown} exists and was not written by this project's tools (no {OUTPUT_MARKER} "
                            "file in it), so --force does not replace it: remove it yourself or choose another "
                            "output folder")
        refuse_foreign_files(final, shown, derived, unmarked)
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
            refuse_foreign_files(final, shown, derived, unmarked)
            # a folder set up for the output (a group's, a link's target)
            # keeps the permissions it was given
            tmp.chmod(final.stat().st_mode & 0o7777)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        try:
            tmp.rename(final)
        except BaseException:  # the previous folder back in its place; the new one gone
            old.rename(final)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
