"""Vocabulary predictor's candidates: recall hits, the choice of K words (gold and <unk> forced in),
prediction batches bounded by tokens (a long sentence alone), the sentences training skips, and the
candidate-list files (their predictor's path, shape, ids, format and description checked)."""

import json
import re

import numpy as np
import pytest
import torch
from vocab_predictor_helpers import make_hand_bin, untrained_model, vp_task

from fairseq_smallvocab.predictor.inference import predict_candidates
from fairseq_smallvocab.predictor.lists import read_candidates, write_candidates
from fairseq_smallvocab.predictor.scoring import recall_hits, select_candidates
from smallvocab_tools.data import prep


@pytest.fixture(scope="module")
def hand_bin(tmp_path_factory):
    return make_hand_bin(tmp_path_factory.mktemp("hand"))


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
    task = vp_task(tmp_path / "bin")
    model = untrained_model(task).eval()
    # sentence 2 needs its 5 words, eos and <unk>; the batch is sorted by length, so it is not the batch's row 2
    with pytest.raises(ValueError, match=r"sentence 2 of split 'train' needs 7 forced words.*K = 5.*K >= 7"):
        predict_candidates(model, task, "train", k=5, include_gold=True)
    assert predict_candidates(model, task, "train", k=7, include_gold=True).shape == (4, 7)


def test_exported_lists_name_their_predictor_by_an_absolute_path(hand_bin, tmp_path, monkeypatch):
    from fairseq_smallvocab.predictor.inference import export_split

    task = vp_task(hand_bin)
    task.load_dataset("valid")
    monkeypatch.chdir(tmp_path)  # a relative path would name another file from any other folder
    path, _, _ = export_split(untrained_model(task).eval(), task, "valid", 5, "out", "vp/checkpoint_best.pt", "0" * 64)
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

    task = vp_task(long_bin)
    model = untrained_model(task).eval()
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

    task = vp_task(long_bin)
    model = untrained_model(task).eval()
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
