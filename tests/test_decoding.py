"""fairseq-generate / fairseq-interactive inside the predicted vocabulary."""

import re
import shutil

import pytest
from helpers import USER_DIR, VP_TRAIN, run

TRAIN = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--embed-dim",
         "16", "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "0.01", "--batch-size", "32",
         "--max-epoch", "3", "--cpu", "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints"]
DECODE = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--cpu", "--batch-size", "16",
          "--max-len-b", "30"]


@pytest.fixture(scope="module")
def small_model(predictor, tiny_bin, tmp_path_factory):
    """A model trained with --vocab-predictor (K = 60); the predictor's path is
    recorded in its checkpoint."""
    save = tmp_path_factory.mktemp("mt")
    run(["fairseq-train", tiny_bin, *TRAIN, "--vocab-predictor", predictor, "--candidates-dir", save / "cands",
         "--small-vocab-size", "60", "--save-dir", save])
    return save / "checkpoint_last.pt"


def _hypotheses(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}


@pytest.mark.slow
def test_generate_finds_the_predictor_in_the_checkpoint_and_k_is_a_decoding_option(small_model, tiny_bin,
                                                                                   predictor, tmp_path):
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--small-vocab-size", "40",
               "--candidates-dir", tmp_path, "--vocab-predictor", predictor, "--beam", "3"])
    hyps = _hypotheses(out.stdout)
    assert len(hyps) == 30 and (tmp_path / "test.k40.npy").exists()  # predicted with K = 40, not 60
    # without --vocab-predictor: the one recorded at training time, its cache beside it
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--small-vocab-size", "40",
               "--beam", "3"])
    assert _hypotheses(out.stdout) == hyps
    assert (predictor.parent / "candidates" / "test.k40.npy").exists()
    # without --small-vocab-size: the K it was trained with (60; the paper's rule would say 500, which is more
    # than this |V| and so the full softmax)
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--beam", "3"])
    assert "K = 60, the K the checkpoint was trained with" in out.stderr
    assert re.search(r"candidates for test: K = 60 of", out.stderr), out.stderr[-2000:]


@pytest.mark.slow
def test_a_moved_predictor_is_named_and_given_by_its_new_path(predictor, tiny_bin, tmp_path):
    """A checkpoint names its predictor by its absolute path at training time: moved (another folder or machine),
    decoding says so and how to give it; given by its new path, it decodes as before, its cache beside it."""
    old, new = tmp_path / "vp", tmp_path / "moved" / "vp"
    old.mkdir()
    shutil.copy(predictor, old / "checkpoint.pt")
    run(["fairseq-train", tiny_bin, *TRAIN, "--max-epoch", "1", "--vocab-predictor", old / "checkpoint.pt",
         "--small-vocab-size", "60", "--save-dir", tmp_path / "mt"])
    ckpt = tmp_path / "mt" / "checkpoint_last.pt"
    decode = ["fairseq-generate", tiny_bin, *DECODE, "--path", ckpt, "--beam", "2", "--small-vocab-size", "60"]
    before = _hypotheses(run(decode).stdout)
    new.parent.mkdir()
    old.rename(new)
    out = run(decode, check=False)
    assert out.returncode != 0
    assert f"the predictor recorded in the checkpoint, {old / 'checkpoint.pt'}, not found" in out.stderr
    assert "by the absolute path it had when it was trained" in out.stderr
    out = run([*decode, "--vocab-predictor", new / "checkpoint.pt"])
    assert _hypotheses(out.stdout) == before and len(before) == 30
    assert (new / "candidates" / "test.k60.npy").exists()  # the moved cache, found where the predictor is


@pytest.mark.slow
def test_full_softmax_checkpoint_decodes_inside_predicted_candidates(tiny_bin, predictor, tmp_path):
    run(["fairseq-train", tiny_bin, *TRAIN, "--small-vocab-size", "0", "--save-dir", tmp_path / "full"])
    ckpt = tmp_path / "full" / "checkpoint_last.pt"
    full = _hypotheses(run(["fairseq-generate", tiny_bin, *DECODE, "--path", ckpt, "--small-vocab-size", "0",
                            "--beam", "1"]).stdout)
    small = _hypotheses(run(["fairseq-generate", tiny_bin, *DECODE, "--path", ckpt, "--small-vocab-size", "8",
                             "--vocab-predictor", predictor, "--candidates-dir", tmp_path / "c",
                             "--beam", "1"]).stdout)
    assert len(full) == len(small) == 30 and full != small  # K = 8 (4 words) restricts the output
    import numpy as np
    from fairseq.data import Dictionary

    d = Dictionary.load(str(tiny_bin / "dict.tgt.txt"))
    rows = np.load(tmp_path / "c" / "test.k8.npy")
    for i, hyp in small.items():
        allowed = {d[j] for j in rows[i]} | {"<unk>"}
        assert set(hyp.split()) <= allowed


