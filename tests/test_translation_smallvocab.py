"""translation_smallvocab: candidate rows in every batch, from exported lists or
a predictor (cached), and the full-softmax fallbacks."""

import logging
import re

import numpy as np
import pytest
import torch
from helpers import REPO, USER_DIR, run

from fairseq_smallvocab.candidates.space import candidate_rows
from fairseq_smallvocab.predictor.lists import read_candidates
from fairseq_smallvocab.restricted_model import restrict
from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask

MT_TRAIN = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab",
            "--embed-dim", "16", "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.5",
            "--clip-norm", "1.0", "--batch-size", "32", "--max-epoch", "1", "--cpu", "--no-progress-bar",
            "--log-format", "simple", "--num-workers", "0", "--no-save"]


def _task(data, **cfg):
    config = TranslationSmallVocabConfig(data=str(data), **cfg)
    config.train_subset, config.dataset_impl, config.required_seq_len_multiple = "train", None, 1
    return TranslationSmallVocabTask.setup_task(config)


def _write_lists(data, split, folder, k=60, gold=None, predictor="/elsewhere/vp/checkpoint_best.pt", edit=None):
    """A split's lists as scripts/export_candidates.py writes them, made in-process without a predictor:
    <unk>, the example's gold words (``gold``; default: for the training split), then other words;
    ``edit(ids, tgt_dict)`` may change them before they are written."""
    import os

    from fairseq_smallvocab.models.vocab_predictor import dictionary_fingerprint
    from fairseq_smallvocab.predictor.lists import candidate_file, split_digest, write_candidates

    full = _task(data, small_vocab_size=0)
    full.load_dataset(split)
    ds, d = full.dataset(split), full.target_dictionary
    gold = np.full(len(ds), split == "train" if gold is None else gold)  # or a mask: which examples get them
    rng = np.random.default_rng(0)
    lists = []
    for i in range(len(ds)):
        words = [t for t in dict.fromkeys(ds[i]["target"].tolist()) if t >= d.nspecial] if gold[i] else []
        rest = [t for t in rng.permutation(len(d)).tolist() if t >= d.nspecial and t not in words]
        lists.append([d.unk(), *words, *rest][:k])
    ids = np.array(lists, dtype=np.uint16)
    if edit is not None:
        edit(ids, d)
    meta = {"split": split, "vocab_size": len(d), "target_dict_hash": dictionary_fingerprint(d),
            "data": os.path.abspath(str(data)), "data_sha256": split_digest(ds), "predictor": predictor,
            "predictor_sha256": "0" * 64, "gold_included": bool(gold.any()), "always_included": [d.unk()]}
    return write_candidates(candidate_file(folder, split, k), ids, meta)


def test_a_list_id_outside_the_dictionary_is_named_not_an_index_error(tiny_bin, tmp_path):
    def outside(ids, d):
        ids[7, 30] = len(d)

    path = _write_lists(tiny_bin, "train", tmp_path, edit=outside)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: example 7 .*id \d+ .*outside.*export"):
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")


def test_candidate_rows_put_specials_at_their_ids_then_words_in_order():
    lists = np.array([[3, 9, 2, 7, 5, 8], [6, 1, 4, 10, 11, 12]])
    rows = candidate_rows(lists, k=7, nspecial=4, where="x")
    assert rows.tolist() == [[0, 1, 2, 3, 9, 7, 5], [0, 1, 2, 3, 6, 4, 10]]
    with pytest.raises(ValueError, match="example 0 has only 4 non-special candidates, 5 are needed"):
        candidate_rows(lists, k=9, nspecial=4, where="x")


@pytest.mark.slow
def test_batches_carry_candidates_with_every_gold_word_in_training(predictor, tiny_bin, tmp_path):
    task = _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60)
    for split in ("train", "valid"):
        task.load_dataset(split)
        itr = task.get_batch_iterator(task.dataset(split), max_sentences=16, required_batch_size_multiple=8)
        seen = 0
        for batch in itr.next_epoch_itr(shuffle=False):
            cands = batch["net_input"]["candidates"]
            assert cands.shape == (len(batch["id"]), 60)
            assert (cands[:, :4] == np.arange(4)).all()  # bos, pad, eos, unk at their own ids
            if split == "train":
                for row, target in zip(cands.tolist(), batch["target"].tolist()):
                    assert set(target) <= set(row)
            seen += len(batch["id"])
        assert seen == len(task.dataset(split))  # no example dropped
    ids, meta = read_candidates(tmp_path / "train.k60.npy")
    assert meta["gold_included"] and meta["predictor"] == str(predictor)


