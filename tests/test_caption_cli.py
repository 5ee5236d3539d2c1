"""Captioning through fairseq's commands: training, decoding and multi-reference BLEU, REINFORCE,
the benchmark on a captioning folder, and what the commands refuse."""

import json
import re

import numpy as np
import pytest
from helpers import CAP, DECODE, TINY, TRAIN, USER_DIR, caption_task, copy_folder, run

from smallvocab_tools.analysis import caption_bleu


def _hyps(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}


@pytest.mark.slow
def test_train_generate_and_multi_reference_bleu(cap_model, cap_bin, cap_predictor, tmp_path):
    out = run(["fairseq-generate", cap_bin, *CAP, *DECODE, "--path", cap_model, "--gen-subset", "test",
               "--one-caption-per-image", "--beam", "2"])
    hyps = _hyps(out.stdout)
    assert sorted(hyps) == list(range(TINY.test_images))
    # decoded inside the predicted candidates (predictor recorded in the checkpoint)
    from fairseq.data import Dictionary

    d = Dictionary.load(str(cap_bin / "dict.en.txt"))
    rows = np.load(cap_predictor.parent / "candidates" / "test.k40.npy")
    firsts = np.sort(np.unique(np.loadtxt(cap_bin / "test.index", dtype=int), return_index=True)[1])
    for i, hyp in hyps.items():
        assert set(hyp.split()) <= {d[j] for j in rows[firsts[i]]} | {"<unk>"}
    (tmp_path / "gen.txt").write_text(out.stdout)
    bleu = run(["scripts/caption_bleu.py", "--data", cap_bin, "--split", "test", tmp_path / "gen.txt"],
               cwd=USER_DIR.parent)
    assert f"{TINY.test_images} images" in bleu.stdout and "BLEU = " in bleu.stdout and "|tok:13a|" in bleu.stdout
    # every caption decoded: the same hypotheses per image, the same score
    every = run(["fairseq-generate", cap_bin, *CAP, *DECODE, "--path", cap_model, "--gen-subset", "test",
                 "--beam", "2"])
    assert len(_hyps(every.stdout)) == TINY.test_images * TINY.captions_per_image
    (tmp_path / "every.txt").write_text(every.stdout)
    again = run(["scripts/caption_bleu.py", "--data", cap_bin, "--split", "test", tmp_path / "every.txt"],
                cwd=USER_DIR.parent)
    assert again.stdout == bleu.stdout


@pytest.mark.slow
def test_reinforce_through_fairseq_train(cap_model, cap_bin, cap_predictor, tmp_path):
    out = run(["fairseq-train", cap_bin, *CAP, *TRAIN, "--criterion", "smallvocab_reinforce", "--max-sample-len", "30",
               "--finetune-from-model", cap_model, "--small-vocab-size", "40", "--max-epoch", "1",
               "--vocab-predictor", cap_predictor,
               "--optimizer", "sgd", "--lr", "0.05", "--save-dir", tmp_path / "rl", "--log-interval", "1"])
    log = out.stdout + out.stderr
    rewards = [float(r) for r in re.findall(r"reward=([\d.]+)", log)]
    assert len(rewards) >= 5 and "nonfinite=0" in log and (tmp_path / "rl" / "checkpoint_last.pt").exists()


def test_multi_reference_bleu_uses_every_caption():
    captions = ["a red dog on the left", "one red dog at the left side", "a cat in the middle of the room",
                "two cats in the middle", "there is a cat at the center"]
    index = np.array([0, 0, 1, 1, 1])
    # each hypothesis equals some reference of its image, never the first one: 100 only with every reference
    bleu, images, signature = caption_bleu.score({0: "one red dog at the left side", 1: "there is a cat at the center"},
                                                 captions, index)
    assert images == 2 and bleu.score == pytest.approx(100.0)
    assert signature.startswith("nrefs:var|") and "|tok:13a|" in signature  # two captions of one image, three of one
    single, _, one = caption_bleu.score({0: captions[1], 1: captions[4]}, captions[::2][:2] + captions[1:2],
                                   np.array([0, 1, 0]))
    assert single.score < 100.0 and one.startswith("nrefs:var|")  # two captions of image 0, one of image 1
    with pytest.raises(ValueError, match="3 hypotheses"):
        caption_bleu.score({0: "a", 1: "b", 2: "c"}, captions, index)


