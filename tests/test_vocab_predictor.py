"""Vocabulary predictor: task, model, criterion, candidates and scripts."""

import json
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import REPO, USER_DIR, run

from fairseq_smallvocab.data import KeepLastBatchDataset
from fairseq_smallvocab.predictor.inference import (
    PredictorError,
    frequency_scores,
    load_predictor,
    predict_candidates,
    recall_at,
)
from fairseq_smallvocab.predictor.lists import read_candidates, write_candidates
from fairseq_smallvocab.predictor.scoring import recall_hits, select_candidates
from smallvocab_tools.data import prep
from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus

SPLITS = {"train": "train", "valid": "valid", "test": "test"}
TRAIN_ARGS = ["--user-dir", USER_DIR, "--task", "vocab_prediction", "--arch", "vocab_predictor",
              "--criterion", "vocab_prediction_bce", "--optimizer", "adagrad", "--lr", "0.08",
              "--weight-decay", "1e-6", "--clip-norm", "1.0", "--batch-size", "64", "--cpu", "--seed", "1",
              "--no-progress-bar", "--log-format", "simple", "--num-workers", "0", "--no-epoch-checkpoints"]


def _task(data, **overrides):
    from fairseq_smallvocab.tasks.vocab_prediction import VocabPredictionConfig, VocabPredictionTask

    cfg = VocabPredictionConfig(data=str(data), **overrides)
    cfg.train_subset, cfg.dataset_impl = "train", None
    return VocabPredictionTask.setup_task(cfg)


def _train(data, save_dir, *extra, epochs=3):
    result = run(["fairseq-train", data, *TRAIN_ARGS, "--max-epoch", str(epochs), "--save-dir", save_dir,
                  *extra])
    return save_dir / "checkpoint_last.pt", result


@pytest.fixture(scope="module")
def predictor(tiny_bin, tmp_path_factory):
    ckpt, _ = _train(tiny_bin, tmp_path_factory.mktemp("vp"), "--recall-at", "10,50")
    return ckpt


# ---- labels, prior, loss ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_bin(tmp_path_factory):
    raw = tmp_path_factory.mktemp("hand") / "raw"
    raw.mkdir()
    prep.write_lines(raw / "train.src", ["x y", "y z z", "x"])
    prep.write_lines(raw / "train.tgt", ["a b", "a c c", "b"])
    prep.write_lines(raw / "valid.src", ["x", "z"])
    prep.write_lines(raw / "valid.tgt", ["b", "c a"])
    dest = raw.parent / "bin"
    prep.prepare(raw, dest, "src", "tgt", {"train": "train", "valid": "valid"}, min_count=1, log=lambda m: None)
    return dest


def test_prior_is_the_share_of_training_targets_containing_each_word(hand_bin):
    task = _task(hand_bin)
    d = task.target_dictionary
    prior = task.compute_prior()
    expected = {"a": 2 / 3, "b": 2 / 3, "c": 1 / 3}
    for word, p in expected.items():
        assert prior[d.index(word)] == pytest.approx(p)
    assert prior[d.eos()] == 1.0  # every target ends with eos
    assert prior[d.pad()] == prior[d.bos()] == prior[d.unk()] == 0.0
    assert prior.sum() == pytest.approx(1 + 2 / 3 + 2 / 3 + 1 / 3)


def test_smoothed_labels_and_loss(hand_bin):
    from fairseq_smallvocab.criterions.vocab_prediction_bce import VocabPredictionBCECriterion

    task = _task(hand_bin)
    d = task.target_dictionary
    crit = VocabPredictionBCECriterion(task, label_smoothing=0.1, recall_at="1,2")
    prior = torch.tensor(task.compute_prior(), dtype=torch.float)
    target = torch.tensor([[d.index("a"), d.index("c"), d.index("c"), d.eos()],
                           [d.index("b"), d.eos(), d.pad(), d.pad()]])
    labels = crit.smoothed_labels(target, prior)
    gold0 = {d.index("a"), d.index("c"), d.eos()}
    for i in range(len(d)):
        t = 1.0 if i in gold0 else 0.0
        assert labels[0, i].item() == pytest.approx(0.9 * t + 0.1 * prior[i].item())
    assert labels[1, d.pad()] == 0.0 and labels[1, d.bos()] == 0.0
    # the criterion's loss is the summed BCE against those labels
    model = _model(task)
    model.eval()
    src = torch.tensor([[d.pad(), 5, 6, d.eos()], [d.pad(), d.pad(), 7, d.eos()]])
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([3, 2])}, "target": target,
              "ntokens": 6}
    loss, sample_size, log = crit(model, sample)
    probs = torch.sigmoid(model(src_tokens=src))
    manual = -(labels * probs.log() + (1 - labels) * (1 - probs).log()).sum()
    assert loss.item() == pytest.approx(manual.item(), rel=1e-5)
    assert sample_size == 2 and log["recall_tokens"] == 6


