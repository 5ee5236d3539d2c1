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
