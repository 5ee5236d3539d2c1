"""translation_smallvocab's candidate lists and the gold words: forced into the training split's
lists (where training reads them, and for every K it is cut to), refused in the lists of a split that is
evaluated (unless --allow-gold-candidates), and the smallest K that keeps them all."""

import logging
import re

import numpy as np
import pytest
from helpers import REPO, run
from translation_helpers import model_cfg, mt_task, write_lists

from fairseq_smallvocab.candidates.space import candidate_rows
from fairseq_smallvocab.predictor.lists import read_candidates


def test_evaluated_splits_refuse_gold_forced_lists_unless_allowed(tiny_bin, tmp_path, caplog):
    path = write_lists(tiny_bin, "valid", tmp_path, gold=True)  # export_candidates.py --gold always
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} holds lists with the gold words forced in.*"
                                         r"'valid'.*optimistic.*--gold never.*--allow-gold-candidates"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=40).load_dataset("valid")
    caplog.set_level(logging.WARNING)
    allowed = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=40, allow_gold_candidates=True)
    allowed.load_dataset("valid")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--allow-gold-candidates" in m and "optimistic" in m and str(path) in m for m in warned), warned
    # fairseq-train's training split takes them, as it always did
    write_lists(tiny_bin, "train", tmp_path)
    mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")


def test_decoding_the_training_split_refuses_its_gold_forced_lists(tiny_bin, tmp_path, caplog):
    path = write_lists(tiny_bin, "train", tmp_path)
    task = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60)
    task.build_model(model_cfg(), from_checkpoint=True)  # fairseq-generate loads the model, then the split
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} holds lists with the gold words forced in.*"
                                         r"'train' is evaluated here \(a model loaded from a checkpoint"):
        task.load_dataset("train")
    caplog.set_level(logging.WARNING)
    allowed = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60, allow_gold_candidates=True)
    allowed.build_model(model_cfg(), from_checkpoint=True)
    allowed.load_dataset("train")
    assert "optimistic" in caplog.text


@pytest.mark.slow
def test_decoding_the_training_split_predicts_its_lists_without_gold(predictor, tiny_bin, tmp_path, caplog):
    from fairseq_smallvocab.predictor.inference import load_predictor, predict_candidates

    settings = dict(vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60)
    mt_task(tiny_bin, **settings).load_dataset("train")  # fairseq-train's lists: gold forced in, cached
    trained = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    caplog.set_level(logging.INFO)
    task = mt_task(tiny_bin, **settings)
    task.build_model(model_cfg(), from_checkpoint=True)  # fairseq-generate --gen-subset train
    task.load_dataset("train")
    model, ptask = load_predictor(predictor, tiny_bin)
    own = candidate_rows(predict_candidates(model, ptask, "train", 60), 60, 4, "x")
    np.testing.assert_array_equal(task.dataset("train").rows, own)
    assert "without the gold words" in caplog.text
    # the training lists stay cached for the next fairseq-train
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns == trained
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_included"]


def test_training_lists_need_no_gold_words_for_the_sentences_training_skips(tiny_bin, tmp_path):
    full = mt_task(tiny_bin, small_vocab_size=0)
    full.load_dataset("train")
    ds = full.dataset("train")
    long = (ds.src_sizes > 30) | (ds.tgt_sizes > 30)
    assert 0 < long.sum() < len(ds)
    write_lists(tiny_bin, "train", tmp_path, gold=~long)
    with pytest.raises(ValueError, match="lack gold words"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")
    # fairseq-train skips sentences longer than --max-source/target-positions (its train iterator ignores them)
    task = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60, max_source_positions=30,
                 max_target_positions=30)
    task.load_dataset("train")
    assert len(task.dataset("train")) == len(ds)  # a row for every sentence all the same


@pytest.mark.slow
def test_predicted_training_lists_force_gold_words_where_training_reads_them(predictor, tiny_bin, tmp_path):
    limits = dict(max_source_positions=30, max_target_positions=30)
    task = mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
                 **limits)
    task.load_dataset("train")
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_within"] == [30, 30]
    ds = task.dataset("train")
    for i in range(len(ds)):
        if ds.src_sizes[i] <= 30 and ds.tgt_sizes[i] <= 30:
            assert set(ds[i]["target"].tolist()) <= set(ds.rows[i].tolist())
    # a run that trains on longer sentences does not take these lists from the cache
    first = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
          max_source_positions=60, max_target_positions=60).load_dataset("train")
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_within"] == [60, 60]
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns != first
    # one that trains on fewer reuses them
    again = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
          **limits).load_dataset("train")
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns == again


@pytest.mark.slow
def test_training_lists_cut_to_a_smaller_k_must_keep_every_gold_word(predictor, tiny_bin, tmp_path):
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train",
         "--k", "60", "--out-dir", tmp_path])
    with pytest.raises(ValueError, match=r"--small-vocab-size 8 is too small for the training lists .*"
                                         r"K = (\d+) keeps them all") as err:
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=8).load_dataset("train")
    need = int(re.search(r"K = (\d+) keeps", str(err.value)).group(1))
    assert 8 < need <= 60
    with pytest.raises(ValueError, match="too small"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=need - 1).load_dataset("train")
    task = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=need)
    task.load_dataset("train")  # the K it named holds every gold word
    ds = task.dataset("train")
    for i in range(len(ds)):
        assert set(ds[i]["target"].tolist()) <= set(ds.rows[i].tolist())
    # the predictor path, same rule (its lists are made at K with the gold words forced in)
    mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path / "p"),
          small_vocab_size=need).load_dataset("train")


def test_training_k_needed_by_brute_force(monkeypatch):
    from types import SimpleNamespace

    import fairseq_smallvocab.candidates.source as source
    from fairseq_smallvocab.candidates.source import training_k_needed

    rng = np.random.default_rng(0)
    vocab, nspecial = 40, 4
    # 19 words and <unk> somewhere in each list (a special id takes no room), gold words from the list
    lists = np.stack([np.insert(rng.permutation(np.arange(nspecial, vocab))[:19], rng.integers(20), 3)
                      for _ in range(7)])
    targets = [np.append(rng.choice(row[row >= nspecial], size=3), 2) for row in lists]  # words, then eos
    fake = SimpleNamespace(sizes=np.array([len(t) for t in targets]))
    monkeypatch.setattr(source, "token_stream", lambda ds: np.concatenate(targets))
    room = nspecial + 19

    def holds_gold(k):
        rows = candidate_rows(lists, k, nspecial, "x")
        return all(set(t.tolist()) <= set(r.tolist()) for t, r in zip(targets, rows))

    brute = min(k for k in range(nspecial + 1, room + 1) if holds_gold(k))
    assert training_k_needed(lists, fake, nspecial, vocab, chunk=3) == brute > nspecial + 3
    missing = lists.copy()
    missing[5][missing[5] == targets[5][0]] = 0  # a gold word not in its list at all
    assert training_k_needed(missing, fake, nspecial, vocab) is None
