"""What one configuration measures: its task, model, criterion and batches.

Synthetic configurations (``--vocab-sizes``) get a stand-in task with a
dictionary of |V| words (``synthetic_task``), the model ``build_model``
builds and random batches from ``make_batch``; ``--data`` configurations get
the task, model, criterion and first batches of a binarized corpus as
fairseq-train builds them (``real_setup``).  Used by both workers
(``train_worker.py``, ``decode_worker.py``); torch and fairseq are imported
inside the functions, so that the command line loads without them.
"""

import argparse
import shlex
from pathlib import Path


def _dictionary(size: int):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(size - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def make_batch(vocab_size, k, batch, max_len, device, seed=0, zipf=0.0):
    """Random sentence pairs of ``max_len`` tokens (eos included) and, with
    K > 0, candidate rows: specials at their ids, the gold words, then the
    most frequent words (ids in rank order) or, with ``zipf == 0``, random ones.
    Target words: Zipf-distributed over the ids with exponent ``zipf`` (the id
    is the frequency rank, as in a fairseq dictionary), uniform when 0."""
    import torch

    from fairseq_smallvocab.candidates.space import candidate_rows

    gen = torch.Generator().manual_seed(seed)
    nspecial, eos = 4, 2
    src = torch.randint(nspecial, vocab_size, (batch, max_len), generator=gen)
    if zipf > 0:
        ranks = torch.arange(1, vocab_size - nspecial + 1, dtype=torch.float64)
        draws = torch.multinomial(ranks.pow(-zipf), batch * max_len, replacement=True, generator=gen)
        tgt = (draws + nspecial).view(batch, max_len)
    else:
        tgt = torch.randint(nspecial, vocab_size, (batch, max_len), generator=gen)
    src[:, -1] = tgt[:, -1] = eos
    prev = torch.cat([torch.full((batch, 1), eos), tgt[:, :-1]], dim=1)
    net_input = {"src_tokens": src, "src_lengths": torch.full((batch,), max_len), "prev_output_tokens": prev}
    if k:
        if zipf > 0:  # a predictor's list: mostly frequent words
            score = (1.0 - torch.arange(vocab_size) / vocab_size).expand(batch, -1).clone()
        else:
            score = torch.rand(batch, vocab_size, generator=gen)
        score.scatter_(1, tgt, 2.0)  # gold words first
        score[:, :nspecial] = -1.0
        lists = score.topk(k - nspecial, dim=1).indices.numpy()
        rows = candidate_rows(lists, k, nspecial, "benchmark batch")
        net_input["candidates"] = torch.from_numpy(rows.astype("int64"))
    sample = {"id": torch.arange(batch), "net_input": net_input, "target": tgt,
              "nsentences": batch, "ntokens": batch * max_len}
    return to_device(sample, device)


def to_device(sample, device):
    """The sample's tensors, nested dicts included, on ``device``."""
    import torch

    if isinstance(sample, dict):
        return {key: to_device(value, device) for key, value in sample.items()}
    return sample.to(device) if torch.is_tensor(sample) else sample


def synthetic_task(cfg: dict):
    """Threads and seed set; returns what the models and criteria read of a task."""
    import torch

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)

    if cfg.get("model_args"):  # a training run's flags: one dictionary where they share the embeddings
        shared = "--share-all-embeddings" in shlex.split(cfg["model_args"])
    else:
        shared = cfg.get("arch", "lstm_smallvocab") != "lstm_smallvocab"  # --share-all-embeddings: one dictionary

    class _Task:
        target_dictionary = _dictionary(cfg["vocab_size"])
        source_dictionary = target_dictionary if shared else _dictionary(cfg["src_vocab_size"])
        uses_features = False

    return _Task


# the multilingual checkpoints users fine-tune today, as fairseq Transformers (pre-norm, shared embeddings):
# d, FFN, heads and layers of M2M-100 418M and NLLB-200 600M (distilled), with their shared vocabularies
SHAPES = {
    "m2m100_418m": {"vocab": 128112, "dim": 1024, "ffn": 4096, "heads": 16, "layers": 12},
    "nllb200_600m": {"vocab": 256206, "dim": 1024, "ffn": 4096, "heads": 16, "layers": 12},
}


def _shape_args(args, shape: dict, layers):
    """``args`` set to a model shape of ``SHAPES`` (``layers``: fewer layers on each side, where given)."""
    args.encoder_embed_dim = args.decoder_embed_dim = shape["dim"]
    args.encoder_ffn_embed_dim = args.decoder_ffn_embed_dim = shape["ffn"]
    args.encoder_attention_heads = args.decoder_attention_heads = shape["heads"]
    args.encoder_layers = args.decoder_layers = layers or shape["layers"]
    args.encoder_normalize_before = args.decoder_normalize_before = True


