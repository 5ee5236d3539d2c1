"""What the plugin adds to fairseq-train's checkpoint saving and loading: two
patches of ``compat.PATCHES``, ``task_state`` (the first and last items below,
for tasks that define the methods: the plugin's) and ``checkpoint_files`` (the
other two, for every task).  Every fairseq 0.12 the plugin accepts takes the
same path.

* **Task state.**  A task with ``checkpoint_state()`` (a dict) has it saved in
  every checkpoint, as ``extra_state[TaskClassName]``, and handed to its
  ``restore_checkpoint_state(state)`` when training resumes; fine-tuning from
  another checkpoint (the first launch of ``--finetune-from-model``, or
  ``--reset-dataloader``) starts afresh, as fairseq does with its own state.
  fairseq added hooks for this (``get_checkpoint_dict`` /
  ``set_checkpoint_dict``, commit e29f53bf, 2023) after the 0.12.2 and 0.12.3
  tags, so with ``fairseq==0.12.2`` a learned baseline relying on them was
  lost on every resume; the plugin wraps ``Trainer.save_checkpoint`` and
  ``checkpoint_utils.load_checkpoint`` instead, and keeps the hooks' place in
  the checkpoint, so checkpoints written through them restore too.
* **Atomic copies.**  fairseq writes ``checkpoint_N.pt`` atomically (a .tmp
  file, then a rename) and then copies it to ``checkpoint_last.pt`` and
  ``checkpoint_best.pt`` in place: a kill during that copy left a truncated
  ``checkpoint_last.pt``.  The copies go to a temporary file that is renamed;
  the temporary files a killed run leaves are removed at the next start.
  Should a checkpoint to resume from still be unreadable (a file damaged some
  other way), the error names the newest other checkpoint in the folder.
* **One trainer per --save-dir.**  Two trainers writing checkpoints to one
  folder overwrite each other's files and one of them dies on the other's
  vanished .tmp file; the second is refused at start, naming the first's pid.
  This, the removal of leftovers and the hints happen in ``Trainer.load_checkpoint``,
  which fairseq calls once its own checks of the arguments have passed, and only
  for a --save-dir that exists (fairseq-train creates it first): a command fairseq
  refuses creates nothing.
* **No checkpoint from nothing.**  Before saving, the task's
  ``check_before_save()`` may refuse (``translation_smallvocab``: when every
  training batch since the last checkpoint was skipped as non-finite), so a
  run gone to NaN never replaces a good checkpoint.
"""

import logging
import os
import re
import shutil

logger = logging.getLogger(__name__)

_installed_task_state = _installed_checkpoint_files = False
_locks = {}  # save dir -> the open lock file (held for the life of the process)


class SaveDirInUse(RuntimeError):
    """Another training process writes checkpoints to the same folder."""


def _task_key(task) -> str:
    return task.__class__.__name__


def _is_local(path) -> bool:
    return "://" not in str(path)


def _fine_tuning(cfg, trainer) -> bool:
    """Whether fairseq's ``load_checkpoint`` starts a fresh data loader (and so
    fresh task state): --reset-dataloader, or --finetune-from-model on its first
    launch (no checkpoint_last in --save-dir yet), as fairseq decides it."""
    if getattr(cfg, "reset_dataloader", False):
        return True
    if getattr(cfg, "finetune_from_model", None) is None or cfg.restore_file != "checkpoint_last.pt":
        return False
    last = os.path.join(cfg.save_dir, f"checkpoint_last{trainer.checkpoint_suffix}.pt")
    return not os.path.exists(last)


def lock_save_dir(cfg, saves: bool):
    """Hold an exclusive lock on --save-dir (``cfg``: fairseq's checkpoint config) for as long as this process
    lives, and remove what killed runs left there; ``saves``: whether this worker writes checkpoints.  Nothing
    happens without a --save-dir that exists."""
    if getattr(cfg, "no_save", False) or not saves:
        return
    try:
        import fcntl
    except ImportError:  # not on POSIX: no advisory locks to use
        return
    save_dir = getattr(cfg, "save_dir", None)
    if not isinstance(save_dir, str) or not _is_local(save_dir) or not os.path.isdir(save_dir):
        return
    folder = os.path.abspath(save_dir)
    if folder in _locks:
        return
    path = os.path.join(folder, ".fairseq-train.lock")
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise SaveDirInUse(
            f"--save-dir {folder} is in use by another training process (pid {owner}, holding {path}): two "
            "trainers writing checkpoints to one folder overwrite each other's files. Give this run its own "
            "--save-dir, or wait for the other to finish.") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _locks[folder] = handle
    _remove_leftovers(folder)


