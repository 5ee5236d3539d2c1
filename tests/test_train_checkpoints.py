"""fairseq-train's checkpoints as the plugin extends them (train_checkpoints.py):
atomic copies, one trainer per --save-dir (after fairseq's own checks, only in a
folder that exists), the way back from a damaged checkpoint_last.pt, no
checkpoint from a stretch of non-finite batches.  The
task state's round trip through fairseq-train runs in test_reinforce_cli.py."""

import fcntl
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils, metrics
from translation_helpers import mt_task

import fairseq_smallvocab  # noqa: F401  (installs the wrappers)
from fairseq_smallvocab.compat import train_checkpoints
from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError
from fairseq_smallvocab.criterions.smallvocab_reinforce import SmallVocabReinforceConfig, SmallVocabReinforceCriterion


def test_the_plugin_does_not_rely_on_fairseqs_task_checkpoint_hooks(tiny_bin):
    """fairseq 0.12.2 has no get_checkpoint_dict / set_checkpoint_dict: the
    task's state goes through the plugin's own wrappers on every version, so
    the round trip tested on this fairseq is the one 0.12.2 takes."""
    task = mt_task(tiny_bin, small_vocab_size=0)
    assert not hasattr(task, "get_checkpoint_dict") and not hasattr(task, "set_checkpoint_dict")
    assert checkpoint_utils.load_checkpoint.__module__ == train_checkpoints.__name__


def test_copies_to_checkpoint_last_are_atomic(tmp_path, monkeypatch):
    """A copy killed halfway leaves the previous checkpoint_last.pt whole (fairseq copied in place)."""
    src, dst = tmp_path / "checkpoint_3_90.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old state")

    def killed(a, b):
        with open(b, "wb") as f:
            f.write(b"ne")
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfile", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old state"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dst.name, src.name])  # no temporary left
    monkeypatch.undo()
    assert checkpoint_utils.PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == src.read_bytes()


def test_a_copy_returns_and_overwrites_as_fairseqs_own(tmp_path):
    """overwrite=False onto an existing file: the atomic copy writes (or keeps) it and answers as fairseq's own
    PathManager does (without iopath: copies anyway, returns the destination)."""
    from fairseq import file_io

    done = []
    for manager, name in ((file_io.PathManager, "fairseq"), (checkpoint_utils.PathManager, "plugin")):
        src, dst = tmp_path / f"{name}-new.pt", tmp_path / f"{name}-last.pt"
        src.write_bytes(b"new")
        dst.write_bytes(b"old")
        answer = manager.copy(str(src), str(dst))
        done.append((answer if isinstance(answer, bool) else answer.replace(name, ""), dst.read_bytes()))
    assert done[0] == done[1]


def _cfg(save_dir, **overrides):
    from fairseq.dataclass.configs import CheckpointConfig

    cfg = CheckpointConfig(save_dir=str(save_dir))
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def _load(cfg, filename="checkpoint_last.pt", fairseq_load=lambda self, filename, *a, **k: None):
    """Trainer.load_checkpoint as the plugin wraps it, around ``fairseq_load`` (nothing to load by default), on a
    trainer of ``cfg`` (fairseq's checkpoint config)."""
    trainer = SimpleNamespace(cfg=SimpleNamespace(checkpoint=cfg), should_save_checkpoint_on_current_rank=True)
    return train_checkpoints.trainer_load_checkpoint(fairseq_load)(trainer, os.path.join(cfg.save_dir, filename))


def test_the_plugins_trainer_load_checkpoint_is_installed():
    from fairseq.trainer import Trainer

    assert Trainer.load_checkpoint.__module__ == train_checkpoints.__name__
    assert Trainer.load_checkpoint.__wrapped__.__module__ == "fairseq.trainer"