def build_model(cfg: dict, task):
    """The measured model, restricted as translation_smallvocab restricts it:
    ``lstm_smallvocab`` (d = --embed-dim), or a fairseq arch built as
    fairseq-train builds it (``transformer``: shared embeddings; d and the
    layers from --embed-dim and --layers when given; with --shape, a shape of
    ``SHAPES``, its layers cut to --layers where given), or the model of a
    training run's flags (``cfg["model_args"]``)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_smallvocab.models.lstm_smallvocab import LSTMSmallVocabConfig, LSTMSmallVocabModel
    from fairseq_smallvocab.models.restricted import restrict

    arch = cfg.get("arch", "lstm_smallvocab")
    if cfg.get("model_args"):  # a training run's own flags (``--model-args``), parsed as fairseq-train parses them
        from fairseq import options

        args = options.parse_args_and_arch(options.get_training_parser(),
                                           ["-", "--task", "translation", *shlex.split(cfg["model_args"])])
        model = ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)
        return restrict(model, args.arch)
    if arch == "lstm_smallvocab":
        model = LSTMSmallVocabModel.build_model(LSTMSmallVocabConfig(embed_dim=cfg["d"], dropout=0.2), task)
    else:
        args = argparse.Namespace(share_all_embeddings=True, dropout=0.1, criterion="cross_entropy")
        if cfg.get("shape"):
            _shape_args(args, SHAPES[cfg["shape"]], cfg.get("layers"))
        elif cfg.get("d"):
            args.encoder_embed_dim = args.decoder_embed_dim = cfg["d"]
            args.encoder_ffn_embed_dim = args.decoder_ffn_embed_dim = 4 * cfg["d"]
        if cfg.get("layers") and not cfg.get("shape"):
            args.encoder_layers = args.decoder_layers = cfg["layers"]
        ARCH_CONFIG_REGISTRY[arch](args)
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return restrict(model, arch)


def real_setup(cfg: dict, count: int):
    """The task, model and criterion as fairseq-train builds them for a
    binarized corpus (``cfg["data"]``), and the first ``count`` training
    batches in fairseq's shuffled order (seed 1).  Under the flat sample
    limit the criterion runs every sample to it (``flat_limit.py``)."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)
    captions = cfg.get("captions", False)
    import fairseq_smallvocab

    argv = [cfg["data"], "--user-dir", str(Path(fairseq_smallvocab.__file__).resolve().parent),
            "--small-vocab-size", str(cfg["K"]),
            "--criterion", "cross_entropy" if cfg["mode"] == "ce" else "smallvocab_reinforce", "--cpu"]
    # the model: the user's flags (--model-args, as a training run's), else the paper's LSTM at d
    model_args = shlex.split(cfg["model_args"]) if cfg.get("model_args") else None
    if captions:  # image features -> captions: samples limited by length only
        argv += ["--task", "captioning_smallvocab", "--arch", "lstm_caption_smallvocab", "--embed-dim", str(cfg["d"])]
    else:
        argv += ["--task", "translation_smallvocab", "-s", cfg["source_lang"], "-t", cfg["target_lang"],
                 *(model_args or ["--arch", "lstm_smallvocab", "--embed-dim", str(cfg["d"])])]
    if cfg["mode"] == "reinforce":
        argv += ["--rl-samples", str(cfg["rl_samples"]), "--rl-baseline", cfg["rl_baseline"],
                 "--max-sample-len", str(cfg["max_sample_len"])]
        if cfg["sample_limit"] == "recipe" and not captions:
            argv += ["--sample-len-ratio", "1.5"]
    if cfg["K"]:
        argv += ["--candidates-dir", cfg["candidates_dir"]]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    fcfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(fcfg.task)
    model = task.build_model(fcfg.model)
    if cfg.get("checkpoint"):  # trained weights (the same for small and full: one model, one code path)
        from fairseq_smallvocab.compat.checkpoint_loading import read_checkpoint

        model.load_state_dict(read_checkpoint(cfg["checkpoint"])["model"], strict=True)
    if cfg["mode"] == "reinforce" and cfg["sample_limit"] == "flat":  # every sample to the limit: flat_limit.py
        from smallvocab_tools.bench.flat_limit import to_the_limit

        criterion = to_the_limit(task, fcfg.criterion)
    else:
        criterion = task.build_criterion(fcfg.criterion)
    task.load_dataset("train")
    dataset = task.dataset("train")
    itr = task.get_batch_iterator(dataset, max_sentences=cfg["batch"], seed=1,
                                  max_positions=1024 if captions else (1024, 1024)).next_epoch_itr(shuffle=True)
    if len(itr) < count:
        raise ValueError(f"{cfg['data']}: the training split has {len(itr)} batches of {cfg['batch']} sentences, "
                         f"{count} are needed (--warmup + --steps)")
    return model, criterion, [next(itr) for _ in range(count)], len(dataset)