def _remove_leftovers(folder):
    """Delete the temporary checkpoint files of killed runs (a copy's
    ``checkpoint_*.pt.tmp-copy-PID``, fairseq's ``checkpoint*.pt.tmp``): each
    is a whole checkpoint that nothing would ever read or remove.  Called
    with the folder's lock held, so no live trainer is writing one."""
    for name in sorted(os.listdir(folder)):
        if name.startswith("checkpoint") and (".pt.tmp-copy-" in name or name.endswith(".pt.tmp")):
            try:
                os.remove(os.path.join(folder, name))
                logger.info(f"removed {name} from {folder}: a checkpoint file a killed run left half-written")
            except OSError:  # gone meanwhile, or not ours to remove: harmless either way
                pass


def _other_checkpoints(folder, damaged):
    """The folder's other checkpoint files, newest first."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith("checkpoint") and n.endswith(".pt")]
    except OSError:
        return []
    paths = [os.path.join(folder, n) for n in names if os.path.join(folder, n) != os.path.abspath(damaged)]
    return sorted((p for p in paths if os.path.getsize(p) > 0), key=os.path.getmtime, reverse=True)


def _resume_hint(cfg, filename, err):
    """The load error of ``filename``, naming the newest intact-looking checkpoint in --save-dir to resume from
    instead."""
    from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError

    save_dir = getattr(cfg, "save_dir", None)
    if not isinstance(err, CheckpointLoadError) or not isinstance(save_dir, str) or not os.path.isdir(save_dir):
        return None
    folder, damaged = os.path.abspath(save_dir), os.path.abspath(filename)
    others = _other_checkpoints(folder, damaged)
    if not others:
        return None
    newest = others[0]
    return type(err)(  # the same classes as the load error (it is also the error torch raised)
        f"{err}\nTo resume, the newest other checkpoint in {folder} is {os.path.basename(newest)}: pass "
        f"--restore-file {newest} (fairseq reads it from the working directory, so give its whole path), or move "
        f"the damaged {damaged} aside and copy {os.path.basename(newest)} in its place")


ARCHITECTURES_MATCH = "please ensure that the architectures match"
_MISMATCH = re.compile(r"^\s*((?:size mismatch for|Missing key\(s\) in|Unexpected key\(s\) in) .*?)\.?$", re.M)


def _architecture_hint(err):
    """fairseq's "architectures match" failure (a checkpoint loaded strictly into the model the command line
    builds), said with what differs and the command that prints the checkpoint's own flags, instead of a
    state-dict dump; None for any other error."""
    text = str(err)
    if ARCHITECTURES_MATCH not in text:
        return None
    path = re.search(r"checkpoint (.+?); please", text)
    path = path.group(1) if path else "CHECKPOINT"
    found = _MISMATCH.findall(str(err.__context__ or ""))
    shown = "; ".join(line.strip()[:200] for line in found[:3]) + (f" (and {len(found) - 3} more)"
                                                                   if len(found) > 3 else "")
    return RuntimeError(
        f"{path} does not fit the model this command builds: it was trained with other architecture flags"
        + (f" ({shown})" if shown else "") + ". Give this command the checkpoint's own flags, which "
        f"`python scripts/checkpoint_flags.py {path}` prints as one line (--arch and every model flag that "
        "differs from what the arch sets), and leave out any that contradict them.")


def _atomic_path_manager(path_manager):
    """fairseq's PathManager whose ``copy`` writes a local destination through a temporary file and a rename,
    where fairseq's would write it (without iopath fairseq copies whatever ``overwrite`` says; with iopath it
    keeps an existing file unless ``overwrite``), and returns what fairseq's returns."""

    class AtomicCopyPathManager(path_manager):
        @staticmethod
        def copy(src_path, dst_path, overwrite=False):
            from fairseq import file_io

            with_iopath = file_io.IOPathManager is not None
            if not (_is_local(src_path) and _is_local(dst_path)) or (
                    with_iopath and not overwrite and os.path.exists(dst_path)):
                return path_manager.copy(src_path, dst_path, overwrite)
            tmp = f"{dst_path}.tmp-copy-{os.getpid()}"
            try:
                shutil.copyfile(src_path, tmp)
                os.replace(tmp, dst_path)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            return True if with_iopath else dst_path  # iopath's answer, or shutil.copyfile's

    AtomicCopyPathManager.__name__ = path_manager.__name__
    return AtomicCopyPathManager