@pytest.mark.slow
def test_predicted_candidates_are_cached_by_predictor_and_k(predictor, tiny_bin, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path),
          small_vocab_size=40).load_dataset("valid")
    first = (tmp_path / "valid.k40.npy").stat().st_mtime_ns
    again = _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=40)
    again.load_dataset("valid")
    assert (tmp_path / "valid.k40.npy").stat().st_mtime_ns == first
    assert "cached" in caplog.text
    assert again.candidates._predictor is None  # the predictor itself was not even loaded


@pytest.mark.slow
def test_exported_lists_are_used_and_checked(predictor, tiny_bin, tmp_path):
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train", "valid",
         "--k", "50", "--out-dir", tmp_path])
    task = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=30)  # takes the K=50 lists
    task.load_dataset("valid")
    assert task.dataset("valid").rows.shape[1] == 30
    with pytest.raises(FileNotFoundError, match="K >= 60 .*export_candidates.py --splits valid --k 60"):
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("valid")
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train",
         "--gold", "never", "--k", "70", "--out-dir", tmp_path / "nogold"])
    with pytest.raises(ValueError, match="without the gold words"):
        _task(tiny_bin, candidates_dir=str(tmp_path / "nogold"), small_vocab_size=30).load_dataset("train")


def test_full_softmax_fallbacks(tiny_bin, caplog):
    task = _task(tiny_bin, small_vocab_size=0)
    assert not task.small_vocab
    task.load_dataset("valid")
    batch = next(iter(task.get_batch_iterator(task.dataset("valid"), max_sentences=8).next_epoch_itr()))
    assert "candidates" not in batch["net_input"]
    with caplog.at_level(logging.WARNING):
        big = _task(tiny_bin, small_vocab_size=100000, candidates_dir="unused")
    assert not big.small_vocab and "full softmax" in caplog.text


def test_bad_settings_are_named(tiny_bin):
    with pytest.raises(ValueError, match="needs --vocab-predictor or --candidates-dir"):
        _task(tiny_bin, small_vocab_size=50).load_dataset("valid")
    with pytest.raises(ValueError, match="no room for words"):
        _task(tiny_bin, small_vocab_size=3, candidates_dir="x")


def test_a_folder_given_to_vocab_predictor_is_named(tiny_bin, tmp_path):
    (tmp_path / "vp").mkdir()
    (tmp_path / "vp" / "checkpoint_last.pt").touch()
    task = _task(tiny_bin, vocab_predictor=str(tmp_path / "vp"), candidates_dir=str(tmp_path / "c"),
                 small_vocab_size=40)
    with pytest.raises(ValueError, match=r"--vocab-predictor, .*vp, is a folder.*checkpoint file.*"
                                         r"vp/checkpoint_last\.pt"):
        task.load_dataset("valid")
    assert not (tmp_path / "c").exists()


def _model_cfg():
    """A tiny lstm_smallvocab config, as fairseq hands it to the task's build_model."""
    from omegaconf import OmegaConf

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig

    cfg = OmegaConf.structured(LSTMSmallVocabConfig(embed_dim=12))
    cfg._name = "lstm_smallvocab"
    return cfg


def test_evaluated_splits_refuse_gold_forced_lists_unless_allowed(tiny_bin, tmp_path, caplog):
    path = _write_lists(tiny_bin, "valid", tmp_path, gold=True)  # export_candidates.py --gold always
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} holds lists with the gold words forced in.*"
                                         r"'valid'.*optimistic.*--gold never.*--allow-gold-candidates"):
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=40).load_dataset("valid")
    caplog.set_level(logging.WARNING)
    allowed = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=40, allow_gold_candidates=True)
    allowed.load_dataset("valid")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--allow-gold-candidates" in m and "optimistic" in m and str(path) in m for m in warned), warned
    # fairseq-train's training split takes them, as it always did
    _write_lists(tiny_bin, "train", tmp_path)
    _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")


