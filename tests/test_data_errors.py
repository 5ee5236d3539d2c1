"""Damaged input is named with its fix, and a failed write leaves nothing
that a later run would read as complete: truncated or empty
fairseq-preprocess .idx/.bin files, token ids outside the dictionary, a full
disk while candidate lists are written."""

import errno
import os
import re

import numpy as np
import pytest
from helpers import caption_task, copy_folder, cut_file, poke_token

from fairseq_smallvocab.predictor import lists
from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask
from fairseq_smallvocab.tasks.vocab_prediction import VocabPredictionConfig, VocabPredictionTask

AGAIN = r"fairseq-preprocess.*scripts/prepare_data\.py"  # every .idx/.bin error names how to make the files again


def _translation(data):
    cfg = TranslationSmallVocabConfig(data=str(data), small_vocab_size=0)
    cfg.train_subset, cfg.dataset_impl, cfg.required_seq_len_multiple = "train", None, 1
    return TranslationSmallVocabTask.setup_task(cfg)


def _vocab_prediction(data, **overrides):
    cfg = VocabPredictionConfig(data=str(data), **overrides)
    cfg.train_subset, cfg.dataset_impl = "train", None
    return VocabPredictionTask.setup_task(cfg)


# -- truncated or empty .idx / .bin ------------------------------------------------------------------


def _drop_end(n, sentences=""):
    def damage(path):
        size = cut_file(path, -n)
        return rf"is truncated: the index says {size} bytes{sentences}, the file has {size - n}"
    return damage


def _cut_header(path):
    cut_file(path, 12)
    return r"is truncated: 12 bytes, shorter than the 26-byte header"


def _empty(path):
    size = cut_file(path, 0)
    return rf"is truncated: the index says {size} bytes, the file has 0"


def _append(path):
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0\0")
    return rf"has {size + 2} bytes, but its index {re.escape(path.stem)}\.idx says {size}.*not written together"


def _foreign_header(path):
    path.write_bytes(b"not an index" + path.read_bytes()[12:])
    return r"is not a fairseq-preprocess index"


def _delete(path):
    path.unlink()
    return rf"is missing beside {re.escape(path.stem)}\.idx"


# (file, what is done to it, the task that opens it): each error names the file, what is wrong and the fix
DAMAGES = [("train.src-tgt.tgt.bin", _drop_end(10), _translation),
           ("valid.src-tgt.src.idx", _drop_end(5, r" \(40 sentences\)"), _translation),
           ("valid.src-tgt.tgt.idx", _cut_header, _vocab_prediction),
           ("test.src-tgt.src.bin", _empty, _vocab_prediction),
           ("test.src-tgt.tgt.bin", _append, _translation),
           ("valid.src-tgt.tgt.idx", _foreign_header, _translation),
           ("valid.src-tgt.src.bin", _delete, _vocab_prediction)]


@pytest.mark.parametrize("name, damage, task", DAMAGES, ids=[f"{d[1].__name__}-{d[0]}" for d in DAMAGES])
def test_a_damaged_idx_or_bin_is_named_with_what_is_wrong(tiny_bin, tmp_path, name, damage, task):
    data = copy_folder(tiny_bin, tmp_path)
    path = data / name
    what = damage(path)
    error = FileNotFoundError if damage is _delete else ValueError
    with pytest.raises(error, match=rf"{re.escape(str(path))} {what}.*{AGAIN}"):
        task(data).load_dataset(name.split(".")[0])


def test_truncated_captions_are_named(cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    path = data / "valid.en-None.en.bin"
    size = cut_file(path, -4)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is truncated: the index says {size} bytes, "
                                         rf"the file has {size - 4}.*fairseq-preprocess.*prepare_captions\.py"):
        caption_task(data, small_vocab_size=0).load_dataset("valid")


