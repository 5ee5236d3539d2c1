"""fairseq-train's checkpoints as the plugin extends them (train_checkpoints.py):
atomic copies, one trainer per --save-dir, the way back from a damaged
checkpoint_last.pt, no checkpoint from a stretch of non-finite batches.  The
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


def _trainer(load=None):
    return SimpleNamespace(checkpoint_suffix="", should_save_checkpoint_on_current_rank=True,
                           task=SimpleNamespace(), load_checkpoint=load)


def _cfg(save_dir, **overrides):
    from fairseq.dataclass.configs import CheckpointConfig

    cfg = CheckpointConfig(save_dir=str(save_dir))
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def test_a_second_trainer_on_the_same_save_dir_is_refused(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    other = open(save / ".fairseq-train.lock", "w")  # another trainer's lock
    other.write("4242\n")
    other.flush()
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(train_checkpoints.SaveDirInUse, match=r"in use by another training process \(pid 4242"):
            checkpoint_utils.load_checkpoint(_cfg(save), _trainer())
    finally:
        other.close()
    fresh = lambda *a, **k: None  # noqa: E731  (a trainer with nothing to load)
    trainer = _trainer(fresh)
    iterator = SimpleNamespace(epoch=1)
    trainer.get_train_iterator, trainer.lr_step = lambda **k: iterator, lambda epoch: None
    assert checkpoint_utils.load_checkpoint(_cfg(save), trainer) == (None, iterator)
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
    trainer = _trainer(lambda *a, **k: None)
    iterator = SimpleNamespace(epoch=1)
    trainer.get_train_iterator, trainer.lr_step = lambda **k: iterator, lambda epoch: None
    checkpoint_utils.load_checkpoint(_cfg(save, restore_file="checkpoint_2_40.pt"), trainer)
    train_checkpoints._locks.pop(str(save)).close()
    assert sorted(p.name for p in save.iterdir()) == sorted(kept + [".fairseq-train.lock"])


def test_a_damaged_checkpoint_last_names_the_intact_one_to_resume_from(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    torch.save({"model": {}}, save / "checkpoint_1_40.pt")
    (save / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 truncated")
    trainer = _trainer(lambda filename, *a, **k: checkpoint_utils.load_checkpoint_to_cpu(filename))
    with pytest.raises(CheckpointLoadError) as err:
        checkpoint_utils.load_checkpoint(_cfg(save, no_save=True), trainer)
    assert "checkpoint_last.pt" in str(err.value) and "--restore-file checkpoint_1_40.pt" in str(err.value)


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