@pytest.mark.slow
def test_interactive_decodes_raw_text_and_empty_lines(small_model, tiny_bin, tiny_raw):
    """Inside K = 60 of the 304 target words (the default K, 500, would be the full softmax here, where any
    candidates decode alike): each line's candidates are predicted as fairseq-generate's cached lists are, and
    reach the generator (fairseq-interactive hands it only src_tokens and src_lengths of its batches)."""
    lines = (tiny_raw / "test.src").read_text().splitlines()[:3]
    stdin = "\n".join([lines[0], "", lines[1], lines[2]]) + "\n"
    # without --small-vocab-size: the K the model was trained with, 60
    out = run(["fairseq-interactive", tiny_bin, *DECODE, "--path", small_model, "--beam", "2",
               "--buffer-size", "4", "--batch-size", "4"], stdin=stdin)
    assert "K = 60, the K the checkpoint was trained with" in out.stderr
    hyps = _hypotheses(out.stdout)
    assert sorted(hyps) == [0, 1, 2, 3] and hyps[1] == "" and all(hyps[i] for i in (0, 2, 3))
    gen = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--beam", "2",
               "--small-vocab-size", "60", "--batch-size", "1"])
    assert "using the full softmax" not in out.stderr + gen.stderr
    generated = _hypotheses(gen.stdout)
    # the same candidates and decode as fairseq-generate's
    assert [hyps[0], hyps[2], hyps[3]] == [generated[0], generated[1], generated[2]]


@pytest.mark.slow
def test_interactive_cuts_a_line_longer_than_the_source_positions_and_goes_on(small_model, tiny_bin, tiny_raw):
    """A line longer than the source positions once ended the whole fairseq-interactive session (fairseq refuses
    the batch): it is cut to the positions it fits, said in the log, and the lines after it are translated."""
    lines = (tiny_raw / "test.src").read_text().splitlines()[:2]
    long = " ".join([lines[0]] * 6)
    stdin = "\n".join([lines[0], long, lines[1]]) + "\n"
    out = run(["fairseq-interactive", tiny_bin, *DECODE, "--path", small_model, "--max-source-positions", "16",
               "--buffer-size", "3", "--batch-size", "3"], stdin=stdin)
    hyps = _hypotheses(out.stdout)
    assert sorted(hyps) == [0, 1, 2] and all(hyps.values()), out.stdout + out.stderr[-2000:]
    assert f"an input line of {len(long.split())} tokens" in out.stderr
    assert "is longer than the model's 16 source positions: translating its first 15 tokens" in out.stderr


@pytest.mark.slow
def test_interactive_input_that_is_not_utf8_is_named(small_model, tiny_bin, tiny_raw, tmp_path):
    lines = (tiny_raw / "test.src").read_text().splitlines()[:2]
    text = tmp_path / "input.txt"
    text.write_bytes(("\n".join(lines) + "\n").encode() + b"caf\xe9 au lait\n")  # Latin-1, not UTF-8
    out = run(["fairseq-interactive", tiny_bin, *DECODE, "--path", small_model, "--source-lang", "src",
               "--target-lang", "tgt", "--input", text, "--buffer-size", "1", "--batch-size", "1"], check=False)
    assert out.returncode != 0
    assert f"fairseq-interactive: {text} is not UTF-8 text (byte b'\\xe9'" in out.stderr, out.stderr[-2000:]
    assert "iconv" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_predictor_with_another_dictionary_is_refused(small_model, tiny_bin, tiny_raw, tmp_path):
    from smallvocab_tools.data.prep import prepare

    other = tmp_path / "other"
    prepare(tiny_raw, other, "src", "tgt", {"train": "train", "valid": "valid", "test": "test"}, min_count=2,
            log=lambda m: None)  # a smaller target dictionary
    run(["fairseq-train", other, *VP_TRAIN, "--save-dir", tmp_path / "vp"])
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model,
               "--vocab-predictor", tmp_path / "vp" / "checkpoint_last.pt", "--candidates-dir", tmp_path / "c",
               "--small-vocab-size", "40"],
              check=False)
    assert out.returncode != 0 and "target dictionaries differ" in out.stderr
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())  # nothing half-written


