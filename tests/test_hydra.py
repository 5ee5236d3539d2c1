"""fairseq's hydra entry point: the three recipes of examples/hydra (the paper's
predictor, CE inside predicted vocabularies, REINFORCE with several samples)
train on tiny data with fairseq-hydra-train and common.user_dir."""

import pytest
import torch
from helpers import REPO, USER_DIR, run

HYDRA = ["fairseq-hydra-train", "--config-dir", REPO / "examples" / "hydra"]


@pytest.mark.slow
def test_hydra_recipes_train_the_predictor_ce_and_reinforce(tiny_bin, tmp_path):
    common = [f"common.user_dir={USER_DIR}", f"task.data={tiny_bin}", "task.source_lang=src", "task.target_lang=tgt",
              "dataset.batch_size=32", "optimization.max_epoch=1"]
    # hydra writes its run folders (outputs/DATE/TIME) under the working directory: the test's own
    out = run([*HYDRA, "--config-name", "vocab_predictor", *common, f"checkpoint.save_dir={tmp_path / 'vp'}",
               "model.embed_dim=32", "criterion.recall_at=50", 'checkpoint.best_checkpoint_metric="recall@50"'],
              cwd=tmp_path)
    assert "recall@50" in out.stdout + out.stderr
    small = [f"task.vocab_predictor={tmp_path / 'vp' / 'checkpoint_best.pt'}", "task.small_vocab_size=50",
             "model.embed_dim=16"]
    run([*HYDRA, "--config-name", "translation_ce", *common, *small, f"checkpoint.save_dir={tmp_path / 'ce'}"],
        cwd=tmp_path)
    ce = torch.load(tmp_path / "ce" / "checkpoint_best.pt", weights_only=False)
    assert ce["cfg"]["task"]["_name"] == "translation_smallvocab" and ce["cfg"]["task"]["small_vocab_size"] == 50
    assert ce["cfg"]["model"]["vocab_predictor"]  # recorded for decoding, as with fairseq-train
    out = run([*HYDRA, "--config-name", "translation_reinforce", *common, *small,
               f"checkpoint.save_dir={tmp_path / 'rl'}", f"checkpoint.finetune_from_model={tmp_path / 'ce'}/"
               "checkpoint_best.pt", "criterion.rl_samples=2", "criterion.rl_baseline=loo",
               "criterion.max_sample_len=20"], cwd=tmp_path)
    log = out.stdout + out.stderr
    assert "reward_std" in log and "greedy_frac" in log and (tmp_path / "rl" / "checkpoint_last.pt").exists()
    rl = torch.load(tmp_path / "rl" / "checkpoint_last.pt", weights_only=False)
    assert rl["cfg"]["criterion"]["rl_samples"] == 2 and rl["cfg"]["optimization"]["lr"] == [0.01]
    missing = run([*HYDRA, "--config-name", "translation_ce", f"common.user_dir={USER_DIR}"], check=False,
                  cwd=tmp_path)
    assert (tmp_path / "outputs").is_dir() and not (REPO / "outputs").exists()
    assert missing.returncode != 0 and "no data folder" in missing.stderr and "task.data=DIR" in missing.stderr


@pytest.mark.slow
def test_fairseq_hydra_train_refuses_a_former_device_option_naming_rl_engine(tiny_bin, tmp_path):
    """As fairseq-hydra-train runs it (its first add_defaults before --user-dir has registered the criterion,
    fairseq-train's main a second one after): the former option is refused by name, not by omegaconf."""
    out = run([*HYDRA, "--config-name", "translation_reinforce", f"common.user_dir={USER_DIR}",
               f"task.data={tiny_bin}", "task.source_lang=src", "task.target_lang=tgt", "task.small_vocab_size=0",
               "model.embed_dim=16", f"checkpoint.save_dir={tmp_path / 'rl'}", "+criterion.rl_capture=off"],
              check=False, cwd=tmp_path)
    assert out.returncode != 0
    assert "criterion.rl_capture was replaced by criterion.rl_engine" in out.stderr, out.stderr[-3000:]
    assert "ConfigKeyError" not in out.stderr
