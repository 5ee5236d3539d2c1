"""Vocabulary predictor, trained: its candidates and recall@K, their export through
scripts/export_candidates.py, a real training run against the frequency baseline, image-feature input, and
what it refuses (K out of range, another dictionary, a folder, missing, corrupt or foreign checkpoints).
The model, labels and loss: test_vocab_predictor_model.py; choosing, batching and storing candidates:
test_vocab_predictor_candidates.py."""

import re

import numpy as np
import pytest
import torch
from helpers import REPO, run
from vocab_predictor_helpers import SPLITS, TRAIN_ARGS, train_predictor, vp_task

from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals
from fairseq_smallvocab.data.datasets import KeepLastBatchDataset
from fairseq_smallvocab.predictor.inference import (
    PredictorError,
    frequency_scores,
    load_predictor,
    predict_candidates,
    recall_at,
)
from fairseq_smallvocab.predictor.lists import read_candidates
from smallvocab_tools.data import prep
from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus


@pytest.fixture(scope="module")
def predictor(tiny_bin, tmp_path_factory):
    ckpt, _ = train_predictor(tiny_bin, tmp_path_factory.mktemp("vp"), "--recall-at", "10,50")
    return ckpt


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


def test_keep_last_batch_keeps_every_example(tiny_bin):
    task = vp_task(tiny_bin)
    task.load_dataset("test")
    ds = task.dataset("test")
    assert isinstance(ds, KeepLastBatchDataset)
    itr = task.get_batch_iterator(ds, max_sentences=8, required_batch_size_multiple=8)
    ids = sorted(i for batch in itr.next_epoch_itr(shuffle=False) for i in batch["id"].tolist())
    assert ids == list(range(len(ds)))  # fairseq's own batching would drop 6 of these 30


def test_frequency_scores_count_training_tokens_after_the_dataset_is_freed(tiny_bin):
    # regression: the token stream was a view of the dataset's mmap, unmapped
    # (segmentation fault) once the temporary dataset was freed
    import gc

    task = vp_task(tiny_bin)
    scores = frequency_scores(task)
    gc.collect()
    targets = task.training_targets()
    expected = np.bincount(np.concatenate([targets[i].numpy() for i in range(len(targets))]),
                           minlength=len(task.target_dictionary))
    np.testing.assert_array_equal(scores.numpy(), expected)
    assert scores[task.target_dictionary.eos()] == len(targets)  # one eos per sentence


@pytest.mark.slow
def test_short_training_run_beats_the_frequency_baseline(tmp_path):
    write_corpus(tmp_path / "raw", SyntheticConfig(tgt_vocab_size=600, train_size=2500, valid_size=200,
                                                   test_size=10, seed=4))
    data = tmp_path / "bin"
    prep.prepare(tmp_path / "raw", data, "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    ckpt, result = train_predictor(data, tmp_path / "ckpt", "--recall-at", "50,100", "--best-checkpoint-metric",
                          "recall@50", "--maximize-best-checkpoint-metric", epochs=6)
    assert "recall@50" in result.stdout + result.stderr  # logged on validation
    model, task = load_predictor(tmp_path / "ckpt" / "checkpoint_best.pt")
    ks = [50, 100]
    learned = recall_at(model, task, "valid", ks)
    baseline = recall_at(model, task, "valid", ks, scores=frequency_scores(task))
    for k in ks:
        assert learned[k] > baseline[k] + 5, (k, learned, baseline)
    # the frequency list's recall beside the predictor's at every validation: the baseline's
    validations = [line for line in (result.stdout + result.stderr).splitlines() if "valid on 'valid' subset" in line]
    assert validations
    for k in ks:
        logged = [float(re.search(rf"\| freq_recall@{k} ([\d.]+)", line).group(1)) for line in validations]
        assert logged == pytest.approx([baseline[k]] * len(logged), abs=0.01), (k, logged, baseline)


def _features_for(bin_dir, folder, dim=32, seed=0):
    """A feature row per example: a fixed random projection of the target's words."""
    task = vp_task(bin_dir)
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
    ckpt, result = train_predictor(tiny_bin, tmp_path / "ckpt", "--source-features", feats, "--feature-dim", "32",
                          "--recall-at", "20", epochs=2)
    assert "recall@20" in result.stdout + result.stderr
    model, task = load_predictor(ckpt)
    assert model.uses_features
    ids = predict_candidates(model, task, "valid", k=20)
    assert ids.shape == (len(task.dataset("valid")), 20)


