"""What the vocabulary predictor's tests share: a vocab_prediction task made in-process (``vp_task``),
a predictor trained by fairseq-train (``train_predictor``, ``TRAIN_ARGS``), an untrained one built as fairseq
would (``untrained_model``) and a hand-made corpus of five sentence pairs (``make_hand_bin``)."""

from helpers import USER_DIR, run

from smallvocab_tools.data import prep

SPLITS = {"train": "train", "valid": "valid", "test": "test"}
TRAIN_ARGS = ["--user-dir", USER_DIR, "--task", "vocab_prediction", "--arch", "vocab_predictor",
              "--criterion", "vocab_prediction_bce", "--optimizer", "adagrad", "--lr", "0.08",
              "--weight-decay", "1e-6", "--clip-norm", "1.0", "--batch-size", "64", "--cpu", "--seed", "1",
              "--no-progress-bar", "--log-format", "simple", "--num-workers", "0", "--no-epoch-checkpoints"]


def vp_task(data, **overrides):
    from fairseq_smallvocab.tasks.vocab_prediction import VocabPredictionConfig, VocabPredictionTask

    cfg = VocabPredictionConfig(data=str(data), **overrides)
    cfg.train_subset, cfg.dataset_impl = "train", None
    return VocabPredictionTask.setup_task(cfg)


def train_predictor(data, save_dir, *extra, epochs=3):
    result = run(["fairseq-train", data, *TRAIN_ARGS, "--max-epoch", str(epochs), "--save-dir", save_dir,
                  *extra])
    return save_dir / "checkpoint_last.pt", result


def untrained_model(task):
    """A small untrained predictor, built as fairseq would (without the registry)."""
    from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig

    model = VocabPredictor.build_model(VocabPredictorConfig(embed_dim=16, dropout=0.0), task)
    model.set_prior(task.compute_prior())
    return model


def make_hand_bin(folder):
    """Three training and two validation sentence pairs over the words x y z -> a b c, binarized in
    ``folder``."""
    raw = folder / "raw"
    raw.mkdir()
    prep.write_lines(raw / "train.src", ["x y", "y z z", "x"])
    prep.write_lines(raw / "train.tgt", ["a b", "a c c", "b"])
    prep.write_lines(raw / "valid.src", ["x", "z"])
    prep.write_lines(raw / "valid.tgt", ["b", "c a"])
    dest = raw.parent / "bin"
    prep.prepare(raw, dest, "src", "tgt", {"train": "train", "valid": "valid"}, min_count=1, log=lambda m: None)
    return dest
