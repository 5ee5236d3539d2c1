"""Captioning data: the synthetic set, preparation (ours and Kiros et al.'s layout), the
captioning_smallvocab task's batches, and bad input in prepared folders."""

import shutil

import numpy as np
import pytest
import torch
from helpers import TINY, caption_task, copy_folder

from smallvocab_tools.data.synthetic_captions import CaptionConfig, generate


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


def test_prepared_folder_and_task_batches(cap_bin, cap_raw):
    assert (cap_bin / "dict.en.txt").is_file() and (cap_bin / "train.en-None.en.bin").is_file()
    assert np.load(cap_bin / "train.npy").shape == (TINY.train_images, TINY.feature_dim)
    task = caption_task(cap_bin, small_vocab_size=0)
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
    once = caption_task(cap_bin, small_vocab_size=0, one_caption_per_image=True)
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
    from smallvocab_tools.data.errors import DataError

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


def test_caption_index_outside_the_features_is_named(cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    lines = (data / "valid.index").read_text().splitlines()
    lines[7] = str(TINY.valid_images)
    (data / "valid.index").write_text("\n".join(lines) + "\n")
    task = caption_task(data, small_vocab_size=0)
    with pytest.raises(ValueError, match=rf"valid.index, line 8: caption 7 points at image row {TINY.valid_images}, "
                                         rf"outside the feature matrix's {TINY.valid_images} rows"):
        task.load_dataset("valid")
    (data / "valid.index").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="lines but the split has"):
        task.load_dataset("valid")


def test_nan_feature_row_is_named(cap_bin, tmp_path):
    data = copy_folder(cap_bin, tmp_path)
    feats = np.load(data / "test.npy")
    feats[5, 3] = np.nan
    np.save(data / "test.npy", feats)
    with pytest.raises(ValueError, match=r"test.npy: row 5 holds NaN"):
        caption_task(data, small_vocab_size=0).load_dataset("test")


def test_prepare_captions_names_the_file_and_split_of_a_nan_feature(cap_raw, tmp_path):
    from smallvocab_tools.data.caption_prep import prepare_captions
    from smallvocab_tools.data.errors import DataError

    raw = shutil.copytree(cap_raw, tmp_path / "raw")
    feats = np.load(raw / "valid.npy")
    feats[4, 0] = np.inf
    np.save(raw / "valid.npy", feats)
    with pytest.raises(DataError, match=r"valid\.npy \(valid split\): feature row 4 holds NaN or inf"):
        prepare_captions(raw, tmp_path / "bin", log=lambda m: None)
    assert not (tmp_path / "bin").exists()