def test_feature_errors_are_named(tiny_bin, tmp_path):
    feats = _features_for(tiny_bin, tmp_path / "feats")
    task = vp_task(tiny_bin, source_features=str(feats), feature_dim=16)
    with pytest.raises(ValueError, match="feature dimension 32 differs"):
        task.load_dataset("valid")
    bad = np.load(feats / "valid.npy")
    bad[7, 3] = np.nan
    np.save(feats / "valid.npy", bad)
    with pytest.raises(ValueError, match="row 7 holds NaN"):
        vp_task(tiny_bin, source_features=str(feats), feature_dim=32).load_dataset("valid")
    np.save(feats / "valid.npy", bad[:5] * 0)
    with pytest.raises(ValueError, match="has 5 rows but the valid split has"):
        vp_task(tiny_bin, source_features=str(feats), feature_dim=32).load_dataset("valid")


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
    # a predictor trained from a relative data folder: named as recorded, not resolved against this folder
    state = torch.load(predictor, weights_only=False)
    state["cfg"]["task"]["data"] = "data-bin/elsewhere"
    relative = tmp_path / "relative.pt"
    torch.save(state, relative)
    with pytest.raises(PredictorError) as err:
        load_predictor(relative, other)
    assert re.search(r"trained with (data-bin/elsewhere/dict.tgt.txt|the target dictionary of data-bin/elsewhere), "
                     r"relative to the folder its fairseq-train ran in \(", str(err.value)), str(err.value)


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
    with allowed_globals():
        state = torch.load(predictor, map_location="cpu")
    state["cfg"]["model"]["_name"] = "lstm"
    torch.save(state, foreign)
    with pytest.raises(PredictorError, match="not of a vocabulary predictor"):
        load_predictor(foreign)


@pytest.mark.parametrize("hits, warned", [((30, 80), "not above the frequency list (recall@50 30.00% is 10.00 "
                                                      "points below the frequency list's 40.00%; recall@100 80.00% "
                                                      "is level with the frequency list's 80.00%)"),
                                          ((45, 90), None)])
def test_a_predictor_not_above_the_frequency_list_is_warned_about(tiny_bin, caplog, hits, warned):
    """After a validation, each --recall-at K where the predictor's recall over the whole validation set (every
    batch, summed across workers or not) is not above the frequency list's is named once; above, nothing (a
    user's predictor trained with weaker flags sat below the list unflagged)."""
    import logging

    from fairseq import metrics

    from fairseq_smallvocab.criterions.vocab_prediction_bce import VocabPredictionBCECriterion

    task = vp_task(tiny_bin)
    crit = VocabPredictionBCECriterion(task, 0.0, "50,100")
    for half in (0, 1):  # two validation batches of 50 gold tokens: the frequency list 20 + 20 of 50 at K = 50
        log = {"loss": 1.0, "nsentences": 4, "ntokens": 50, "sample_size": 4, "recall_tokens": 50,
               "recall_hits_50": hits[0] // 2, "freq_recall_hits_50": 20, "recall_hits_100": hits[1] // 2,
               "freq_recall_hits_100": 40}
        with metrics.aggregate(new_root=True):
            task.reduce_metrics([{key: torch.tensor(float(v)) for key, v in log.items()}] if half else [log], crit)
    with caplog.at_level(logging.WARNING):
        task.report_validation()
        task.report_validation()  # said once
    if warned is None:
        assert "frequency list" not in caplog.text
    else:
        assert caplog.text.count("validation: the predictor") == 1 and warned in caplog.text, caplog.text


@pytest.mark.parametrize("recall, frequency, said", [
    (37.91, 88.41, "50.50 points below the frequency list's 88.41%"),  # far below: never "within 3 points"
    (39.0, 40.0, "1.00 points below the frequency list's 40.00%"),
    (40.0, 40.0, "level with the frequency list's 40.00%"),
    (42.5, 40.0, "within 3 points of the frequency list's 40.00%"),
    (50.0, 40.0, "10.00 points above the frequency list's 40.00%"),
    (39.996, 40.004, "level with the frequency list's 40.00%"),  # both shown as 40.00%: not "0.01 points below"
])
def test_the_comparison_with_the_frequency_list_follows_the_numbers(recall, frequency, said):
    """How a predictor's recall stands against the frequency list's is worded from the two numbers, in both
    directions (a recall 50 points below the list was said to be "within 3 points" of it)."""
    from fairseq_smallvocab.predictor.scoring import versus_frequency

    assert versus_frequency(recall, frequency, margin=3.0) == said
