"""Vocabulary predictor: the prior, the smoothed labels and the BCE loss, the model on an empty source
and untrained, the criterion's recall@K settings against the vocabulary, and model sizes refused before a
model is built."""

import math

import pytest
import torch
import torch.nn.functional as F
from vocab_predictor_helpers import make_hand_bin, untrained_model, vp_task


@pytest.fixture(scope="module")
def hand_bin(tmp_path_factory):
    return make_hand_bin(tmp_path_factory.mktemp("hand"))


def test_prior_is_the_share_of_training_targets_containing_each_word(hand_bin):
    task = vp_task(hand_bin)
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

    task = vp_task(hand_bin)
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
    model = untrained_model(task)
    model.eval()
    src = torch.tensor([[d.pad(), 5, 6, d.eos()], [d.pad(), d.pad(), 7, d.eos()]])
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([3, 2])}, "target": target,
              "ntokens": 6}
    loss, sample_size, log = crit(model, sample)
    probs = torch.sigmoid(model(src_tokens=src))
    manual = -(labels * probs.log() + (1 - labels) * (1 - probs).log()).sum()
    assert loss.item() == pytest.approx(manual.item(), rel=1e-5)
    assert sample_size == 2 and log["recall_tokens"] == 6


def test_empty_source_gives_a_valid_prediction(hand_bin):
    task = vp_task(hand_bin)
    model = untrained_model(task)
    with torch.no_grad():
        model.output.weight.normal_()
    eos = task.source_dictionary.eos()
    empty = torch.tensor([[eos]])  # an empty line, binarized
    model.eval()
    probs = model.predict(src_tokens=empty)
    assert torch.isfinite(probs).all() and probs.shape == (1, len(task.target_dictionary))
    model.train()  # a training batch of one example (batch norm) works too
    assert torch.isfinite(model(src_tokens=empty)).all()


def test_loss_is_finite_with_untrained_model(hand_bin):
    task = vp_task(hand_bin)
    model = untrained_model(task)
    logits = model(src_tokens=torch.tensor([[5, 6, 2]]))
    assert torch.allclose(torch.sigmoid(logits), torch.full_like(logits, 0.5))  # output layer starts at 0
    loss = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits), reduction="sum")
    assert math.isfinite(loss.item())


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
    task = vp_task(hand_bin)
    with caplog.at_level("INFO"):
        crit = VocabPredictionBCECriterion(task, label_smoothing=0.1, recall_at=DEFAULT_RECALL_AT)
    assert crit.ks == [] and f"|V| = {len(task.target_dictionary)}" in caplog.text
    assert "no recall@K is logged" in caplog.text
    model = untrained_model(task)
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
