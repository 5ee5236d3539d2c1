"""Captioning: the synthetic set, data preparation (ours and Kiros et al.'s
layout), the captioning_smallvocab task, lstm_caption_smallvocab (small =
full softmax masked), REINFORCE and decoding through fairseq's CLIs,
multi-reference BLEU, and the bad-input errors."""

import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import USER_DIR, VP_TRAIN, candidate_batch, run

from smallvocab_tools.data.synthetic_captions import CaptionConfig, generate

TINY = CaptionConfig(n_objects=60, n_attributes=20, n_places=15, train_images=150, valid_images=20,
                     test_images=16, feature_dim=256, active_units=8)
CAP = ["--user-dir", USER_DIR, "--task", "captioning_smallvocab"]
TRAIN = ["--arch", "lstm_caption_smallvocab", "--embed-dim", "24", "--optimizer", "adam", "--lr", "0.01",
         "--batch-size", "32", "--cpu", "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints",
         "--seed", "1"]
DECODE = ["--cpu", "--batch-size", "8", "--max-len-b", "30", "--small-vocab-size", "40"]


@pytest.fixture(scope="module")
def cap_raw(tmp_path_factory):
    from smallvocab_tools.data.synthetic_captions import write_captions

    out = tmp_path_factory.mktemp("captions") / "raw"
    write_captions(out, TINY)
    return out


@pytest.fixture(scope="module")
def cap_bin(cap_raw, tmp_path_factory):
    from smallvocab_tools.data.caption_prep import prepare_captions

    dest = tmp_path_factory.mktemp("capbin") / "bin"
    prepare_captions(cap_raw, dest, log=lambda m: None)
    return dest