def test_decoding_the_training_split_refuses_its_gold_forced_lists(tiny_bin, tmp_path, caplog):
    path = _write_lists(tiny_bin, "train", tmp_path)
    task = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60)
    task.build_model(_model_cfg(), from_checkpoint=True)  # fairseq-generate loads the model, then the split
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} holds lists with the gold words forced in.*"
                                         r"'train' is evaluated here \(a model loaded from a checkpoint"):
        task.load_dataset("train")
    caplog.set_level(logging.WARNING)
    allowed = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60, allow_gold_candidates=True)
    allowed.build_model(_model_cfg(), from_checkpoint=True)
    allowed.load_dataset("train")
    assert "optimistic" in caplog.text


@pytest.mark.slow
def test_decoding_the_training_split_predicts_its_lists_without_gold(predictor, tiny_bin, tmp_path, caplog):
    from fairseq_smallvocab.predictor.inference import load_predictor, predict_candidates

    settings = dict(vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60)
    _task(tiny_bin, **settings).load_dataset("train")  # fairseq-train's lists: gold forced in, cached
    trained = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    caplog.set_level(logging.INFO)
    task = _task(tiny_bin, **settings)
    task.build_model(_model_cfg(), from_checkpoint=True)  # fairseq-generate --gen-subset train
    task.load_dataset("train")
    model, ptask = load_predictor(predictor, tiny_bin)
    own = candidate_rows(predict_candidates(model, ptask, "train", 60), 60, 4, "x")
    np.testing.assert_array_equal(task.dataset("train").rows, own)
    assert "without the gold words" in caplog.text
    # the training lists stay cached for the next fairseq-train
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns == trained
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_included"]


def test_a_model_trained_on_exported_lists_records_their_predictor(tiny_bin, tmp_path):
    predictor = "/elsewhere/vp/checkpoint_best.pt"
    for split in ("train", "valid"):
        _write_lists(tiny_bin, split, tmp_path, predictor=predictor)
    task = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60)
    cfg = _model_cfg()
    task.build_model(cfg)  # fairseq-train builds the model before it reads any split
    assert cfg.vocab_predictor == predictor  # saved with every checkpoint
    decoder = _task(tiny_bin, small_vocab_size=60)  # fairseq-interactive without --vocab-predictor
    decoder.build_model(cfg, from_checkpoint=True)
    assert decoder.candidates.predictor_path() == predictor
    # no lists to read the predictor from: nothing recorded, the error comes when a split is read
    bare = _model_cfg()
    _task(tiny_bin, candidates_dir=str(tmp_path / "empty"), small_vocab_size=60).build_model(bare)
    assert bare.vocab_predictor is None


def test_training_lists_need_no_gold_words_for_the_sentences_training_skips(tiny_bin, tmp_path):
    full = _task(tiny_bin, small_vocab_size=0)
    full.load_dataset("train")
    ds = full.dataset("train")
    long = (ds.src_sizes > 30) | (ds.tgt_sizes > 30)
    assert 0 < long.sum() < len(ds)
    _write_lists(tiny_bin, "train", tmp_path, gold=~long)
    with pytest.raises(ValueError, match="lack gold words"):
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("train")
    # fairseq-train skips sentences longer than --max-source/target-positions (its train iterator ignores them)
    task = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60, max_source_positions=30,
                 max_target_positions=30)
    task.load_dataset("train")
    assert len(task.dataset("train")) == len(ds)  # a row for every sentence all the same


@pytest.mark.slow
def test_predicted_training_lists_force_gold_words_where_training_reads_them(predictor, tiny_bin, tmp_path):
    limits = dict(max_source_positions=30, max_target_positions=30)
    task = _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
                 **limits)
    task.load_dataset("train")
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_within"] == [30, 30]
    ds = task.dataset("train")
    for i in range(len(ds)):
        if ds.src_sizes[i] <= 30 and ds.tgt_sizes[i] <= 30:
            assert set(ds[i]["target"].tolist()) <= set(ds.rows[i].tolist())
    # a run that trains on longer sentences does not take these lists from the cache
    first = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
          max_source_positions=60, max_target_positions=60).load_dataset("train")
    assert read_candidates(tmp_path / "train.k60.npy")[1]["gold_within"] == [60, 60]
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns != first
    # one that trains on fewer reuses them
    again = (tmp_path / "train.k60.npy").stat().st_mtime_ns
    _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60,
          **limits).load_dataset("train")
    assert (tmp_path / "train.k60.npy").stat().st_mtime_ns == again


