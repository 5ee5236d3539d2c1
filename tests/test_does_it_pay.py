"""scripts/does_it_pay.py: small vs full softmax on a user's own model flags, |V| and K, and the verdict it
draws from the measured ratios (the numbers themselves are not tested)."""

import re
import statistics

import pytest
from helpers import REPO, run

TINY_FLAGS = ("--arch transformer --encoder-layers 1 --decoder-layers 2 --encoder-embed-dim 24 "
              "--decoder-embed-dim 24 --encoder-ffn-embed-dim 48 --decoder-ffn-embed-dim 48 "
              "--encoder-attention-heads 2 --decoder-attention-heads 2 --share-all-embeddings")


def _args(**overrides):
    from smallvocab_tools.bench.does_it_pay import parse_args

    class Args:
        model_args, rl_samples, batch, beam, decode_batch, threads, device, rounds = TINY_FLAGS, 4, 64, 5, 64, 2, \
            "cpu", 3
    args = Args()
    for key, value in overrides.items():
        setattr(args, key, value)
    assert parse_args  # the module loads without torch
    return args


def _records(step_small, step_full, dec_small, dec_full, mem_small=100.0, mem_full=150.0):
    return [{"mode": "reinforce", "softmax": "small", "sec_per_step": step_small, "peak_mem_mb": mem_small,
             "speedup": round(step_full / step_small, 3)},
            {"mode": "reinforce", "softmax": "full", "sec_per_step": step_full, "peak_mem_mb": mem_full},
            {"mode": "decode", "softmax": "small", "ms_per_sentence": dec_small,
             "speedup": round(dec_full / dec_small, 3)},
            {"mode": "decode", "softmax": "full", "ms_per_sentence": dec_full}]


SHAPE = {"vocab_size": 4008, "src_vocab_size": 4008, "src_len": 21, "tgt_len": 23}


@pytest.mark.parametrize("full, expected", [
    (1.8, "Verdict: the small softmax pays here for REINFORCE (1.80x faster): train and decode with "
          "--small-vocab-size 500"),
    (1.02, "Verdict: the small softmax does not pay on this model here (1.02x)"),
    (1.1, "Verdict: the small softmax pays little here (1.10x)"),
    (1.2, "Verdict: the small softmax pays here for REINFORCE (1.20x faster)"),
    (1.05, "Verdict: the small softmax pays little here (1.05x)"),
])
def test_the_verdict_follows_the_measured_reinforce_ratio(full, expected):
    from smallvocab_tools.bench.does_it_pay import verdict

    text = verdict(_records(1.0, full, 2.0, 3.0), SHAPE, 500, _args())
    assert expected in text
    assert text.count("Verdict:") == 1
    assert f"small 1.000 s, full {full:.3f} s: {full:.2f}x faster small, 1.50x less memory" in text
    assert "small 2.00 ms, full 3.00 ms a sentence: 1.50x faster small (pays)" in text
    assert "|V| = 4,008, K = 500, transformer" in text and "21 -> 23 tokens" in text
    assert ("--rounds 3" in text) is False  # three rounds were run: no one-round caveat


def test_the_ceiling_says_how_much_any_k_could_gain():
    """The step with the smallest output layer (K = CEILING_K) beside it: "of at most", and the output layer's
    share of the full step; ``judged`` gives the verdict and its ratios (what ``--json`` writes)."""
    from smallvocab_tools.bench.does_it_pay import CEILING_K, judged, verdict

    records = _records(1.0, 0.95, 2.0, 3.0)
    for record in records:
        record.setdefault("K", 0 if record["softmax"] == "full" else 500)
    records.insert(1, {"mode": "reinforce", "softmax": "small", "K": CEILING_K, "sec_per_step": 0.864,
                       "peak_mem_mb": 90.0, "speedup": 1.1})
    text = verdict(records, SHAPE, 500, _args())
    assert (f"0.95x faster small of at most 1.10x (the step with a {CEILING_K}-word output layer: 0.864 s, 1.10x; "
            "the output layer is 9% of the full step)") in text
    assert "Verdict: the small softmax does not pay on this model here (0.95x)" in text
    records[1].update(sec_per_step=0.95, speedup=1.0)  # no faster than the full step: nothing any K could gain
    assert f"0.95x faster small (the step with a {CEILING_K}-word output layer: 0.950 s, 1.00x: the output layer " \
        "costs nothing measurable here)" in verdict(records, SHAPE, 500, _args())
    records[1].update(sec_per_step=0.864, speedup=1.1)
    said = judged(records, 500)
    assert (said["verdict"], said["step_ratio"], said["ceiling"], said["decode_ratio"]) == ("does not pay", 0.95, 1.1,
                                                                                            1.5)