@pytest.mark.slow
def test_a_target_dictionary_in_another_order_is_refused(small_model, tiny_bin, tmp_path):
    """Same size, two words swapped: stock fairseq decodes garbage without a word; the model's recorded
    fingerprint refuses it, with the full softmax (no candidate lists involved) too."""
    other = tmp_path / "other"
    shutil.copytree(tiny_bin, other)
    lines = (other / "dict.tgt.txt").read_text().splitlines(keepends=True)
    lines[5], lines[6] = lines[6], lines[5]
    (other / "dict.tgt.txt").write_text("".join(lines))
    for k in ("0", "40"):
        out = run(["fairseq-generate", other, *DECODE, "--path", small_model, "--small-vocab-size", k], check=False)
        assert out.returncode != 0, out.stdout[-2000:]
        assert f"the model was trained with another target dictionary than {other / 'dict.tgt.txt'}" in out.stderr
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--small-vocab-size", "0"])
    assert "H-0" in out.stdout  # its own folder decodes


@pytest.mark.slow
def test_a_predictor_given_as_path_is_named(predictor, tiny_bin):
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", predictor, "--small-vocab-size", "0"], check=False)
    assert out.returncode != 0
    assert "a vocabulary predictor (arch vocab_predictor) was given where a translation or captioning model" \
        in out.stderr and "Give it to --vocab-predictor" in out.stderr
    assert "uses_features" not in out.stderr


@pytest.mark.slow
def test_decoding_limits_that_allow_no_token_are_refused(small_model, tiny_bin):
    out = run(["fairseq-generate", tiny_bin, *DECODE[:-2], "--path", small_model, "--max-len-a", "0",
               "--max-len-b", "0"], check=False)
    assert out.returncode != 0 and "leaves no room for a single output token" in out.stderr
    assert "--max-len-b N" in out.stderr and "AssertionError" not in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--beam", "0"], "--beam must be >= 1 (hypotheses kept per input; 1: greedy), got 0"),
    (["--beam", "40"], "--beam 40 is not below the small vocabulary of each input (K = 40"),
    (["--sampling", "--beam", "1", "--temperature", "1e-45"], "--temperature must be a finite number >= 0.001, "
                                                               "got 1e-45")])
def test_a_beam_or_temperature_that_cannot_decode_is_refused_naming_the_flag(small_model, tiny_bin, flags, message):
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--small-vocab-size", "40", *flags],
              check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr[-2000:]
    assert "IndexError" not in out.stderr and "AssertionError" not in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--constraints", "--print-alignment"])
def test_generator_options_the_candidates_cannot_serve_are_refused_at_start(small_model, tiny_bin, predictor,
                                                                                 tmp_path, flag):
    out = run(["fairseq-generate", tiny_bin, *DECODE, "--path", small_model, "--small-vocab-size", "40",
               "--candidates-dir", tmp_path, "--vocab-predictor", predictor, flag], check=False)
    assert out.returncode != 0 and flag in out.stderr and "--small-vocab-size 0" in out.stderr
    assert "H-" not in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--fp16", "--bf16"])
@pytest.mark.parametrize("task", ["translation_smallvocab", "vocab_prediction"])
def test_half_precision_training_that_fairseq_cannot_run_is_refused_early(tiny_bin, tmp_path, flag, task):
    import importlib.util

    import torch

    if (flag == "--fp16" and torch.cuda.is_available()) or (flag == "--bf16" and importlib.util.find_spec("torch_xla")):
        pytest.skip(f"{flag} can train here")
    args = [*TRAIN, "--small-vocab-size", "0"] if task == "translation_smallvocab" else VP_TRAIN
    out = run(["fairseq-train", tiny_bin, *args, "--save-dir", tmp_path, flag], check=False)
    assert out.returncode != 0
    want = "needs a CUDA GPU" if flag == "--fp16" else "takes --bf16 for a TPU run"
    assert f"training with {flag}" in out.stderr and want in out.stderr and "Drop the flag" in out.stderr
    assert "Torch not compiled with CUDA" not in out.stderr and "xla_device" not in out.stderr
    assert not list(tmp_path.iterdir())