def _model(task):
    """A small untrained predictor, built as fairseq would (without the registry)."""
    from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig

    model = VocabPredictor.build_model(VocabPredictorConfig(embed_dim=16, dropout=0.0), task)
    model.set_prior(task.compute_prior())
    return model


def test_empty_source_gives_a_valid_prediction(hand_bin):
    task = _task(hand_bin)
    model = _model(task)
    with torch.no_grad():
        model.output.weight.normal_()
    eos = task.source_dictionary.eos()
    empty = torch.tensor([[eos]])  # an empty line, binarized
    model.eval()
    probs = model.predict(src_tokens=empty)
    assert torch.isfinite(probs).all() and probs.shape == (1, len(task.target_dictionary))
    model.train()  # a training batch of one example (batch norm) works too
    assert torch.isfinite(model(src_tokens=empty)).all()


# ---- recall and candidates ----------------------------------------------------------------------


def test_recall_hits_match_brute_force():
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(7, 40, generator=gen)
    target = torch.randint(4, 40, (7, 9), generator=gen)
    target[2, 5:] = 1  # padding
    target[4, 3:] = 1
    ks = [1, 3, 10, 40]
    hits, tokens = recall_hits(scores, target, ks, pad=1)
    assert tokens == int(target.ne(1).sum())
    for k, h in zip(ks, hits):
        brute = 0
        for b in range(7):
            top = set(np.argsort(-scores[b].numpy())[:k].tolist())
            brute += sum(1 for t in target[b].tolist() if t != 1 and t in top)
        assert h == brute, k


def test_select_candidates_forces_gold_and_unk_and_keeps_order():
    scores = torch.tensor([[0.9, 0.1, 0.8, 0.3, 0.7, 0.2]])
    gold = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    ids = select_candidates(scores, 4, gold=gold, always=(5,)).tolist()[0]
    assert ids == [5, 1, 0, 2]  # forced first, then by score
    assert select_candidates(scores, 3).tolist()[0] == [0, 2, 4]
    with pytest.raises(ValueError, match="more than K = 1"):
        select_candidates(scores, 1, gold=gold, always=(5,))


def test_too_many_gold_words_name_the_sentence_and_a_larger_k(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    prep.write_lines(raw / "train.src", ["x", "y", "x y z", "z"])
    prep.write_lines(raw / "train.tgt", ["a", "b", "a b c d e", "c"])
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", {"train": "train"}, min_count=1, log=lambda m: None)
    task = _task(tmp_path / "bin")
    model = _model(task).eval()
    # sentence 2 needs its 5 words, eos and <unk>; the batch is sorted by length, so it is not the batch's row 2
    with pytest.raises(ValueError, match=r"sentence 2 of split 'train' needs 7 forced words.*K = 5.*K >= 7"):
        predict_candidates(model, task, "train", k=5, include_gold=True)
    assert predict_candidates(model, task, "train", k=7, include_gold=True).shape == (4, 7)


def test_exported_lists_name_their_predictor_by_an_absolute_path(hand_bin, tmp_path, monkeypatch):
    from fairseq_smallvocab.predictor.inference import export_split

    task = _task(hand_bin)
    task.load_dataset("valid")
    monkeypatch.chdir(tmp_path)  # a relative path would name another file from any other folder
    path, _, _ = export_split(_model(task).eval(), task, "valid", 5, "out", "vp/checkpoint_best.pt", "0" * 64)
    assert read_candidates(path)[1]["predictor"] == str(tmp_path / "vp" / "checkpoint_best.pt")


def test_prediction_batches_are_bounded_by_tokens_not_sentences():
    from fairseq_smallvocab.predictor.inference import token_batches

    sizes = np.array([5] * 300 + [100_000] + [20] * 50 + [700] * 3)
    order = np.argsort(sizes, kind="stable")
    batches = token_batches(order, sizes[order], max_tokens=1000, max_sentences=64)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(sizes)))  # every example, once
    for batch in batches:
        assert len(batch) <= 64
        assert len(batch) * sizes[batch].max() <= 1000 or len(batch) == 1, (len(batch), sizes[batch].max())
    assert [300] in [b.tolist() for b in batches]  # the long sentence alone, not dropped