def test_one_round_is_said_to_be_noisy():
    from smallvocab_tools.bench.does_it_pay import verdict

    assert "one round" in verdict(_records(1.0, 2.0, 1.0, 0.9), SHAPE, 500, _args(rounds=1))
    assert "0.90x faster small (does not pay)" in verdict(_records(1.0, 2.0, 1.0, 0.9), SHAPE, 500, _args())


def test_the_corpus_shape_is_its_dictionaries_and_mean_training_lengths(tiny_raw, tiny_bin):
    from fairseq.data import Dictionary

    from smallvocab_tools.bench.does_it_pay import corpus_shape

    shape = corpus_shape(tiny_bin, "src", "tgt")
    assert shape["vocab_size"] == len(Dictionary.load(str(tiny_bin / "dict.tgt.txt")))
    assert shape["src_vocab_size"] == len(Dictionary.load(str(tiny_bin / "dict.src.txt")))
    for lang, key in (("src", "src_len"), ("tgt", "tgt_len")):
        lines = (tiny_raw / f"train.{lang}").read_text().splitlines()
        assert shape[key] == round(statistics.mean(len(line.split()) + 1 for line in lines))  # eos included


@pytest.mark.parametrize("max_tokens", [64, 200, 4096])
def test_the_ce_batches_are_those_fairseq_train_makes(tiny_bin, max_tokens):
    """The CE step's batch and the updates an epoch, against fairseq's own translation task's batch iterator on
    the same training split (shuffled, as fairseq-train's)."""
    from argparse import Namespace

    from fairseq.tasks.translation import TranslationTask

    from smallvocab_tools.bench.does_it_pay import corpus_shape

    task = TranslationTask.setup_task(Namespace(data=str(tiny_bin), source_lang="src", target_lang="tgt",
                                                left_pad_source=True, left_pad_target=False,
                                                max_source_positions=1024, max_target_positions=1024,
                                                load_alignments=False, truncate_source=False,
                                                num_batch_buckets=0, train_subset="train",
                                                dataset_impl=None, required_seq_len_multiple=1,
                                                upsample_primary=-1, eval_bleu=False))
    task.load_dataset("train")
    batches = list(task.get_batch_iterator(task.dataset("train"), max_tokens=max_tokens, seed=1,
                                           required_batch_size_multiple=8).frozen_batches)
    shape = corpus_shape(tiny_bin, "src", "tgt", max_tokens)
    assert shape["epoch_updates"] == len(batches) and shape["max_tokens"] == max_tokens
    assert shape["ce_batch"] == round(sum(map(len, batches)) / len(batches))


def test_the_ce_step_is_said_beside_the_reinforce_step_and_its_ratio_kept():
    from smallvocab_tools.bench.does_it_pay import judged, verdict

    records = _records(1.0, 1.5, 2.0, 3.0) + [
        {"mode": "ce", "softmax": "small", "sec_per_step": 0.8, "peak_mem_mb": 90.0, "speedup": 1.25},
        {"mode": "ce", "softmax": "full", "sec_per_step": 1.0, "peak_mem_mb": 99.0}]
    shape = dict(SHAPE, ce_batch=133, epoch_updates=60, max_tokens=4096)
    text = verdict(records, shape, 500, _args())
    assert ("- a CE step (fairseq-train's batches at --max-tokens 4,096: 133 sentences, 60 an epoch): small "
            "0.800 s, full 1.000 s: 1.25x faster small") in text
    said = judged(records, 500)
    assert said["ce_ratio"] == 1.25 and said["verdict"] == "pays"  # (the verdict is still REINFORCE's)
    assert said["sec_per_step"] == {"ce": {"small": 0.8, "full": 1.0}, "reinforce": {"small": 1.0, "full": 1.5}}
    assert said["ms_per_sentence"] == {"small": 2.0, "full": 3.0}
    assert "a CE step" not in verdict(_records(1.0, 1.5, 2.0, 3.0), SHAPE, 500, _args())