@pytest.mark.slow
def test_fairseq_train_with_small_vocabulary(predictor, tiny_bin, tmp_path):
    result = run(["fairseq-train", tiny_bin, *MT_TRAIN, "--vocab-predictor", predictor,
                  "--candidates-dir", tmp_path, "--small-vocab-size", "60", "--batch-splits", "2"])
    log = result.stdout + result.stderr
    assert "gold_outside_cands" in log and "valid on 'valid' subset" in log
    assert (tmp_path / "train.k60.npy").exists() and (tmp_path / "valid.k60.npy").exists()


@pytest.mark.slow
def test_validation_bleu_inside_the_small_vocabulary_selects_checkpoints(predictor, tiny_bin, tmp_path):
    """--eval-bleu decodes greedily inside the candidates; BLEU drives the best
    checkpoint; over-long sentences are skipped and counted in the log."""
    cache, save = tmp_path / "cands", tmp_path / "ckpt"
    args = [a for a in MT_TRAIN if a != "--no-save"]
    args[args.index("--max-epoch") + 1] = "2"
    result = run(["fairseq-train", tiny_bin, *args, "--vocab-predictor", predictor, "--candidates-dir", cache,
                  "--small-vocab-size", "60", "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 30}',
                  "--eval-bleu-remove-bpe", "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
                  "--max-source-positions", "20", "--skip-invalid-size-inputs-valid-test",
                  "--save-dir", save, "--no-epoch-checkpoints"])
    log = result.stdout + result.stderr
    valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert len(valid) == 2 and all(" bleu " in line for line in valid), valid
    assert re.search(r"\d+ samples have invalid sizes and will be skipped", log)
    assert "best_bleu" in valid[-1]
    ckpt = torch.load(save / "checkpoint_best.pt", weights_only=False)
    assert ckpt["extra_state"]["best"] == max(float(re.search(r" bleu ([\d.]+)", v).group(1)) for v in valid)

    out = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
               "--path", save / "checkpoint_best.pt", "--vocab-predictor", predictor, "--candidates-dir", cache,
               "--small-vocab-size", "60", "--gen-subset", "valid", "--beam", "2", "--batch-size", "16",
               "--max-len-b", "30", "--cpu", "--skip-invalid-size-inputs-valid-test"])
    skipped = int(re.search(r"(\d+) samples have invalid sizes", out.stderr + out.stdout).group(1))
    words = set((tiny_bin / "dict.tgt.txt").read_text().split()[::2])
    hyps = [line.split("\t")[2].split() for line in out.stdout.splitlines() if line.startswith("H-")]
    assert 0 < skipped < 40 and len(hyps) == 40 - skipped  # the model's max source positions (20) hold
    assert all(set(h) <= words | {"<unk>"} for h in hyps) and sum(map(len, hyps)) > 40


class _BackwardOnly:
    """What FairseqTask.train_step needs of an optimizer."""

    def backward(self, loss):
        loss.backward()


@pytest.mark.slow
@pytest.mark.parametrize("small", [True, False])
def test_batch_splits_give_the_unsplit_gradient(predictor, tiny_bin, tmp_path, small):
    import torch
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel

    extra = dict(vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=50) if small \
        else dict(small_vocab_size=0)
    results = []
    for splits in (1, 3):
        task = _task(tiny_bin, batch_splits=splits, **extra)
        task.load_dataset("train")
        batch = next(iter(task.get_batch_iterator(task.dataset("train"), max_sentences=20,
                                                  required_batch_size_multiple=1).next_epoch_itr(shuffle=False)))
        torch.manual_seed(0)
        model = restrict(LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=12, dropout=0.0), task))
        criterion = CrossEntropyCriterion(task, sentence_avg=False)
        loss, size, log = task.train_step(batch, model, criterion, _BackwardOnly(), update_num=0)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss, size, log, grads))
    (loss1, size1, log1, g1), (loss3, size3, log3, g3) = results
    torch.testing.assert_close(loss3, loss1, rtol=1e-5, atol=1e-4)
    assert size3 == size1 and log3["ntokens"] == log1["ntokens"] and log3["nsentences"] == log1["nsentences"]
    assert g1.keys() == g3.keys() and len(g1) > 5
    for name in g1:
        torch.testing.assert_close(g3[name], g1[name], rtol=1e-4, atol=1e-6, msg=name)