def trainer_load_checkpoint(fairseq_method):
    """``Trainer.load_checkpoint`` (``fairseq_method``) that first holds --save-dir (``lock_save_dir``) and says
    a failed load with the way on (``_resume_hint``, ``_architecture_hint``)."""

    def load_checkpoint(self, filename, *args, **kwargs):
        cfg = self.cfg.checkpoint
        lock_save_dir(cfg, self.should_save_checkpoint_on_current_rank)
        try:
            return fairseq_method(self, filename, *args, **kwargs)
        except Exception as err:
            hint = _resume_hint(cfg, filename, err)
            if hint is not None:
                raise hint from err  # the load error, itself raised from torch's
            mismatch = _architecture_hint(err)
            if mismatch is None:
                raise
            raise mismatch from None  # one message, with what differs, instead of fairseq's state-dict dump

    load_checkpoint.__wrapped__ = fairseq_method
    return load_checkpoint


def load_checkpoint_with_task_state(fairseq_load):
    """``checkpoint_utils.load_checkpoint`` (``fairseq_load``) that hands a task with
    ``restore_checkpoint_state`` its state from the loaded checkpoint (not when fine-tuning)."""

    def load_checkpoint(cfg, trainer, **passthrough_args):
        restore = getattr(trainer.task, "restore_checkpoint_state", None)
        if restore is None:  # a task without state of its own (every stock task): fairseq's load alone
            return fairseq_load(cfg, trainer, **passthrough_args)
        fresh = _fine_tuning(cfg, trainer)
        extra_state, epoch_itr = fairseq_load(cfg, trainer, **passthrough_args)
        if extra_state is not None and not fresh:
            restore(extra_state.get(_task_key(trainer.task), {}))
        return extra_state, epoch_itr

    load_checkpoint.__wrapped__ = fairseq_load
    return load_checkpoint


def install_task_state():
    """Save and restore the task's own state, and ask the task before saving (once)."""
    global _installed_task_state
    if _installed_task_state:
        return
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    fairseq_save = Trainer.save_checkpoint
    fairseq_save_all = checkpoint_utils.save_checkpoint

    def save_checkpoint(self, filename, extra_state):
        state = getattr(self.task, "checkpoint_state", None)
        if state is not None:
            extra_state = {**extra_state, _task_key(self.task): state()}
        return fairseq_save(self, filename, extra_state)

    def save_checkpoints(cfg, trainer, epoch_itr, val_loss):
        report = getattr(trainer.task, "report_validation", None)
        if report is not None:
            report()
        check = getattr(trainer.task, "check_before_save", None)
        if check is not None:
            check()
        return fairseq_save_all(cfg, trainer, epoch_itr, val_loss)

    save_checkpoint.__wrapped__, save_checkpoints.__wrapped__ = fairseq_save, fairseq_save_all
    Trainer.save_checkpoint = save_checkpoint
    checkpoint_utils.save_checkpoint = save_checkpoints
    checkpoint_utils.load_checkpoint = load_checkpoint_with_task_state(checkpoint_utils.load_checkpoint)
    _installed_task_state = True


def install_checkpoint_files():
    """Atomic copies, one trainer per --save-dir and the hints on a failed load (once)."""
    global _installed_checkpoint_files
    if _installed_checkpoint_files:
        return
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    Trainer.load_checkpoint = trainer_load_checkpoint(Trainer.load_checkpoint)
    checkpoint_utils.PathManager = _atomic_path_manager(checkpoint_utils.PathManager)
    _installed_checkpoint_files = True