def test_the_model_is_built_from_the_user_s_flags():
    """--model-args on synthetic batches: fairseq's own parse of the flags, restricted as the task restricts it."""
    from fairseq_smallvocab.models.restricted import RestrictedModel
    from smallvocab_tools.bench.workload import build_model, synthetic_task

    cfg = {"threads": 1, "vocab_size": 300, "src_vocab_size": 200, "model_args": TINY_FLAGS, "arch": "transformer"}
    task = synthetic_task(cfg)
    model = build_model(cfg, task)
    assert len(model.encoder.layers) == 1 and len(model.decoder.layers) == 2
    assert model.decoder.embed_tokens.weight.shape == (300, 24)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens  # --share-all-embeddings: one dictionary
    assert model.decoder.layers[0].fc1.out_features == 48
    assert isinstance(model, RestrictedModel)  # restricted: the small softmax's code path
    unshared = dict(cfg, model_args=TINY_FLAGS.replace(" --share-all-embeddings", ""))
    model = build_model(unshared, synthetic_task(unshared))
    assert model.encoder.embed_tokens.weight.shape == (200, 24)


@pytest.mark.parametrize("argv, message", [
    (["--model-args", "--encoder-layers 2"], "name the model's arch"),
    (["-t", "xx"], "dict.xx.txt: not found"),
    # an arch fairseq does not know, and one of a model without an encoder: refused before any worker starts
    (["--model-args", "--arch no_such_arch --encoder-layers 2"],
     "--arch no_such_arch: fairseq knows no such arch (nor does the plugin): give a fairseq encoder-decoder arch, "
     "e.g. transformer, "),
    (["--model-args", "--arch transformer_lm --decoder-layers 2"],
     "--arch transformer_lm builds a TransformerLanguageModel, not an encoder-decoder model"),
])
def test_bad_command_lines_are_refused_by_name(tiny_bin, capsys, argv, message):
    from smallvocab_tools.bench.does_it_pay import parse_args

    base = {"--data": str(tiny_bin), "-s": "src", "-t": "tgt", "--model-args": TINY_FLAGS}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    with pytest.raises(SystemExit) as exit_:
        parse_args([x for pair in base.items() for x in pair])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err
    if "--arch" in message:  # the fix: archs that work, and how to list them all
        assert "lstm_smallvocab" in err and "issubclass(m, E)" in err


@pytest.mark.slow
def test_does_it_pay_measures_both_softmaxes_and_gives_one_verdict(tiny_bin, tmp_path):
    import json

    from fairseq.data import Dictionary

    from smallvocab_tools.bench.does_it_pay import CEILING_K

    vocab = len(Dictionary.load(str(tiny_bin / "dict.tgt.txt")))
    out = run([REPO / "scripts" / "does_it_pay.py", "--data", tiny_bin, "-s", "src", "-t", "tgt",
               "--model-args", TINY_FLAGS, "--k", "20", "--batch", "4", "--decode-batch", "3", "--beam", "2",
               "--steps", "1", "--threads", "1", "--json", tmp_path / "pays.json"]).stdout
    rows = re.findall(r"^\| cpu \| transformer \| (ce|reinforce x4|\d[\d,]*) \| .*$", out, re.M)
    # CE small and full; REINFORCE small, its ceiling (the smallest output layer) and full; decoding's two
    assert sorted(rows).count("ce") == 2 and rows.count("reinforce x4") == 3 and len(rows) == 7, out
    assert len(re.findall(rf"\| {vocab:,} \| small \| 20 \|", out)) == 3  # CE, REINFORCE and decoding rows
    assert len(re.findall(rf"\| {vocab:,} \| small \| {CEILING_K} \|", out)) == 1  # the ceiling: REINFORCE's
    said = json.loads((tmp_path / "pays.json").read_text())
    assert said["verdict"] in out and said["k"] == 20 and said["ceiling"] > 0 and len(said["records"]) == 7
    assert said["ce_ratio"] > 0 and said["epoch_updates"] >= 1 and said["sec_per_step"]["ce"]["full"] > 0
    assert re.search(r"a CE step \(fairseq-train's batches at --max-tokens 4,096: \d+ sentences, \d+ an epoch\)", out)
    assert len(re.findall(r"^Verdict: the small softmax (pays|does not pay|pays little)", out, re.M)) == 1
    assert re.search(r"a REINFORCE step \(4 samples per sentence, 4 sentences\): small [\d.]+ s, full [\d.]+ s", out)
    assert re.search(r"beam 2 decoding \(3 sentences a batch, the predictor included\): small [\d.]+ ms", out)
