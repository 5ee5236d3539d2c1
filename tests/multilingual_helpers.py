"""What the multilingual tests share: a tiny three-way corpus (en -> de, en -> fr; the French side a
spelling of the German one), binarized with one shared dictionary, the flags of fairseq's multilingual
task and of a tiny Transformer, and the task built in-process."""

from pathlib import Path

from helpers import USER_DIR

PAIRS = [("en", "de"), ("en", "fr")]
LANG_ARGS = ["--lang-pairs", "en-de,en-fr", "--encoder-langtok", "src", "--decoder-langtok"]
MODEL_ARGS = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
              "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
              "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
              "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "2000", "--cpu", "--no-progress-bar",
              "--num-workers", "0", "--no-epoch-checkpoints", "--seed", "1", "--log-format", "simple"]
STOCK = ["--task", "translation_multi_simple_epoch", *LANG_ARGS]
OURS = ["--user-dir", USER_DIR, "--task", "translation_multi_smallvocab", *LANG_ARGS]


def write_three_way(out: Path, size=400):
    """A synthetic en-de corpus with a French side made from the German one (each word spelled backwards
    behind an f), train / valid / test."""
    from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus

    write_corpus(out, SyntheticConfig(tgt_vocab_size=300, train_size=size, valid_size=40, test_size=30),
                 src_lang="en", tgt_lang="de")
    for split in ("train", "valid", "test"):
        lines = (out / f"{split}.de").read_text().splitlines()
        (out / f"{split}.fr").write_text("\n".join(" ".join("f" + w[::-1] for w in line.split())
                                                   for line in lines) + "\n")
    return out


def ml_task(data, *extra, target_lang=None):
    """translation_multi_smallvocab set up in-process from a command line (training, or decoding one pair)."""
    from fairseq import options, tasks

    parser = options.get_training_parser() if target_lang is None else options.get_generation_parser()
    args = [str(data), *[str(a) for a in OURS], *extra]
    args += MODEL_ARGS if target_lang is None else ["-s", "en", "-t", target_lang]
    parsed = options.parse_args_and_arch(parser, args)
    for name in ("max_source_positions", "max_target_positions"):  # the model's defaults, as fairseq-train has them
        if getattr(parsed, name, None) is None:
            setattr(parsed, name, 1024)
    return tasks.setup_task(parsed)


ML_K = 60  # the candidates per row of the tests' multilingual task


def random_predictor(ptask, seed):
    """An untrained predictor whose output layer is drawn too (fairseq starts it at 0: every word alike)."""
    import torch
    from vocab_predictor_helpers import untrained_model

    torch.manual_seed(seed)
    model = untrained_model(ptask).eval()
    torch.nn.init.normal_(model.output.weight)
    torch.nn.init.normal_(model.output.bias)
    return model


def task_with_predictors(ml_bin, seed_fr=1):
    """The task (K = ML_K) with an untrained predictor per pair (each its own seed), loaded in place."""
    from vocab_predictor_helpers import vp_task

    task = ml_task(ml_bin, "--vocab-predictor", "en-de:de.pt,en-fr:fr.pt", "--small-vocab-size", str(ML_K))
    models = {}
    for tgt, seed in (("de", 0), ("fr", seed_fr)):
        ptask = vp_task(ml_bin, source_lang="en", target_lang=tgt)
        models[tgt] = random_predictor(ptask, seed)
        task.predictors()._loaded[f"{tgt}.pt"] = (models[tgt], ptask.source_dictionary)
        task.predictors()._trained_on[f"{tgt}.pt"] = ("en", tgt)  # what its checkpoint would record
    return task, models


def pair_batch(task, split, n=12):
    """``n`` rows of ``split`` drawn in a fixed order, collated as a batch."""
    import torch

    task.load_dataset(split)
    ds = task.datasets[split]
    return ds.collater([ds[i] for i in torch.randperm(len(ds), generator=torch.Generator().manual_seed(0))[:n]])