@pytest.fixture(scope="module")
def long_bin(tmp_path_factory):
    """Short sentence pairs and one of 3,000 tokens (source and target) with 600 distinct target words."""
    raw = tmp_path_factory.mktemp("long") / "raw"
    raw.mkdir()
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(600)]
    src = [" ".join(rng.choice(["x", "y", "z"], size=3)) for _ in range(40)]
    tgt = [" ".join(rng.choice(words[:30], size=3)) for _ in range(40)]
    src[17] = " ".join(rng.choice(["x", "y", "z"], size=3000))
    tgt[17] = " ".join(words * 5)
    prep.write_lines(raw / "train.src", src)
    prep.write_lines(raw / "train.tgt", tgt)
    prep.prepare(raw, raw.parent / "bin", "src", "tgt", {"train": "train"}, min_count=1, log=lambda m: None)
    return raw.parent / "bin"


def test_a_long_sentence_is_predicted_in_a_batch_of_its_own(long_bin, monkeypatch):
    from fairseq_smallvocab.predictor.inference import PREDICT_MAX_TOKENS

    task = _task(long_bin)
    model = _model(task).eval()
    shapes = []
    real = model.predict

    def spy(**net_input):
        shapes.append(tuple(net_input["src_tokens"].shape))
        return real(**net_input)

    monkeypatch.setattr(model, "predict", spy)
    ids = predict_candidates(model, task, "train", k=20, batch_size=256)
    assert ids.shape == (40, 20) and (3001, ) in [s[1:] for s in shapes]
    assert all(b * t <= PREDICT_MAX_TOKENS or b == 1 for b, t in shapes), shapes  # not 40 x 3,001


def test_sentences_training_skips_need_no_gold_words(long_bin, tmp_path):
    from fairseq_smallvocab.predictor.inference import export_split

    task = _task(long_bin)
    model = _model(task).eval()
    d = task.target_dictionary
    with pytest.raises(ValueError, match="sentence 17 of split 'train' needs 602 forced words"):
        predict_candidates(model, task, "train", k=40, include_gold=True)
    # fairseq-train skips sentences longer than --max-source/target-positions: their lists need no gold words
    ids = predict_candidates(model, task, "train", k=40, include_gold=True, gold_within=(1024, 1024))
    train = task.dataset("train")
    for i in range(len(train)):
        assert (set(train[i]["target"].tolist()) <= set(ids[i].tolist())) == (i != 17), i
    path, _, _ = export_split(model, task, "train", 40, tmp_path, "vp.pt", "0" * 64, gold=True,
                              gold_within=(1024, 1024))
    assert read_candidates(path)[1]["gold_within"] == [1024, 1024]
    assert d.unk() in ids[17]


@pytest.mark.slow
def test_training_candidates_contain_every_gold_word(predictor, tiny_bin):
    model, task = load_predictor(predictor, tiny_bin)
    d = task.target_dictionary
    ids = predict_candidates(model, task, "train", k=60, include_gold=True, batch_size=50)
    train = task.dataset("train")
    assert ids.shape == (len(train), 60)
    for i in range(len(train)):
        row = set(ids[i].tolist())
        assert len(row) == 60  # distinct ids
        assert set(train[i]["target"].tolist()) <= row, i
        assert d.unk() in row