def test_a_second_trainer_on_the_same_save_dir_is_refused(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    other = open(save / ".fairseq-train.lock", "w")  # another trainer's lock
    other.write("4242\n")
    other.flush()
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(train_checkpoints.SaveDirInUse, match=r"in use by another training process \(pid 4242"):
            _load(_cfg(save))
    finally:
        other.close()
    assert _load(_cfg(save)) is None
    assert (save / ".fairseq-train.lock").read_text() == f"{os.getpid()}\n"
    train_checkpoints._locks.pop(str(save)).close()


def test_the_temporary_files_of_a_killed_run_are_removed_at_the_next_start(tmp_path):
    """A kill during a checkpoint copy left checkpoint_*.pt.tmp-copy-PID (a whole checkpoint) in the
    save folder forever; the next trainer on the folder (holding its lock) removes it, and only it."""
    save = tmp_path / "ckpt"
    save.mkdir()
    leftovers = ["checkpoint_last.pt.tmp-copy-31337", "checkpoint_best.pt.tmp-copy-2", "checkpoint3.pt.tmp"]
    kept = ["checkpoint_last.pt", "checkpoint_2_40.pt", "notes.tmp-copy-1", "checkpoint.txt"]
    for name in leftovers + kept:
        (save / name).write_bytes(b"x")
    _load(_cfg(save, restore_file="checkpoint_2_40.pt"), "checkpoint_2_40.pt")
    train_checkpoints._locks.pop(str(save)).close()
    assert sorted(p.name for p in save.iterdir()) == sorted(kept + [".fairseq-train.lock"])


def test_without_a_save_dir_that_exists_nothing_is_locked_created_or_removed(tmp_path):
    """fairseq-train creates --save-dir before it loads; a trainer whose folder is missing (or None, as in
    fairseq's own tests) loads as fairseq alone does."""
    missing = tmp_path / "missing"
    assert _load(_cfg(missing)) is None
    assert not missing.exists() and not train_checkpoints._locks
    cfg = _cfg(missing)
    cfg.save_dir = None
    trainer = SimpleNamespace(cfg=SimpleNamespace(checkpoint=cfg), should_save_checkpoint_on_current_rank=True)
    assert train_checkpoints.trainer_load_checkpoint(lambda self, f: "loaded")(trainer, "x.pt") == "loaded"


def test_a_command_fairseq_refuses_creates_nothing_in_the_save_dir(tmp_path):
    """fairseq checks --finetune-from-model against the --reset-* flags before it loads: its error comes first,
    and the folder holds what it held (no lock file, a killed run's leftovers still there)."""
    from unittest.mock import MagicMock

    save = tmp_path / "ckpt"
    save.mkdir()
    (save / "checkpoint3.pt.tmp").write_bytes(b"x")
    cfg = _cfg(save, finetune_from_model=str(tmp_path / "start.pt"), reset_optimizer=True)
    with pytest.raises(ValueError, match="--finetune-from-model can not be set together with"):
        checkpoint_utils.load_checkpoint(cfg, MagicMock())
    assert sorted(p.name for p in save.iterdir()) == ["checkpoint3.pt.tmp"]


def test_a_damaged_checkpoint_last_names_the_intact_one_to_resume_from(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    torch.save({"model": {}}, save / "checkpoint_1_40.pt")
    (save / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointLoadError) as err:
        _load(_cfg(save, no_save=True), fairseq_load=lambda self, f, *a: checkpoint_utils.load_checkpoint_to_cpu(f))
    assert "checkpoint_last.pt" in str(err.value) and f"--restore-file {save / 'checkpoint_1_40.pt'} " in str(err.value)
    assert isinstance(err.value.__cause__, CheckpointLoadError)  # the load's own error, itself torch's


def _training_logs(task, crit, finite):
    crit.train()
    logs = [{"nonfinite": 0 if ok else 1, "finite_sentences": 8 if ok else 0, "finite_samples": 8 if ok else 0,
             "loss": 1.0 if ok else 0.0} for ok in finite]
    with metrics.aggregate(new_root=True) as agg:
        task.reduce_metrics(logs, crit)
        return agg.get_smoothed_values()


def test_no_checkpoint_is_saved_when_every_batch_since_the_last_was_skipped(tiny_bin):
    task = mt_task(tiny_bin, small_vocab_size=0)
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(rl_baseline="none"))
    values = _training_logs(task, crit, [False, False])
    assert values["loss"] == float("inf") and values["nonfinite"] == 2  # not fairseq's placeholder -1
    with pytest.raises(FloatingPointError, match=r"every training batch since the last checkpoint \(2\)"):
        task.check_before_save()
    _training_logs(task, crit, [False, True, False])
    task.check_before_save()  # one finite batch: saved
    crit.eval()
    with metrics.aggregate(new_root=True):
        task.reduce_metrics([{"nonfinite": 1, "finite_sentences": 0}], crit)  # validation: not counted
    task.check_before_save()