# two splits of the same size (like Flickr8k's dev and test): the hypotheses' ids alone fit both
SPLIT_CAPTIONS = {"valid": ["a red dog on the left", "one red dog at the left", "a cat in the middle",
                            "two cats in the middle", "a bird at the top", "one bird up high"],
                  "test": ["a blue car on the road", "one blue car driving", "a man with a hat",
                           "a man wearing a hat", "two children play", "kids playing together"]}


def _caption_folder(tmp_path):
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "dict.en.txt").write_text("a 1\n")
    for split, captions in SPLIT_CAPTIONS.items():
        (data / "raw" / f"{split}.en").write_text("\n".join(captions) + "\n")
        (data / f"{split}.index").write_text("0\n0\n1\n1\n2\n2\n")
    return data


def _generate_output(path, split, ids=(0, 1, 2), targets=None):
    """fairseq-generate --one-caption-per-image's lines (T-, H-, D-) for ``split``: each image's first
    caption is both its reference and its hypothesis."""
    captions = SPLIT_CAPTIONS[split]
    lines = []
    for i in ids:
        caption = captions[2 * i] if i < 3 else "a dog"
        lines += [f"T-{i}\t{(targets or {}).get(i, caption)}", f"H-{i}\t-0.5\t{caption}", f"D-{i}\t-0.5\t{caption}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_caption_bleu_refuses_the_output_of_another_split(tmp_path, capsys):
    data = _caption_folder(tmp_path)
    gen = _generate_output(tmp_path / "test.out", "test")
    caption_bleu.main(["--data", str(data), "--split", "test", "--json", str(gen)])
    assert json.loads(capsys.readouterr().out)["bleu"] == 100.0
    with pytest.raises(SystemExit) as exit_:
        caption_bleu.main(["--data", str(data), "--split", "valid", str(gen)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "test.out" in err and "--split valid" in err and "valid.en" in err
    assert "3 of the 3 references" in err and "T-0" in err and "a blue car on the road" in err
    assert "a red dog on the left" in err and "--gen-subset" in err


def test_caption_bleu_names_ids_outside_the_split(tmp_path, capsys):
    data = _caption_folder(tmp_path)
    gen = _generate_output(tmp_path / "gen.out", "test", ids=(0, 1, 7))
    with pytest.raises(SystemExit) as exit_:
        caption_bleu.main(["--data", str(data), "--split", "test", str(gen)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "gen.out" in err and "--split test" in err
    assert "id 7" in err and "3 images" in err and "missing: 2" in err


def test_caption_bleu_accepts_unknown_words_and_detokenized_references(tmp_path, capsys):
    data = _caption_folder(tmp_path)
    # --min-count > 1 escapes unknown words as <<unk>> in T- lines; --tokenizer moses joins punctuation
    (data / "raw" / "test.en").write_text("\n".join(["a blue car on the road ."] + SPLIT_CAPTIONS["test"][1:]) + "\n")
    gen = _generate_output(tmp_path / "gen.out", "test", targets={0: "a <<unk>> car on the road ."})
    caption_bleu.main(["--data", str(data), "--split", "test", str(gen)])
    assert "3 images" in capsys.readouterr().out
    gen = _generate_output(tmp_path / "gen.out", "test", targets={0: "a blue car on the road."})
    caption_bleu.main(["--data", str(data), "--split", "test", str(gen)])
    assert "3 images" in capsys.readouterr().out


@pytest.mark.slow
def test_feature_dimension_unlike_the_checkpoints_is_refused(cap_model, cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    for split in ("train", "valid", "test"):
        np.save(data / f"{split}.npy", np.zeros((len(np.load(data / f"{split}.npy")), 32), dtype=np.float32))
    out = run(["fairseq-generate", data, *CAP, *DECODE[:-2], "--path", cap_model, "--gen-subset", "test",
               "--small-vocab-size", "0"], check=False)
    assert out.returncode != 0
    assert f"trained on {TINY.feature_dim}-d image features" in out.stderr and "are 32-d" in out.stderr


@pytest.mark.slow
def test_benchmark_on_a_captioning_folder(cap_model, cap_bin, cap_predictor, tmp_path):
    """(cap_model wrote the training split's K = 40 lists.)"""
    import json

    from fairseq.data import Dictionary

    run(["scripts/benchmark.py", "--data", cap_bin, "--captions", "--candidates-dir",
         cap_predictor.parent / "candidates", "--k", "40", "--modes", "ce", "reinforce", "--batch", "8",
         "--embed-dim", "8", "--steps", "2", "--warmup", "1", "--threads", "1", "--json", tmp_path / "r.json"],
        cwd=USER_DIR.parent)
    records = json.loads((tmp_path / "r.json").read_text())
    assert [(r["mode"], r["softmax"], r["K"]) for r in records] == [
        ("ce", "small", 40), ("ce", "full", 0), ("reinforce", "small", 40), ("reinforce", "full", 0)]
    vocab = len(Dictionary.load(str(cap_bin / "dict.en.txt")))
    assert all(r["task"] == "captioning" and r["vocab_size"] == vocab for r in records)
    assert 0 < records[2]["sample_len"] <= 50
    # from trained weights (the checkpoint's d = 24)
    run(["scripts/benchmark.py", "--data", cap_bin, "--captions", "--candidates-dir",
         cap_predictor.parent / "candidates", "--k", "40", "--modes", "reinforce", "--batch", "8", "--embed-dim", "24",
         "--steps", "1", "--warmup", "1", "--threads", "1", "--checkpoint", cap_model, "--json", tmp_path / "t.json"],
        cwd=USER_DIR.parent)
    assert all(r["checkpoint"] == str(cap_model) for r in json.loads((tmp_path / "t.json").read_text()))


@pytest.mark.slow
def test_interactive_is_refused_at_the_first_line(cap_model, cap_bin):
    out = run(["fairseq-interactive", cap_bin, *CAP, *DECODE, "--buffer-size", "8", "--path", cap_model],
              stdin="a dog runs\n", check=False)
    assert out.returncode != 0
    assert "not lines of text: fairseq-interactive cannot be used with it" in out.stderr
    assert "encode_line" not in out.stderr


@pytest.mark.slow
def test_predictors_of_the_other_input_kind_are_named(cap_predictor, cap_bin, tiny_bin, predictor, tmp_path):
    from fairseq_smallvocab.predictor.inference import PredictorError, load_predictor
    from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask

    cfg = TranslationSmallVocabConfig(data=str(tiny_bin), vocab_predictor=str(cap_predictor),
                                      candidates_dir=str(tmp_path / "c"), small_vocab_size=40)
    cfg.train_subset, cfg.dataset_impl, cfg.required_seq_len_multiple = "train", None, 1
    with pytest.raises(PredictorError, match=r"predicts words from image features .* these data .* are sentence "
                                             r"pairs"):
        TranslationSmallVocabTask.setup_task(cfg).load_dataset("valid")
    with pytest.raises(PredictorError, match="predicts words from source sentences .* captioning reads image"):
        caption_task(cap_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path / "d"),
              small_vocab_size=40).load_dataset("valid")
    # export_candidates.py: a caption predictor with a text data folder names the dictionaries that exist
    with pytest.raises(PredictorError, match="target dictionaries differ") as err:
        load_predictor(cap_predictor, tiny_bin)
    assert f"trained with {cap_bin / 'dict.en.txt'} (" in str(err.value)
    assert f"the data uses {tiny_bin / 'dict.tgt.txt'} (" in str(err.value)
    with pytest.raises(PredictorError, match=re.escape(f"{cap_bin} is a captioning folder")):
        load_predictor(predictor, cap_bin)
    assert not (cap_bin / "dict.tgt.txt").exists()
    out = run(["scripts/export_candidates.py", "--predictor", cap_predictor, "--data", tiny_bin, "--k", "40",
               "--out-dir", tmp_path / "e"], cwd=USER_DIR.parent, check=False)
    assert out.returncode == 2 and f"trained with {cap_bin / 'dict.en.txt'}" in out.stderr


@pytest.mark.slow
def test_export_candidates_names_a_captioning_folder_given_to_a_predictor_of_sentences(cap_bin, predictor,
                                                                                       tmp_path):
    """A captioning --data for a predictor of source sentences: the error names the folder, what it
    holds and the predictor it needs, instead of fairseq's 'No such file ... dict.None.txt'."""
    script = "scripts/export_candidates.py"
    out = run([script, "--predictor", predictor, "--data", cap_bin, "--k", "40", "--out-dir", tmp_path / "a"],
              cwd=USER_DIR.parent, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "dict.None" not in out.stderr, out.stderr
    assert f"{cap_bin} is a captioning folder (its captions binarized alone, dict.en.txt;" in out.stderr
    assert f"the predictor {predictor} predicts words from source sentences" in out.stderr
    assert "use a predictor trained on it with --source-features" in out.stderr
    assert not (tmp_path / "a").exists()