@pytest.mark.slow
def test_valid_candidates_are_the_top_k(predictor, tiny_bin):
    model, task = load_predictor(predictor, tiny_bin)
    ids = predict_candidates(model, task, "valid", k=25, batch_size=7)
    valid = task.dataset("valid")
    collated = valid.collater([valid[i] for i in range(len(valid))])
    probs = model.predict(**collated["net_input"])
    for row, example in zip(probs, collated["id"].tolist()):
        top = set(torch.topk(row, 25).indices.tolist())
        unk = task.target_dictionary.unk()
        assert set(ids[example].tolist()) - {unk} <= top


@pytest.mark.slow
def test_recall_at_k_is_100_at_full_vocabulary_and_monotone(predictor, tiny_bin):
    model, task = load_predictor(predictor, tiny_bin)
    vocab = len(task.target_dictionary)
    curve = recall_at(model, task, "valid", [5, 20, 80, vocab])
    values = [curve[k] for k in (5, 20, 80, vocab)]
    assert values == sorted(values) and values[-1] == pytest.approx(100.0)


@pytest.mark.slow
def test_export_and_read_round_trip(predictor, tiny_bin, tmp_path):
    result = run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--data", tiny_bin,
                  "--splits", "train", "valid", "--k", "50", "--out-dir", tmp_path])
    assert "train: " in result.stdout and "gold words included" in result.stdout
    model, task = load_predictor(predictor, tiny_bin)
    for split, gold in (("train", True), ("valid", False)):
        ids, meta = read_candidates(tmp_path / f"{split}.k50.npy", k=50)
        assert isinstance(ids, np.memmap) and ids.dtype == np.uint16
        assert meta["gold_included"] is gold and meta["split"] == split
        assert meta["vocab_size"] == len(task.target_dictionary)
        expected = predict_candidates(model, task, split, 50, include_gold=gold)
        np.testing.assert_array_equal(np.asarray(ids), expected)
    with pytest.raises(ValueError, match="not the requested 20"):
        read_candidates(tmp_path / "valid.k50.npy", k=20)
    with pytest.raises(ValueError, match="another target dictionary"):
        read_candidates(tmp_path / "valid.k50.npy", dict_hash=12345)


def test_candidate_file_shape_checked(tmp_path):
    path = write_candidates(tmp_path / "x.npy", np.zeros((3, 4), dtype=np.uint16),
                            {"target_dict_hash": 1, "split": "valid"})
    meta = json.loads(path.with_suffix(".json").read_text())
    meta["rows"] = 5
    path.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="inconsistent"):
        read_candidates(path)
    with pytest.raises(FileNotFoundError, match="export_candidates"):
        read_candidates(tmp_path / "absent.npy")


def test_lists_with_a_repeated_or_unknown_id_are_refused_naming_file_example_and_id(tmp_path):
    # a repeated word would get its probability counted twice in the small softmax; an id outside the
    # dictionary used to give a bare IndexError further on
    ids = np.stack([np.arange(4, 14, dtype=np.uint16) + i for i in range(5)])
    ids[3, 6] = ids[3, 2]
    path = write_candidates(tmp_path / "valid.k10.npy", ids, {"target_dict_hash": 1, "split": "valid",
                                                               "vocab_size": 50})
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: example 3 .*id {ids[3, 2]} twice.*export"):
        read_candidates(path)
    ids[3, 6] = 40
    ids[4, 1] = 50
    path = write_candidates(path, ids, {"target_dict_hash": 1, "split": "valid", "vocab_size": 50})
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: example 4 .*id 50 .*0\.\.49.*export"):
        read_candidates(path)
    with pytest.raises(ValueError, match="example 3 .*id 40 .*0\\.\\.39"):  # the caller's dictionary decides
        read_candidates(path, vocab_size=40)
    ids[4, 1] = 49
    path = write_candidates(path, ids, {"target_dict_hash": 1, "split": "valid", "vocab_size": 50})
    assert isinstance(read_candidates(path)[0], np.memmap)