def test_split_batch_trims_padding_and_keeps_every_example():
    import torch

    from fairseq_smallvocab.tasks.translation_smallvocab import split_batch

    pad = 1
    src = torch.tensor([[1, 1, 5, 2], [6, 7, 8, 2], [1, 1, 1, 2]])  # left padded
    tgt = torch.tensor([[5, 2, 1, 1], [5, 6, 7, 2], [2, 1, 1, 1]])
    sample = {"id": torch.tensor([10, 11, 12]), "target": tgt, "nsentences": 3, "ntokens": 7,
              "net_input": {"src_tokens": src, "src_lengths": torch.tensor([2, 4, 1]),
                            "prev_output_tokens": torch.roll(tgt, 1, 1), "candidates": torch.arange(15).view(3, 5)}}
    chunks = list(split_batch(sample, 2, pad))
    assert [c["id"].tolist() for c in chunks] == [[11, 10], [12]]  # longest targets first
    assert chunks[1]["net_input"]["src_tokens"].tolist() == [[2]]  # only-padding columns dropped
    assert chunks[1]["target"].tolist() == [[2]]
    assert chunks[0]["net_input"]["candidates"].tolist() == [list(range(5, 10)), list(range(5))]
    assert sum(c["ntokens"] for c in chunks) == int(tgt.ne(pad).sum())


def test_gold_outside_candidates_counts_reference_tokens_not_in_the_row():
    import torch
    from fairseq.data import Dictionary

    from fairseq_smallvocab.candidates.space import gold_outside_candidates

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    cands = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 6, 7]])
    target = torch.tensor([[4, 9, 3, 2], [6, 8, 2, 1]])  # 9 and 8 are outside; <unk> (3) is inside
    assert gold_outside_candidates(cands, target, d) == (7, 2)


# -- lists belong to the data they were made from ---------------------------------------------------

def _reordered_copy(src_folder, dest):
    """A copy of a data folder whose test split holds the same sentence pairs in reverse order: the
    same dictionaries and sizes, other sentences at every index."""
    import shutil

    from fairseq.data import data_utils, indexed_dataset

    shutil.copytree(src_folder, dest)
    for lang in ("src", "tgt"):
        prefix = str(src_folder / f"test.src-tgt.{lang}")
        ds = data_utils.load_indexed_dataset(prefix, None)
        out = str(dest / f"test.src-tgt.{lang}")
        builder = indexed_dataset.make_builder(out + ".bin", impl="mmap", vocab_size=10000)
        for i in reversed(range(len(ds))):
            builder.add_item(ds[i])
        builder.finalize(out + ".idx")
    return dest


@pytest.mark.slow
def test_cached_lists_are_keyed_by_the_data_not_only_its_size(predictor, tiny_bin, tmp_path, caplog):
    import shutil

    mine = shutil.copytree(tiny_bin, tmp_path / "data-bin")
    other = _reordered_copy(tiny_bin, tmp_path / "other-test-set")
    cache = tmp_path / "cache"

    def task(data, folder):
        t = _task(data, vocab_predictor=str(predictor), candidates_dir=str(folder), small_vocab_size=40)
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
    other = _reordered_copy(tiny_bin, tmp_path / "other")
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--data", tiny_bin, "--splits",
         "test", "--k", "40", "--out-dir", tmp_path / "cands"])
    _task(tiny_bin, candidates_dir=str(tmp_path / "cands"), small_vocab_size=40).load_dataset("test")
    with pytest.raises(ValueError, match="holds the lists of other data"):
        _task(other, candidates_dir=str(tmp_path / "cands"), small_vocab_size=40).load_dataset("test")


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


@pytest.mark.slow
def test_training_lists_cut_to_a_smaller_k_must_keep_every_gold_word(predictor, tiny_bin, tmp_path):
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train",
         "--k", "60", "--out-dir", tmp_path])
    with pytest.raises(ValueError, match=r"--small-vocab-size 8 is too small for the training lists .*"
                                         r"K = (\d+) keeps them all") as err:
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=8).load_dataset("train")
    need = int(re.search(r"K = (\d+) keeps", str(err.value)).group(1))
    assert 8 < need <= 60
    with pytest.raises(ValueError, match="too small"):
        _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=need - 1).load_dataset("train")
    task = _task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=need)
    task.load_dataset("train")  # the K it named holds every gold word
    ds = task.dataset("train")
    for i in range(len(ds)):
        assert set(ds[i]["target"].tolist()) <= set(ds.rows[i].tolist())
    # the predictor path, same rule (its lists are made at K with the gold words forced in)
    _task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path / "p"),
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
