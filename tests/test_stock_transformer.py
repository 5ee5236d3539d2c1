"""A user's stock fairseq transformer, end to end: trained with stock
``--task translation``, fine-tuned inside predicted vocabularies (CE, with
validation BLEU), then REINFORCE, interrupted and resumed (the baseline's
state restored), decoded with fairseq-generate inside the predicted
vocabulary, and the same checkpoint decoded by stock ``--task translation``."""

import re

import pytest
import torch
from helpers import USER_DIR, run

ARCH = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed"]
COMMON = ["--batch-size", "32", "--cpu", "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
          "--no-epoch-checkpoints", "--log-interval", "1"]


def _hyps(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}


def _load(path):
    """A fairseq checkpoint, loaded as the plugin loads them (its globals allow-listed for weights_only)."""
    from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals

    with allowed_globals():
        return torch.load(path, weights_only=True)


def _keys(path):
    return sorted(_load(path)["model"])


@pytest.mark.slow
def test_stock_transformer_checkpoint_fine_tuned_with_reinforce_and_decoded(predictor, tiny_bin, tiny_raw, tmp_path):
    stock = tmp_path / "stock"
    run(["fairseq-train", tiny_bin, "--task", "translation", *ARCH, *COMMON, "--criterion",
         "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.005",
         "--max-epoch", "3", "--save-dir", stock])  # stock fairseq: no --user-dir
    plugin = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--vocab-predictor", predictor,
              "--candidates-dir", tmp_path / "cands", "--small-vocab-size", "50", *ARCH, *COMMON]

    ce = tmp_path / "ce"  # the stock checkpoint loads strictly (fairseq's default) into the restricted model
    out = run(["fairseq-train", tiny_bin, *plugin, "--criterion", "label_smoothed_cross_entropy",
               "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.002", "--max-epoch", "1",
               "--finetune-from-model", stock / "checkpoint_last.pt", "--save-dir", ce, "--eval-bleu",
               "--eval-bleu-args", '{"beam": 2, "max_len_b": 20}', "--best-checkpoint-metric", "bleu",
               "--maximize-best-checkpoint-metric"])
    log = out.stdout + out.stderr
    valid = re.search(r"valid \| epoch 001 .*", log)
    assert valid and re.search(r"\| bleu [\d.]+", valid[0]), log[-3000:]
    outside = re.search(r"gold_outside_cands ([\d.]+)", valid[0])
    assert outside
    # said when valid loads: K, |V| and the share of its reference words outside the candidates, which is what
    # validation measures; the warning about that share comes with it where it is high
    fit = re.search(r"candidates for valid: K = 50 of \|V\| = (\d+) target entries \([\d.]+%\); ([\d.]+)% of the "
                    r"reference words of its 40 sentences are outside", log)
    assert fit and int(fit.group(1)) == len((tiny_bin / "dict.tgt.txt").read_text().splitlines()) + 4, log[-3000:]
    assert float(fit.group(2)) == pytest.approx(float(outside.group(1)), abs=0.006)
    assert ("of the reference words of valid are outside their K = 50 candidates" in log) == (
        float(fit.group(2)) >= 5.0)

    rl = tmp_path / "rl"
    reinforce = ["fairseq-train", tiny_bin, *plugin, "--criterion", "smallvocab_reinforce", "--optimizer", "sgd",
                 "--lr", "0.01", "--max-sample-len", "20", "--save-dir", rl]
    out = run([*reinforce, "--max-epoch", "1", "--finetune-from-model", ce / "checkpoint_last.pt"])
    assert re.search(r"train \| epoch 001 .*reward [\d.]+ .*baseline_mse", out.stdout + out.stderr)
    state = _load(rl / "checkpoint_last.pt")["extra_state"]["TranslationSmallVocabTask"]
    assert state["reinforce_gleu.baseline"]["weight"].shape == (16,)  # d of the transformer's decoder states
    out = run([*reinforce, "--max-epoch", "2"])  # interrupted after epoch 1, resumed
    log = out.stdout + out.stderr
    assert "restored reinforce_gleu.baseline from the checkpoint" in log and "epoch 002" in log
    assert _keys(rl / "checkpoint_last.pt") == _keys(stock / "checkpoint_last.pt")  # stock keys, stock arch

    ckpt = rl / "checkpoint_last.pt"
    gen = ["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--path", ckpt, "--gen-subset", "test",
           "--beam", "3", "--max-len-b", "20", "--batch-size", "16", "--cpu"]
    small = run([*gen, "--task", "translation_smallvocab", "--small-vocab-size", "50"])  # predictor from the ckpt
    assert "candidates for test" in small.stderr
    full = run([*gen, "--task", "translation_smallvocab", "--small-vocab-size", "0"])
    plain = run([*gen, "--task", "translation"])  # stock task: the plugin only loads the checkpoint
    hyps_small, hyps_full, hyps_plain = _hyps(small.stdout), _hyps(full.stdout), _hyps(plain.stdout)
    assert len(hyps_small) == len(hyps_full) == 30 and len(hyps_plain) >= 20  # stock skips empty sources
    # the restricted model with candidates=None is the stock model
    assert {i: h for i, h in hyps_full.items() if i in hyps_plain} == hyps_plain
    for out in (small, plain):
        assert re.search(r"BLEU4? = [\d.]+", out.stdout + out.stderr)
    lines = (tiny_raw / "test.src").read_text().splitlines()[:2]  # raw text, candidates predicted per line
    interactive = run(["fairseq-interactive", tiny_bin, "--user-dir", USER_DIR, "--path", ckpt, "--task",
                       "translation_smallvocab", "--small-vocab-size", "50", "--beam", "3", "--max-len-b", "20",
                       "--cpu", "--batch-size", "2", "--buffer-size", "2"], stdin="\n".join(lines) + "\n")
    assert len(_hyps(interactive.stdout)) == 2