def test_check_lists_reads_large_lists_in_chunks():
    from fairseq_smallvocab.predictor.lists import check_lists

    rng = np.random.default_rng(0)
    ids = np.stack([rng.permutation(3000)[:100] for _ in range(2500)]).astype(np.uint16)
    check_lists(ids, 3000, "x", chunk=256)
    ids[2222, 99] = ids[2222, 0]
    with pytest.raises(ValueError, match=f"x: example 2222 .*id {ids[2222, 0]} twice"):
        check_lists(ids, 3000, "x", chunk=256)


def test_a_pickled_list_file_is_named(tmp_path):
    import hashlib

    path = tmp_path / "valid.k2.npy"
    np.save(path, np.array([[4, 5], [6, 7]], dtype=object))  # allow_pickle: an object array
    meta = {"format": "fairseq-smallvocab-candidates", "version": 2, "rows": 2, "k": 2, "dtype": "object",
            "target_dict_hash": 1, "npy_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    path.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} .*integer.*export"):
        read_candidates(path)


@pytest.mark.parametrize("key", ["rows", "k"])
def test_a_description_without_a_key_is_named(tmp_path, key):
    path = write_candidates(tmp_path / "valid.k4.npy", np.arange(4, 16, dtype=np.uint16).reshape(3, 4),
                            {"target_dict_hash": 1, "split": "valid"})
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    del meta[key]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"{re.escape(str(meta_path))} .*'{key}'.*export"):
        read_candidates(path)


def test_keep_last_batch_keeps_every_example(tiny_bin):
    task = _task(tiny_bin)
    task.load_dataset("test")
    ds = task.dataset("test")
    assert isinstance(ds, KeepLastBatchDataset)
    itr = task.get_batch_iterator(ds, max_sentences=8, required_batch_size_multiple=8)
    ids = sorted(i for batch in itr.next_epoch_itr(shuffle=False) for i in batch["id"].tolist())
    assert ids == list(range(len(ds)))  # fairseq's own batching would drop 6 of these 30


# ---- a real training run ------------------------------------------------------------------------


@pytest.mark.slow
def test_short_training_run_beats_the_frequency_baseline(tmp_path):
    write_corpus(tmp_path / "raw", SyntheticConfig(tgt_vocab_size=600, train_size=2500, valid_size=200,
                                                   test_size=10, seed=4))
    data = tmp_path / "bin"
    prep.prepare(tmp_path / "raw", data, "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    ckpt, result = _train(data, tmp_path / "ckpt", "--recall-at", "50,100", "--best-checkpoint-metric",
                          "recall@50", "--maximize-best-checkpoint-metric", epochs=6)
    assert "recall@50" in result.stdout + result.stderr  # logged on validation
    model, task = load_predictor(tmp_path / "ckpt" / "checkpoint_best.pt")
    ks = [50, 100]
    learned = recall_at(model, task, "valid", ks)
    baseline = recall_at(model, task, "valid", ks, scores=frequency_scores(task))
    for k in ks:
        assert learned[k] > baseline[k] + 5, (k, learned, baseline)


# ---- image features -----------------------------------------------------------------------------


def _features_for(bin_dir, folder, dim=32, seed=0):
    """A feature row per example: a fixed random projection of the target's words."""
    task = _task(bin_dir)
    proj = np.random.default_rng(seed).normal(size=(len(task.target_dictionary), dim)).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        task.load_dataset(split)
        ds = task.dataset(split)
        feats = np.stack([proj[ds[i]["target"].numpy()].mean(0) for i in range(len(ds))]).astype(np.float32)
        np.save(folder / f"{split}.npy", feats)
    return folder


@pytest.mark.slow
def test_feature_input_trains_and_predicts(tiny_bin, tmp_path):
    feats = _features_for(tiny_bin, tmp_path / "feats")
    ckpt, result = _train(tiny_bin, tmp_path / "ckpt", "--source-features", feats, "--feature-dim", "32",
                          "--recall-at", "20", epochs=2)
    assert "recall@20" in result.stdout + result.stderr
    model, task = load_predictor(ckpt)
    assert model.uses_features
    ids = predict_candidates(model, task, "valid", k=20)
    assert ids.shape == (len(task.dataset("valid")), 20)


