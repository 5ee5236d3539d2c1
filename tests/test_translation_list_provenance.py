"""translation_smallvocab's candidate lists belong to the data, dictionary and predictor they were
made from: cached lists keyed by the data (not only its size), exported lists of other data refused, a
pair (.npy, .json) not written together refused, ids outside the dictionary named, and the predictor of
exported lists recorded in the model trained on them."""

import logging
import re

import numpy as np
import pytest
from helpers import REPO, run
from translation_helpers import model_cfg, mt_task, reordered_copy, write_lists


def test_a_list_id_outside_the_dictionary_is_named_not_an_index_error(tiny_bin, tmp_path):
    def outside(ids, d):
        ids[7, 30] = len(d)

    path = write_lists(tiny_bin, "train", tmp_path, edit=outside)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: example 7 .*id \d+ .*outside.*export"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")


def test_a_model_trained_on_exported_lists_records_their_predictor(tiny_bin, tmp_path):
    predictor = "/elsewhere/vp/checkpoint_best.pt"
    for split in ("train", "valid"):
        write_lists(tiny_bin, split, tmp_path, predictor=predictor)
    task = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60)
    cfg = model_cfg()
    task.build_model(cfg)  # fairseq-train builds the model before it reads any split
    assert cfg.vocab_predictor == predictor  # saved with every checkpoint
    decoder = mt_task(tiny_bin, small_vocab_size=60)  # fairseq-interactive without --vocab-predictor
    decoder.build_model(cfg, from_checkpoint=True)
    assert decoder.candidates.predictor_path() == predictor
    # no lists to read the predictor from: nothing recorded, the error comes when a split is read
    bare = model_cfg()
    mt_task(tiny_bin, candidates_dir=str(tmp_path / "empty"), small_vocab_size=60).build_model(bare)
    assert bare.vocab_predictor is None


@pytest.mark.slow
def test_cached_lists_are_keyed_by_the_data_not_only_its_size(predictor, tiny_bin, tmp_path, caplog):
    import shutil

    mine = shutil.copytree(tiny_bin, tmp_path / "data-bin")
    other = reordered_copy(tiny_bin, tmp_path / "other-test-set")
    cache = tmp_path / "cache"

    def task(data, folder):
        t = mt_task(data, vocab_predictor=str(predictor), candidates_dir=str(folder), small_vocab_size=40)
        t.load_dataset("test")
        return t

    first = task(mine, cache)
    with pytest.raises(ValueError, match=r"holds the lists of other data.*split 'test' of .*data-bin.*"
                                         r"this run reads split 'test' of .*other-test-set.*--candidates-dir"):
        task(other, cache)
    # a cache folder of its own: predicted for this data, each row its own sentence's
    second = task(other, tmp_path / "cache2")
    np.testing.assert_array_equal(second.dataset("test").rows, first.dataset("test").rows[::-1])
    assert not np.array_equal(second.dataset("test").rows, first.dataset("test").rows)
    # the same folder whose content changed: the cache is predicted again, with a warning
    caplog.set_level(logging.INFO)
    for name in [p.name for p in other.glob("test.src-tgt.*")]:
        shutil.copy(other / name, mine / name)
    again = task(mine, cache)
    assert "changed since its candidates were cached; predicting them again" in caplog.text
    np.testing.assert_array_equal(again.dataset("test").rows, second.dataset("test").rows)


@pytest.mark.slow
def test_exported_lists_of_other_data_are_refused(predictor, tiny_bin, tmp_path):
    other = reordered_copy(tiny_bin, tmp_path / "other")
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--data", tiny_bin, "--splits",
         "test", "--k", "40", "--out-dir", tmp_path / "cands"])
    mt_task(tiny_bin, candidates_dir=str(tmp_path / "cands"), small_vocab_size=40).load_dataset("test")
    with pytest.raises(ValueError, match="holds the lists of other data"):
        mt_task(other, candidates_dir=str(tmp_path / "cands"), small_vocab_size=40).load_dataset("test")


def test_a_pair_not_written_together_is_refused(tmp_path, monkeypatch):
    import json
    import os

    from fairseq_smallvocab.predictor import lists

    path = lists.write_candidates(tmp_path / "valid.k4.npy", np.arange(12, dtype=np.uint16).reshape(3, 4),
                                  {"split": "valid", "target_dict_hash": 1, "data_sha256": "a"})
    real_replace, calls = os.replace, []

    def crash_before_the_json(src, dst):  # the process dies between the two renames
        calls.append(dst)
        if str(dst).endswith(".json"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(lists.os, "replace", crash_before_the_json)
    with pytest.raises(KeyboardInterrupt):
        lists.write_candidates(path, np.zeros((3, 4), dtype=np.uint16),
                               {"split": "valid", "target_dict_hash": 1, "data_sha256": "b"})
    monkeypatch.undo()
    assert str(calls[0]).endswith(".npy")  # the lists first, their description last
    assert json.loads(path.with_suffix(".json").read_text())["data_sha256"] == "a"  # old description, new lists
    with pytest.raises(ValueError, match="does not match its description.*export it again"):
        lists.read_candidates(path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