def test_truncated_caption_targets_of_the_predictor_are_named(cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    path = data / "train.en-None.en.bin"
    cut_file(path, 100)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is truncated"):
        _vocab_prediction(data, source_features=str(data)).load_dataset("train")


# -- token ids outside the dictionary ----------------------------------------------------------------


@pytest.mark.parametrize("side", ["tgt", "src"])
def test_a_token_id_outside_the_dictionary_is_named_when_the_split_is_loaded(tiny_bin, tmp_path, side):
    data = copy_folder(tiny_bin, tmp_path)
    task = _translation(data)
    size = len(task.tgt_dict if side == "tgt" else task.src_dict)
    poke_token(data / f"valid.src-tgt.{side}", 7, size + 3)
    flag = "--tgtdict" if side == "tgt" else "--srcdict"
    with pytest.raises(ValueError, match=rf"{re.escape(str(data / f'valid.src-tgt.{side}.bin'))}: sentence 7 holds "
                                         rf"token id {size + 3}, but dict\.{side}\.txt has {size} entries "
                                         rf"\(ids 0\.\.{size - 1}\).*another dictionary.*{flag}"):
        task.load_dataset("valid")
    with pytest.raises(ValueError, match=rf"sentence 7 holds token id {size + 3}"):  # the predictor's task too
        _vocab_prediction(data).load_dataset("valid")


def test_caption_ids_outside_the_dictionary_are_named(cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    task = caption_task(data, small_vocab_size=0)
    poke_token(data / "test.en-None.en", 2, len(task.tgt_dict))
    with pytest.raises(ValueError, match=rf"test\.en-None\.en\.bin: sentence 2 holds token id {len(task.tgt_dict)}"
                                         rf", but dict\.en\.txt has {len(task.tgt_dict)} entries"):
        task.load_dataset("test")


def test_intact_splits_load_unchanged(tiny_bin):
    task = _translation(tiny_bin)
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 40


# -- a full disk while candidate lists are written ----------------------------------------------------

META = {"split": "valid", "target_dict_hash": 1, "data_sha256": "a"}


def _short_save(file, array, **kwargs):
    """np.save on a full disk: part of the data written, then numpy's error (ndarray.tofile's message)."""
    file.write(b"\x93NUMPY" + b"\0" * 100)
    raise OSError(f"{array.nbytes} requested and 100 written")


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_a_short_write_of_new_lists_says_no_space_and_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "cands" / "valid.k4.npy"
    monkeypatch.setattr(lists.np, "save", _short_save)
    with pytest.raises(OSError, match=rf"no space left on device writing {re.escape(str(path))} \(.*requested and "
                                      r"100 written.*\): free space.*") as err:
        lists.write_candidates(path, np.arange(12, dtype=np.uint16).reshape(3, 4), META)
    assert err.value.errno == errno.ENOSPC
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no .npy, no .json, no temporary file


@pytest.mark.parametrize("fails", ["save", "fsync"])
def test_a_full_disk_keeps_the_old_lists_intact(tmp_path, monkeypatch, fails):
    good = np.arange(12, dtype=np.uint16).reshape(3, 4)
    path = lists.write_candidates(tmp_path / "valid.k4.npy", good, META)
    if fails == "save":
        monkeypatch.setattr(lists.np, "save", _short_save)
    else:  # the file system reports a full disk only when the data is flushed to it
        def full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(lists.os, "fsync", full)
    with pytest.raises(OSError, match=rf"no space left on device writing {re.escape(str(path))}"):
        lists.write_candidates(path, np.zeros((3, 4), dtype=np.uint16), dict(META, data_sha256="b"))
    monkeypatch.undo()
    ids, meta = lists.read_candidates(path)
    assert (np.asarray(ids) == good).all() and meta["data_sha256"] == "a"
    assert _leftovers(tmp_path) == []


def test_a_full_disk_while_writing_the_description_names_it(tmp_path, monkeypatch):
    path, real_fsync, calls = tmp_path / "valid.k4.npy", os.fsync, []

    def full_at_the_second(fd):  # the lists are flushed, their description is not
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(lists.os, "fsync", full_at_the_second)
    with pytest.raises(OSError, match=rf"no space left on device writing {re.escape(str(path.with_suffix('.json')))}"):
        lists.write_candidates(path, np.arange(12, dtype=np.uint16).reshape(3, 4), META)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_other_write_errors_pass_unchanged(tmp_path, monkeypatch):
    def denied(file, array, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(lists.np, "save", denied)
    with pytest.raises(PermissionError, match="Permission denied") as err:
        lists.write_candidates(tmp_path / "valid.k4.npy", np.zeros((3, 4), dtype=np.uint16), META)
    assert "no space" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_while_caching_predicted_lists_is_named_and_the_next_run_predicts_them(predictor, tiny_bin,
                                                                                           tmp_path, monkeypatch):
    def task():
        cfg = TranslationSmallVocabConfig(data=str(tiny_bin), vocab_predictor=str(predictor),
                                          candidates_dir=str(tmp_path), small_vocab_size=40)
        cfg.train_subset, cfg.dataset_impl, cfg.required_seq_len_multiple = "train", None, 1
        return TranslationSmallVocabTask.setup_task(cfg)

    monkeypatch.setattr(lists.np, "save", _short_save)
    with pytest.raises(OSError, match=rf"no space left on device writing {re.escape(str(tmp_path / 'valid.k40.npy'))}"):
        task().load_dataset("valid")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing a later run could take for a cached list
    again = task()
    again.load_dataset("valid")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["valid.k40.json", "valid.k40.npy"]
    assert len(again.dataset("valid").rows) == 40


def test_the_temporaries_of_a_killed_writer_are_removed_by_the_next_one(tmp_path):
    """A writer killed mid-write leaves .NAME.npy.tmp-PID (as large as the lists) that nothing reads;
    the next write of the pair removes it, and not the temporaries of a writer still running."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # a process that has exited
    path = tmp_path / "valid.k4.npy"
    stale = [f".valid.k4.npy.tmp-{dead_pid}", f".valid.k4.json.tmp-{dead_pid}"]
    live = [f".valid.k4.npy.tmp-{os.getppid()}", f".test.k4.npy.tmp-{dead_pid}"]  # running; another pair's
    for name in stale + live:
        (tmp_path / name).write_bytes(b"partial")
    lists.write_candidates(path, np.arange(12, dtype=np.uint16).reshape(3, 4), META)
    assert _leftovers(tmp_path) == sorted(live)
    np.testing.assert_array_equal(np.load(path), np.arange(12).reshape(3, 4))