def test_feature_errors_are_named(tiny_bin, tmp_path):
    feats = _features_for(tiny_bin, tmp_path / "feats")
    task = _task(tiny_bin, source_features=str(feats), feature_dim=16)
    with pytest.raises(ValueError, match="feature dimension 32 differs"):
        task.load_dataset("valid")
    bad = np.load(feats / "valid.npy")
    bad[7, 3] = np.nan
    np.save(feats / "valid.npy", bad)
    with pytest.raises(ValueError, match="row 7 holds NaN"):
        _task(tiny_bin, source_features=str(feats), feature_dim=32).load_dataset("valid")
    np.save(feats / "valid.npy", bad[:5] * 0)
    with pytest.raises(ValueError, match="has 5 rows but the valid split has"):
        _task(tiny_bin, source_features=str(feats), feature_dim=32).load_dataset("valid")


def _dictionary_task(size):
    """A stand-in task: the criterion reads only the target dictionary."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    assert len(d) == size
    return SimpleNamespace(target_dictionary=d)


def test_default_recall_at_above_a_small_vocabulary_is_dropped_with_a_note(caplog, hand_bin):
    from fairseq_smallvocab.criterions.vocab_prediction_bce import DEFAULT_RECALL_AT, VocabPredictionBCECriterion

    assert DEFAULT_RECALL_AT == "500,1000,2000"
    with caplog.at_level("INFO"):
        crit = VocabPredictionBCECriterion(_dictionary_task(1200), label_smoothing=0.1, recall_at=DEFAULT_RECALL_AT)
    assert crit.ks == [500, 1000]
    assert "recall@2000 left out" in caplog.text and "|V| = 1200" in caplog.text and "--recall-at" in caplog.text
    caplog.clear()
    # below 500 words no default K is left: validation logs the loss alone, and says so
    task = _task(hand_bin)
    with caplog.at_level("INFO"):
        crit = VocabPredictionBCECriterion(task, label_smoothing=0.1, recall_at=DEFAULT_RECALL_AT)
    assert crit.ks == [] and f"|V| = {len(task.target_dictionary)}" in caplog.text
    assert "no recall@K is logged" in caplog.text
    model = _model(task)
    model.eval()
    d = task.target_dictionary
    sample = {"net_input": {"src_tokens": torch.tensor([[5, 6, d.eos()]]), "src_lengths": torch.tensor([3])},
              "target": torch.tensor([[d.index("a"), d.eos()]]), "ntokens": 2}
    loss, _, log = crit(model, sample)
    assert torch.isfinite(loss) and not any(key.startswith("recall") for key in log)


def test_an_explicit_recall_at_above_the_vocabulary_is_refused_naming_it():
    from fairseq_smallvocab.criterions.vocab_prediction_bce import VocabPredictionBCECriterion

    task = _dictionary_task(1200)
    with pytest.raises(ValueError, match=r"--recall-at value = 5000 is out of range.*size 1200.*--recall-at values "
                                         r"up to 1200"):
        VocabPredictionBCECriterion(task, label_smoothing=0.1, recall_at="100,5000")
    assert VocabPredictionBCECriterion(task, label_smoothing=0.1, recall_at="100,1200").ks == [100, 1200]


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_k_out_of_range(predictor, tiny_bin, tmp_path):
    model, task = load_predictor(predictor, tiny_bin)
    vocab = len(task.target_dictionary)
    for k in (0, vocab + 1):
        with pytest.raises(ValueError, match=f"K = {k} is out of range.*{vocab}"):
            predict_candidates(model, task, "valid", k)
    result = run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "valid",
                  "--k", str(vocab + 5), "--out-dir", tmp_path / "c"], check=False)
    assert result.returncode == 2 and "out of range" in result.stderr
    assert not (tmp_path / "c").exists()
    bad = run(["fairseq-train", tiny_bin, *TRAIN_ARGS, "--recall-at", f"10,{vocab + 1}", "--max-epoch", "1",
               "--save-dir", tmp_path / "x"], check=False)
    assert bad.returncode != 0 and "a --recall-at value" in bad.stderr


@pytest.mark.slow
def test_dictionary_mismatch_names_both(predictor, tmp_path):
    write_corpus(tmp_path / "raw", SyntheticConfig(tgt_vocab_size=250, train_size=200, valid_size=10,
                                                   test_size=10, seed=9))
    other = tmp_path / "other-bin"
    prep.prepare(tmp_path / "raw", other, "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    with pytest.raises(PredictorError) as err:
        load_predictor(predictor, other)
    message = str(err.value)
    assert "target dictionaries differ" in message
    assert str(other / "dict.tgt.txt") in message and "dict.tgt.txt (" in message


def test_a_folder_given_as_the_predictor_is_named_with_the_checkpoints_it_holds(tmp_path):
    with pytest.raises(PredictorError, match=rf"{re.escape(str(tmp_path))}, is a folder.*checkpoint file") as err:
        load_predictor(tmp_path)
    assert "not found" not in str(err.value) and "holds no checkpoint_best.pt" in str(err.value)
    (tmp_path / "checkpoint_best.pt").touch()
    (tmp_path / "checkpoint_last.pt").touch()
    with pytest.raises(PredictorError, match=rf"is a folder.*{re.escape(str(tmp_path / 'checkpoint_best.pt'))} or "
                                             rf"{re.escape(str(tmp_path / 'checkpoint_last.pt'))}"):
        load_predictor(tmp_path)


@pytest.mark.slow
def test_missing_corrupt_and_foreign_checkpoints(predictor, tmp_path):
    with pytest.raises(PredictorError, match="not found"):
        load_predictor(tmp_path / "absent.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(predictor.read_bytes()[:1000])
    with pytest.raises(PredictorError, match="cannot read .* corrupt"):
        load_predictor(truncated)
    foreign = tmp_path / "foreign.pt"
    state = torch.load(predictor, map_location="cpu")
    state["cfg"]["model"]["_name"] = "lstm"
    torch.save(state, foreign)
    with pytest.raises(PredictorError, match="not of a vocabulary predictor"):
        load_predictor(foreign)


def test_loss_is_finite_with_untrained_model(hand_bin):
    task = _task(hand_bin)
    model = _model(task)
    logits = model(src_tokens=torch.tensor([[5, 6, 2]]))
    assert torch.allclose(torch.sigmoid(logits), torch.full_like(logits, 0.5))  # output layer starts at 0
    loss = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits), reduction="sum")
    assert math.isfinite(loss.item())


def test_frequency_scores_count_training_tokens_after_the_dataset_is_freed(tiny_bin):
    # regression: the token stream was a view of the dataset's mmap, unmapped
    # (segmentation fault) once the temporary dataset was freed
    import gc

    task = _task(tiny_bin)
    scores = frequency_scores(task)
    gc.collect()
    targets = task.training_targets()
    expected = np.bincount(np.concatenate([targets[i].numpy() for i in range(len(targets))]),
                           minlength=len(task.target_dictionary))
    np.testing.assert_array_equal(scores.numpy(), expected)
    assert scores[task.target_dictionary.eos()] == len(targets)  # one eos per sentence


@pytest.mark.parametrize("field, value, message", [
    ("embed_dim", 0, r"--embed-dim must be >= 1, got 0"), ("embed_dim", -3, r"--embed-dim must be >= 1, got -3"),
    ("layers", 0, r"--layers must be >= 1, got 0"), ("dropout", 1.0, r"--dropout must be in \[0, 1\), got 1.0"),
    ("dropout", float("nan"), r"--dropout must be in \[0, 1\), got nan")])
def test_every_plugin_model_refuses_a_zero_size_before_it_is_built(field, value, message):
    """--embed-dim 0 trained and saved a zero-size predictor (rc 0): each model refuses such a size,
    naming its flag, before it reads the task."""
    from fairseq_smallvocab.models.lstm_caption_smallvocab import (
        LSTMCaptionSmallVocabConfig,
        LSTMCaptionSmallVocabModel,
    )
    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
    from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig

    for model, config in ((VocabPredictor, VocabPredictorConfig), (LSTMSmallVocabModel, LSTMSmallVocabConfig),
                          (LSTMCaptionSmallVocabModel, LSTMCaptionSmallVocabConfig)):
        cfg = config()
        if not hasattr(cfg, field):
            continue
        setattr(cfg, field, value)
        with pytest.raises(ValueError, match=message):
            model.build_model(cfg, task=None)
