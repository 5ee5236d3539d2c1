"""translation_smallvocab: candidate rows in every batch, from exported lists or
a predictor (cached), the full-softmax fallbacks and the settings it refuses, training through
fairseq-train (validation BLEU inside the small vocabulary) and --batch-splits.  The gold words in the
lists: test_translation_gold_words.py; the lists' provenance: test_translation_list_provenance.py."""

import logging
import re

import numpy as np
import pytest
import torch
from helpers import REPO, USER_DIR, run
from translation_helpers import MT_TRAIN, mt_task

from fairseq_smallvocab.candidates.space import candidate_rows
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.predictor.lists import read_candidates


def test_candidate_rows_put_specials_at_their_ids_then_words_in_order():
    lists = np.array([[3, 9, 2, 7, 5, 8], [6, 1, 4, 10, 11, 12]])
    rows = candidate_rows(lists, k=7, nspecial=4, where="x")
    assert rows.tolist() == [[0, 1, 2, 3, 9, 7, 5], [0, 1, 2, 3, 6, 4, 10]]
    with pytest.raises(ValueError, match="example 0 has only 4 non-special candidates, 5 are needed"):
        candidate_rows(lists, k=9, nspecial=4, where="x")


@pytest.mark.slow
def test_batches_carry_candidates_with_every_gold_word_in_training(predictor, tiny_bin, tmp_path):
    task = mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=60)
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
    mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path),
          small_vocab_size=40).load_dataset("valid")
    first = (tmp_path / "valid.k40.npy").stat().st_mtime_ns
    again = mt_task(tiny_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path), small_vocab_size=40)
    again.load_dataset("valid")
    assert (tmp_path / "valid.k40.npy").stat().st_mtime_ns == first
    assert "cached" in caplog.text
    assert again.candidates._predictor is None  # the predictor itself was not even loaded


@pytest.mark.slow
def test_exported_lists_are_used_and_checked(predictor, tiny_bin, tmp_path):
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train", "valid",
         "--k", "50", "--out-dir", tmp_path])
    task = mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=30)  # takes the K=50 lists
    task.load_dataset("valid")
    assert task.dataset("valid").rows.shape[1] == 30
    with pytest.raises(FileNotFoundError, match="K >= 60 .*export_candidates.py --splits valid --k 60"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path), small_vocab_size=60).load_dataset("valid")
    run([REPO / "scripts" / "export_candidates.py", "--predictor", predictor, "--splits", "train",
         "--gold", "never", "--k", "70", "--out-dir", tmp_path / "nogold"])
    with pytest.raises(ValueError, match="without the gold words"):
        mt_task(tiny_bin, candidates_dir=str(tmp_path / "nogold"), small_vocab_size=30).load_dataset("train")


def test_full_softmax_fallbacks(tiny_bin, caplog):
    task = mt_task(tiny_bin, small_vocab_size=0)
    assert not task.small_vocab
    task.load_dataset("valid")
    batch = next(iter(task.get_batch_iterator(task.dataset("valid"), max_sentences=8).next_epoch_itr()))
    assert "candidates" not in batch["net_input"]
    with caplog.at_level(logging.WARNING):
        big = mt_task(tiny_bin, small_vocab_size=100000, candidates_dir="unused")
    assert not big.small_vocab and "full softmax" in caplog.text


def test_bad_settings_are_named(tiny_bin):
    with pytest.raises(ValueError, match="needs --vocab-predictor or --candidates-dir"):
        mt_task(tiny_bin, small_vocab_size=50).load_dataset("valid")
    with pytest.raises(ValueError, match="no room for words"):
        mt_task(tiny_bin, small_vocab_size=3, candidates_dir="x")


def test_a_folder_given_to_vocab_predictor_is_named(tiny_bin, tmp_path):
    (tmp_path / "vp").mkdir()
    (tmp_path / "vp" / "checkpoint_last.pt").touch()
    task = mt_task(tiny_bin, vocab_predictor=str(tmp_path / "vp"), candidates_dir=str(tmp_path / "c"),
                 small_vocab_size=40)
    with pytest.raises(ValueError, match=r"--vocab-predictor, .*vp, is a folder.*checkpoint file.*"
                                         r"vp/checkpoint_last\.pt"):
        task.load_dataset("valid")
    assert not (tmp_path / "c").exists()


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
        task = mt_task(tiny_bin, batch_splits=splits, **extra)
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


@pytest.mark.parametrize("remove_bpe, warned", [(None, "no --eval-bleu-remove-bpe was given"),
                                                ("@@ ", "--eval-bleu-remove-bpe '@@ ' does not join them"),
                                                ("sentencepiece", None)])
def test_eval_bleu_on_sentencepiece_pieces_is_warned_about(tiny_bin, caplog, remove_bpe, warned):
    """--eval-bleu on sentencepiece data scores pieces, and picks checkpoint_best.pt by them, unless
    --eval-bleu-remove-bpe sentencepiece joins them (a bare flag removes subword-nmt's "@@ "): the log says so when
    fairseq-train builds the model, as the reward's post-processing does; word-level data is not warned about."""
    from translation_helpers import model_cfg

    task = mt_task(tiny_bin, small_vocab_size=0, eval_bleu=True, eval_bleu_remove_bpe=remove_bpe)
    with caplog.at_level(logging.WARNING):
        task.build_model(model_cfg())
    assert "--eval-bleu scores pieces" not in caplog.text  # the tiny data's words
    d = task.target_dictionary
    d.symbols = d.symbols[:d.nspecial] + ["\u2581" + s for s in d.symbols[d.nspecial:]]
    with caplog.at_level(logging.WARNING):
        task.build_model(model_cfg())
    if warned is None:
        assert "--eval-bleu scores pieces" not in caplog.text
    else:
        assert warned in caplog.text and "give --eval-bleu-remove-bpe sentencepiece" in caplog.text
        assert re.search(r"100% of the target dictionary's \d+ tokens hold '\u2581'", caplog.text)