@pytest.fixture(scope="module")
def cap_predictor(cap_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("capvp")
    run(["fairseq-train", cap_bin, *VP_TRAIN, "--source-features", cap_bin, "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def cap_model(cap_bin, cap_predictor, tmp_path_factory):
    """A small-vocabulary captioner (K = 40), 2 CE epochs, predictor given."""
    save = tmp_path_factory.mktemp("capmodel")
    run(["fairseq-train", cap_bin, *CAP, *TRAIN, "--criterion", "cross_entropy", "--max-epoch", "2",
         "--vocab-predictor", cap_predictor, "--small-vocab-size", "40", "--save-dir", save,
         "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 30}', "--one-caption-per-image"])
    return save / "checkpoint_last.pt"


def _task(cap_bin, **overrides):
    from fairseq_smallvocab.tasks.captioning_smallvocab import CaptioningSmallVocabConfig, CaptioningSmallVocabTask

    cfg = CaptioningSmallVocabConfig(data=str(cap_bin), **overrides)
    cfg.train_subset, cfg.dataset_impl = "train", None
    return CaptioningSmallVocabTask.setup_task(cfg)


# -- the synthetic set ------------------------------------------------------------------------------


def test_synthetic_captions_are_seeded_and_shaped():
    a, b = generate(TINY), generate(TINY)
    for split in ("train", "valid", "test"):
        fa, ca, ia = a[split]
        fb, cb, ib = b[split]
        assert np.array_equal(fa, fb) and ca == cb and np.array_equal(ia, ib)
        assert fa.dtype == np.float32 and fa.shape[1] == TINY.feature_dim
        assert (fa >= 0).all() and np.isfinite(fa).all()
        assert np.array_equal(np.bincount(ia), np.full(len(fa), TINY.captions_per_image))
    # the 5 captions of an image are worded differently
    captions, index = a["train"][1], a["train"][2]
    for row in range(20):
        group = [c for c, r in zip(captions, index) if r == row]
        assert len(set(group)) == TINY.captions_per_image
    c = generate(CaptionConfig(**{**TINY.__dict__, "seed": 2}))
    assert c["train"][1] != captions


def test_default_synthetic_vocabulary_exceeds_5000_words():
    cfg = CaptionConfig(feature_dim=64, active_units=2, valid_images=1, test_images=1)
    words = {w for caption in generate(cfg)["train"][1] for w in caption.split()}
    assert len(words) >= 5000


def test_features_tell_scenes_apart():
    """Captions are predictable from the feature: nearest-neighbour features
    share more content words (those in under 20% of the images) than random
    pairs."""
    feats, captions, index = generate(TINY)["train"]
    words = [set() for _ in range(len(feats))]
    for c, r in zip(captions, index):
        words[r] |= set(c.split())
    images_with = {}
    for w in set().union(*words):
        images_with[w] = sum(w in ws for ws in words)
    words = [{w for w in ws if images_with[w] < 0.2 * len(feats)} or {"-"} for ws in words]
    sims = feats @ feats.T
    np.fill_diagonal(sims, -np.inf)
    nearest = sims.argmax(1)

    def overlap(i, j):
        return len(words[i] & words[j]) / len(words[i] | words[j])

    rng = np.random.default_rng(0)
    near = np.mean([overlap(i, nearest[i]) for i in range(len(feats))])
    rand = np.mean([overlap(i, j) for i, j in rng.integers(len(feats), size=(len(feats), 2)) if i != j])
    assert near > 2 * rand


# -- preparation ---------------------------------------------------------------------------------------


def test_prepared_folder_and_task_batches(cap_bin, cap_raw):
    assert (cap_bin / "dict.en.txt").is_file() and (cap_bin / "train.en-None.en.bin").is_file()
    assert np.load(cap_bin / "train.npy").shape == (TINY.train_images, TINY.feature_dim)
    task = _task(cap_bin, small_vocab_size=0)
    assert task.cfg.target_lang == "en" and task.feature_dim == TINY.feature_dim  # both inferred
    task.load_dataset("valid")
    ds = task.dataset("valid")
    assert len(ds) == TINY.valid_images * TINY.captions_per_image
    batch = ds.collater([ds[i] for i in range(7)])
    net = batch["net_input"]
    assert net["features"].shape == (7, TINY.feature_dim) and net["padding_mask"].shape == (7, 1)
    assert torch.equal(net["prev_output_tokens"][:, 1:], batch["target"][:, :-1].masked_fill(
        batch["target"][:, :-1].eq(task.tgt_dict.eos()), task.tgt_dict.pad()))
    # references: every caption of the example's image, its own first
    raw = (cap_raw / "valid.en").read_text().splitlines()
    index = np.loadtxt(cap_raw / "valid.index", dtype=int)
    for i, refs in zip(batch["id"].tolist(), batch["references"]):
        texts = [task.tgt_dict.string(r[:-1]) for r in refs]
        assert texts[0] == raw[i] and sorted(texts) == sorted(c for c, r in zip(raw, index) if r == index[i])
    once = _task(cap_bin, small_vocab_size=0, one_caption_per_image=True)
    once.load_dataset("valid")
    once.load_dataset("train")
    assert len(once.dataset("valid")) == TINY.valid_images
    assert len(once.dataset("train")) == TINY.train_images * TINY.captions_per_image  # never subsampled


def _kiros_files(folder, name, per_caption_rows, rng):
    caps, ims = {}, {}
    for split, n in (("train", 6), ("dev", 2), ("test", 2)):
        feats = rng.standard_normal((n, 10))  # float64, as some releases store them
        lines = [f"A Dog, runs{'!' if j % 2 else '.'} image {i} caption {j}" for i in range(n) for j in range(5)]
        (folder / f"{name}_{split}_caps.txt").write_text("\n".join(lines) + "\n")
        np.save(folder / f"{name}_{split}_ims.npy", np.repeat(feats, 5, axis=0) if per_caption_rows else feats)
        caps[split], ims[split] = lines, feats
    return caps, ims


@pytest.mark.parametrize("per_caption_rows", [False, True])
def test_kiros_layout_is_converted(tmp_path, per_caption_rows):
    from smallvocab_tools.data.caption_prep import prepare_captions

    raw = tmp_path / "f8k"
    raw.mkdir()
    caps, ims = _kiros_files(raw, "f8k", per_caption_rows, np.random.default_rng(0))
    stats = prepare_captions(raw, tmp_path / "bin", kiros="f8k", log=lambda m: None)
    for split, role in (("train", "train"), ("dev", "valid"), ("test", "test")):
        feats = np.load(tmp_path / "bin" / f"{role}.npy")
        assert feats.dtype == np.float32 and np.allclose(feats, ims[split])  # one row per image
        index = np.loadtxt(tmp_path / "bin" / f"{role}.index", dtype=int)
        assert np.array_equal(index, np.arange(len(caps[split])) // 5)
    assert (tmp_path / "bin" / "raw" / "train.en").read_text().splitlines()[1] == "a dog , runs ! image 0 caption 1"
    assert stats["splits"]["train"] == {"captions": 30, "images": 6, "tokens": 30 * 9}


def test_kiros_layout_errors_are_named(tmp_path):
    from smallvocab_tools.data.caption_prep import prepare_captions
    from smallvocab_tools.data.prep import DataError

    raw = tmp_path / "coco"
    raw.mkdir()
    _kiros_files(raw, "coco", False, np.random.default_rng(0))
    np.save(raw / "coco_dev_ims.npy", np.zeros((3, 10)))  # 3 rows for 10 captions
    with pytest.raises(DataError, match=r"coco_dev_ims.npy: 3 feature rows for 10 captions"):
        prepare_captions(raw, tmp_path / "bin", kiros="coco", log=lambda m: None)
    bad = np.zeros((2, 10))
    bad[1, 4] = np.nan
    np.save(raw / "coco_dev_ims.npy", bad)
    with pytest.raises(DataError, match="feature row 1 holds NaN"):
        prepare_captions(raw, tmp_path / "bin", kiros="coco", log=lambda m: None)
    assert not (tmp_path / "bin").exists()  # nothing that looks finished


# -- the model: small = full softmax masked to the candidates -------------------------------------


def _model():
    from fairseq.data import Dictionary

    from fairseq_smallvocab.models.lstm_caption_smallvocab import (
        LSTMCaptionSmallVocabConfig,
        LSTMCaptionSmallVocabModel,
    )

    d = Dictionary()
    for i in range(50):
        d.add_symbol(f"w{i}")
    from fairseq_smallvocab.candidate_model import restrict

    task = SimpleNamespace(target_dictionary=d, feature_dim=20)
    torch.manual_seed(0)
    model = restrict(LSTMCaptionSmallVocabModel.build_model(
        LSTMCaptionSmallVocabConfig(embed_dim=12, layers=2, dropout=0.0), task))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval(), d


def test_small_logits_equal_full_softmax_masked():
    model, d = _model()
    bsz, steps, k = 4, 6, 14
    feats = torch.randn(bsz, 20)
    cands = candidate_batch(k, len(d), bsz=bsz)
    prev = cands.gather(1, torch.randint(2, k, (bsz, steps)))
    full, _ = model(feats, prev)
    small, extra = model(feats, prev, candidates=cands)
    assert torch.allclose(small, full.gather(2, cands.unsqueeze(1).expand(-1, steps, -1)), atol=1e-5)
    masked = full.masked_fill(~torch.zeros_like(full, dtype=torch.bool).scatter_(
        2, cands.unsqueeze(1).expand(-1, steps, -1), True), float("-inf"))
    target = cands.gather(1, torch.randint(4, k, (bsz, steps)))
    loss_small = F.cross_entropy(small.transpose(1, 2), model.get_targets({"target": target}, (small, extra)))
    loss_full = F.cross_entropy(masked.transpose(1, 2), target)
    assert torch.allclose(loss_small, loss_full, atol=1e-5)
    # incremental decoding (the generator's path) gives the teacher-forced logits
    enc = model.encoder(feats)
    state, steps_out = {}, []
    for t in range(steps):
        out, _ = model.decoder(prev[:, : t + 1], enc, incremental_state=state)
        steps_out.append(out)
    assert torch.allclose(torch.cat(steps_out, 1), full, atol=1e-5)


def test_feature_width_is_checked_by_the_model():
    model, _ = _model()
    with pytest.raises(ValueError, match="reads B x 20 features"):
        model(torch.randn(2, 21), torch.full((2, 3), 2))


def test_reinforce_samples_inside_candidates_and_needs_no_source_length():
    from fairseq_smallvocab.criterions.reinforce_gleu import ReinforceGleuCriterion

    model, d = _model()
    task = SimpleNamespace(target_dictionary=d)
    bsz = 5
    cands = torch.cat([torch.arange(4).expand(bsz, 4), torch.arange(4, 10).expand(bsz, 6) + 3], 1)
    target = torch.tensor([[8, 9, 2]] * bsz)
    sample = {"net_input": {"features": torch.randn(bsz, 20), "padding_mask": torch.zeros(bsz, 1, dtype=torch.bool),
                            "prev_output_tokens": torch.tensor([[2, 8, 9]] * bsz), "candidates": cands},
              "target": target, "ntokens": 3 * bsz}
    crit = ReinforceGleuCriterion(task, max_sample_len=7)
    model.train()
    loss, size, log = crit(model, sample)
    loss.backward()
    assert size == bsz and torch.isfinite(loss) and 0 < log["sample_len"] <= 7 * bsz
    assert model.encoder.feature_proj.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="--sample-len-ratio needs source sentences"):
        ReinforceGleuCriterion(task, sample_len_ratio=1.5)(model, sample)


# -- through fairseq's CLIs -------------------------------------------------------------------------------


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
    assert f"{TINY.test_images} images" in bleu.stdout and "BLEU = " in bleu.stdout
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
    out = run(["fairseq-train", cap_bin, *CAP, *TRAIN, "--criterion", "reinforce_gleu", "--max-sample-len", "30",
               "--finetune-from-model", cap_model, "--small-vocab-size", "40", "--max-epoch", "1",
               "--vocab-predictor", cap_predictor,
               "--optimizer", "sgd", "--lr", "0.05", "--save-dir", tmp_path / "rl", "--log-interval", "1"])
    log = out.stdout + out.stderr
    rewards = [float(r) for r in re.findall(r"reward=([\d.]+)", log)]
    assert len(rewards) >= 5 and "nonfinite=0" in log and (tmp_path / "rl" / "checkpoint_last.pt").exists()


def test_multi_reference_bleu_uses_every_caption():
    import importlib.util

    spec = importlib.util.spec_from_file_location("caption_bleu", USER_DIR.parent / "scripts" / "caption_bleu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    captions = ["a red dog on the left", "one red dog at the left side", "a cat in the middle of the room",
                "two cats in the middle", "there is a cat at the center"]
    index = np.array([0, 0, 1, 1, 1])
    # each hypothesis equals some reference of its image, never the first one: 100 only with every reference
    bleu, images = mod.score({0: "one red dog at the left side", 1: "there is a cat at the center"}, captions, index)
    assert images == 2 and bleu.score == pytest.approx(100.0)
    single, _ = mod.score({0: captions[1], 1: captions[4]}, captions[::2][:2] + captions[1:2], np.array([0, 1, 0]))
    assert single.score < 100.0
    with pytest.raises(ValueError, match="3 hypotheses"):
        mod.score({0: "a", 1: "b", 2: "c"}, captions, index)


# -- bad input ---------------------------------------------------------------------------------------


def _copy(cap_bin, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(cap_bin, data)
    return data


def test_caption_index_outside_the_features_is_named(cap_bin, tmp_path):
    data = _copy(cap_bin, tmp_path)
    lines = (data / "valid.index").read_text().splitlines()
    lines[7] = str(TINY.valid_images)
    (data / "valid.index").write_text("\n".join(lines) + "\n")
    task = _task(data, small_vocab_size=0)
    with pytest.raises(ValueError, match=rf"valid.index, line 8: caption 7 points at image row {TINY.valid_images}, "
                                         rf"outside the feature matrix's {TINY.valid_images} rows"):
        task.load_dataset("valid")
    (data / "valid.index").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="lines but the split has"):
        task.load_dataset("valid")


def test_nan_feature_row_is_named(cap_bin, tmp_path):
    data = _copy(cap_bin, tmp_path)
    feats = np.load(data / "test.npy")
    feats[5, 3] = np.nan
    np.save(data / "test.npy", feats)
    with pytest.raises(ValueError, match=r"test.npy: row 5 holds NaN"):
        _task(data, small_vocab_size=0).load_dataset("test")


@pytest.mark.slow
def test_feature_dimension_unlike_the_checkpoints_is_refused(cap_model, cap_bin, tmp_path):
    data = _copy(cap_bin, tmp_path)
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
def test_interactive_is_refused_at_start(cap_model, cap_bin):
    out = run(["fairseq-interactive", cap_bin, *CAP, *DECODE, "--buffer-size", "8", "--path", cap_model], stdin="",
              check=False)
    assert out.returncode != 0  # no input at all: refused before reading any
    assert "not lines of text: fairseq-interactive cannot be used with it" in out.stderr
    assert "encode_line" not in out.stderr


@pytest.mark.slow
def test_predictors_of_the_other_input_kind_are_named(cap_predictor, cap_bin, tiny_bin, predictor, tmp_path):
    from fairseq_smallvocab.predictor import PredictorError, load_predictor
    from fairseq_smallvocab.tasks.translation_smallvocab import TranslationSmallVocabConfig, TranslationSmallVocabTask

    cfg = TranslationSmallVocabConfig(data=str(tiny_bin), vocab_predictor=str(cap_predictor),
                                      candidates_dir=str(tmp_path / "c"), small_vocab_size=40)
    cfg.train_subset, cfg.dataset_impl, cfg.required_seq_len_multiple = "train", None, 1
    with pytest.raises(PredictorError, match=r"predicts words from image features .* these data .* are sentence "
                                             r"pairs"):
        TranslationSmallVocabTask.setup_task(cfg).load_dataset("valid")
    with pytest.raises(PredictorError, match="predicts words from source sentences .* captioning reads image"):
        _task(cap_bin, vocab_predictor=str(predictor), candidates_dir=str(tmp_path / "d"),
              small_vocab_size=40).load_dataset("valid")
    # export_candidates.py: a caption predictor with a text data folder names the dictionaries that exist
    with pytest.raises(PredictorError, match="target dictionaries differ") as err:
        load_predictor(cap_predictor, tiny_bin)
    assert f"trained with {cap_bin / 'dict.en.txt'} (" in str(err.value)
    assert f"the data uses {tiny_bin / 'dict.tgt.txt'} (" in str(err.value)
    assert not (cap_bin / "dict.tgt.txt").exists()
    out = run(["scripts/export_candidates.py", "--predictor", cap_predictor, "--data", tiny_bin, "--k", "40",
               "--out-dir", tmp_path / "e"], cwd=USER_DIR.parent, check=False)
    assert out.returncode == 2 and f"trained with {cap_bin / 'dict.en.txt'}" in out.stderr


def test_prepare_captions_names_the_file_and_split_of_a_nan_feature(cap_raw, tmp_path):
    from smallvocab_tools.data.caption_prep import prepare_captions
    from smallvocab_tools.data.prep import DataError

    raw = shutil.copytree(cap_raw, tmp_path / "raw")
    feats = np.load(raw / "valid.npy")
    feats[4, 0] = np.inf
    np.save(raw / "valid.npy", feats)
    with pytest.raises(DataError, match=r"valid\.npy \(valid split\): feature row 4 holds NaN or inf"):
        prepare_captions(raw, tmp_path / "bin", log=lambda m: None)
    assert not (tmp_path / "bin").exists()
