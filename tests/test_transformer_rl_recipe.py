"""The Transformer-RL recipe (examples/translation/run_transformer_rl_multi30k.sh)
end to end on tiny data: CE, REINFORCE and both controls for the small
vocabulary and the full softmax, every best checkpoint decoded greedily and
with beam 5, the table (scripts/rl_logs.py recipe) whose BLEU is sacrebleu's on
the decodes, the plot; run again, it retrains nothing.  And the log summary's
clock: minutes to the best validation summed over a resumed run's sessions."""

import fcntl
import json

import pytest
from helpers import REPO, TINY_TRANSFORMER, run

from smallvocab_tools.analysis.recipe_runs import DECODES, corpus_bleu
from smallvocab_tools.analysis.train_logs import parse


# the recipe's model at test size (the recipe's default: transformer_multi30k.args, d = 256, 3 + 3 layers)
def test_the_clock_of_a_resumed_run_leaves_its_pause_out(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-11-24 10:00:00 | INFO | fairseq_cli.train | {'checkpoint': {}}",
        "2026-11-24 10:03:00 | INFO | train | epoch 001 | loss 3.0 | num_updates 100",
        "2026-11-24 10:03:30 | INFO | valid | epoch 001 | valid on 'valid' subset | bleu 10.0 | num_updates 100",
        "2026-11-24 10:04:00 | INFO | fairseq.checkpoint_utils | saved checkpoint",  # then killed
        "2026-11-24 11:04:00 | INFO | fairseq_cli.train | {'checkpoint': {}}",  # resumed an hour later
        "2026-11-24 11:07:00 | INFO | train | epoch 002 | loss 2.0 | num_updates 200",
        "2026-11-24 11:08:00 | INFO | valid | epoch 002 | valid on 'valid' subset | bleu 12.5 | num_updates 200",
    ]) + "\n")
    parsed = parse(log)
    assert [v["elapsed"] for v in parsed["valid"]] == [210.0, 240.0 + 240.0]
    assert [t["elapsed"] for t in parsed["train"]] == [180.0, 240.0 + 180.0]


@pytest.mark.slow
@pytest.mark.parametrize("setting,message", [({"CONTROLS": "ce shuffled"}, "unknown control 'shuffled'"),
                                             ({"DEVICE": "gpu"}, "DEVICE=gpu: cpu or cuda")])
def test_a_bad_setting_is_refused_before_any_training(tmp_path, setting, message):
    result = run(["bash", str(REPO / "examples/translation/run_transformer_rl_multi30k.sh")], cwd=tmp_path,
                 check=False, env={**setting, "OUT": str(tmp_path / "runs")})
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [".recipe.lock"]  # no step started


@pytest.mark.slow
@pytest.mark.parametrize("script", ["translation/run_multi30k.sh", "translation/run_reinforce_multi30k.sh",
                                    "translation/run_transformer_multi30k.sh", "vocab_predictor/run_multi30k.sh"])
def test_the_recipes_scripts_refuse_an_unknown_device_before_anything(tmp_path, script):
    """DEVICE=gpu (the choices: cpu, cuda): refused at once, nothing made (anything but cpu used to drop --cpu
    silently)."""
    result = run(["bash", str(REPO / "examples" / script)], cwd=tmp_path, check=False, env={"DEVICE": "gpu"})
    assert result.returncode == 2 and "DEVICE=gpu: cpu or cuda" in result.stderr, result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_second_recipe_on_the_same_out_is_refused(tmp_path):
    """While one recipe works in OUT (it holds OUT/.recipe.lock), a second one started there stops at once,
    saying so, and touches nothing: two would train the same runs into the same checkpoints."""
    out = tmp_path / "runs"
    out.mkdir()
    with open(out / ".recipe.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run(["bash", str(REPO / "examples/translation/run_transformer_rl_multi30k.sh")], cwd=tmp_path,
                     check=False, env={"OUT": str(out)})
    assert result.returncode == 3 and "another run of this recipe is at work there" in result.stderr, result.stderr
    assert [p.name for p in out.iterdir()] == [".recipe.lock"]


@pytest.mark.slow
def test_the_transformer_rl_recipe_runs_end_to_end_on_tiny_data(tiny_bin, predictor, tmp_path):
    cands, out = tmp_path / "cands", tmp_path / "runs"
    run(["scripts/export_candidates.py", "--predictor", predictor, "--splits", "train", "valid", "test",
         "--k", "60", "--out-dir", cands], cwd=REPO)
    env = {"DATA": str(tiny_bin), "CANDS": str(cands), "OUT": str(out), "SEEDS": "1", "KS": "60 0",
           "CE_EPOCHS": "1", "RL_EPOCHS": "1", "VALIDATE": "2", "SRC": "src", "TGT": "tgt", "THREADS": "1",
           "ARCH_ARGS": TINY_TRANSFORMER}
    run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, env=env)
    names = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert names == [f"{stage}-k{k}-s1" for stage in ("ce", "ctl-ce", "ctl-constant", "rl") for k in (0, 60)]
    for name in names:  # REINFORCE and both controls: the recipe's tuned optimizer, the same for all three
        if not name.startswith("ce-"):
            log = (out / name / "train.log").read_text()
            assert "'optimizer': {'_name': 'adam'" in log and "'lr': [3e-05]" in log, name
    for name in names:
        for split in ("valid", "test"):
            for tag in ("", ".beam5"):
                assert (out / name / f"hyp-{split}{tag}.txt").read_text().count("\n") == (40 if split == "valid"
                                                                                          else 30)
    table = (out / "table.md").read_text()
    refs = tiny_bin / "raw"
    for name, row_start in (("rl-k60-s1", "| small (K = 60) | REINFORCE | 1 |"),
                            ("ctl-constant-k0-s1", "| full | control: constant reward | 1 |")):
        bleus = [corpus_bleu(out / name / f"hyp-{split}{tag}.txt", refs / f"{split}.tgt")
                 for split, tag in DECODES]
        row = next(line for line in table.splitlines() if line.startswith(row_start))
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert cells[3:7] == [f"{b:.2f}" for b in bleus]
        assert cells[9] != "-" and cells[10] != "-"  # minutes per epoch, to the best
    ce, rl = ([corpus_bleu(out / name / f"hyp-{split}{tag}.txt", refs / f"{split}.tgt")
               for split, tag in DECODES] for name in ("ce-k60-s1", "rl-k60-s1"))
    assert "| small: REINFORCE - its CE checkpoint | +0.7 | 1 | " + "".join(  # the comparisons under the table
        f"{b - a:+.2f} | " for a, b in zip(ce, rl)) in table
    runs = json.loads((out / "runs.json").read_text())
    assert len(runs) == 8 and all(r["min_per_epoch"] > 0 and r["min_to_best"] > 0 for r in runs)
    assert all(r["curve"] and r["best_dev"] == max(b for _, b in r["curve"]) for r in runs)
    rl_log = (out / "rl-k60-s1" / "train.log").read_text()
    assert "'rl_samples': 4" in rl_log and "'rl_baseline': loo" in rl_log and "encoder_layers=1" in rl_log
    # the best checkpoint is the best validation's: saved at each one, not only at the epoch's end
    valid = parse(out / "rl-k60-s1" / "train.log")["valid"]
    best = [v for v in valid if v["bleu"] == max(v["bleu"] for v in valid)][-1]  # fairseq: a tie is a new best
    import torch

    kept = torch.load(out / "rl-k60-s1" / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    assert kept["optimizer_history"][-1]["num_updates"] == best["num_updates"]
    assert "'validate_interval_updates': 2" in rl_log and "'ce_weight': 1.0" in (
        out / "ctl-ce-k60-s1" / "train.log").read_text()
    constant = (out / "ctl-constant-k0-s1" / "train.log").read_text()
    assert "'reward': 'constant'" in constant and "'rl_baseline': none" in constant  # loo would cancel its reward
    assert "rl_loss 0 |" not in constant and "rl_loss 0 |" not in rl_log
    assert (out / "dev_bleu.png").stat().st_size > 1000
    logs = {name: (out / name / "train.log").read_text() for name in names}
    decoded = (out / "rl-k60-s1" / "hyp-test.beam5.txt").stat().st_mtime_ns
    again = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, env=env)
    assert {name: (out / name / "train.log").read_text() for name in names} == logs  # nothing retrained
    assert "| small (K = 60) | CE (best checkpoint) | 1 |" in again.stdout
    # another length penalty: nothing retrained, and every beam decode it asks for is made again under it
    record, beam5 = out / "rl-k60-s1" / "hyp.beam5.settings", out / "rl-k60-s1" / "hyp-test.beam5.txt"
    assert record.read_text().startswith("lenpen=dev lenpens=0.6,") and beam5.stat().st_mtime_ns == decoded
    run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO,
        env={**env, "KS": "60", "CONTROLS": "", "LENPEN": "1"})
    assert record.read_text() == "lenpen=1\n" and (out / "ce-k60-s1" / "hyp.beam5.settings").read_text() == "lenpen=1\n"
    assert beam5.stat().st_mtime_ns != decoded
    assert (out / "ctl-ce-k60-s1" / "hyp.beam5.settings").read_text().startswith("lenpen=dev")  # not asked for
    assert {name: (out / name / "train.log").read_text() for name in names} == logs
    run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, env={**env, "CE_FROM": str(out)})
    assert not (out / "ce-k60-s1").is_symlink()  # CE_FROM = OUT: its own CE runs, used as they are
    # another setting for finished runs: refused before any training, nothing touched
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "LR": "1e-4"})
    assert refused.returncode == 2, refused.stderr
    assert f"{out}/rl-k60-s1 was trained with: epochs=1 OPTIMIZER=adam LR=3e-5 " in refused.stderr
    assert "now asked for: epochs=1 OPTIMIZER=adam LR=1e-4 " in refused.stderr and "Move it away" in refused.stderr
    assert {name: (out / name / "train.log").read_text() for name in names} == logs
    # a run folder without its recipe.settings (as one trained by hand): its settings cannot be checked
    settings = out / "ctl-constant-k0-s1" / "recipe.settings"
    recorded = settings.read_text()
    settings.unlink()
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False, env=env)
    assert refused.returncode == 2, refused.stderr
    assert f"{out}/ctl-constant-k0-s1 has a train.log but no recipe.settings" in refused.stderr
    settings.write_text(recorded)
    # what the runs read: another validation interval is refused for REINFORCE (it picks the best), not for CE
    assert (out / "ce-k60-s1" / "recipe.inputs").read_text() == f"DATA={tiny_bin.resolve()} CANDS={cands.resolve()}\n"
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "VALIDATE": "3"})
    assert refused.returncode == 2 and f"{out}/rl-k60-s1 was trained on: DATA={tiny_bin.resolve()} " in refused.stderr
    assert "VALIDATE=2; now asked for: " in refused.stderr and "VALIDATE=3" in refused.stderr
    assert "ce-k60-s1 was" not in refused.stderr
    (out / "rl-k60-s1" / "hyp-test.txt").unlink()  # as if stopped before its decodes: it would go on under 1e-4
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "LR": "1e-4"})
    assert refused.returncode == 2 and f"{out}/rl-k60-s1 was trained with: epochs=1 OPTIMIZER=adam LR=3e-5 " in (
        refused.stderr)
    # more epochs: the small REINFORCE run resumes for a second epoch and is decoded again; CE and the rest stay
    run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO,
        env={**env, "KS": "60", "RL_EPOCHS": "2", "CONTROLS": ""})
    extended = (out / "rl-k60-s1" / "train.log").read_text()
    assert extended.startswith(logs["rl-k60-s1"]) and "| valid | epoch 002 |" in extended
    assert "| valid | epoch 002 |" not in logs["rl-k60-s1"]
    assert (out / "rl-k60-s1" / "recipe.settings").read_text().startswith("epochs=2 OPTIMIZER=adam ")
    for split, tag in DECODES:
        assert (out / "rl-k60-s1" / f"hyp-{split}{tag}.txt").read_text().count("\n") == (40 if split == "valid"
                                                                                            else 30)
    assert all((out / name / "train.log").read_text() == logs[name] for name in names if name != "rl-k60-s1")
    # tuning: another OUT starts from these CE runs (linked, not retrained) and trains only the new setting
    tune = tmp_path / "tune"
    tuned = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO,
                env={**env, "OUT": str(tune), "CE_FROM": str(out), "KS": "60", "LAMBDA": "0.5", "LS": "0.1",
                     "CONTROLS": "", "BEAMS": "1"})
    assert sorted(p.name for p in tune.iterdir() if p.is_dir()) == ["ce-k60-s1", "rl-k60-s1"]
    assert (tune / "ce-k60-s1").is_symlink() and (tune / "ce-k60-s1").resolve() == (out / "ce-k60-s1").resolve()
    assert (out / "ce-k60-s1" / "train.log").read_text() == logs["ce-k60-s1"]
    tuned_log = (tune / "rl-k60-s1" / "train.log").read_text()
    assert "'ce_weight': 0.5" in tuned_log and str(tune / "ce-k60-s1" / "checkpoint_best.pt") in tuned_log
    # the CE term's label smoothing: passed on, and recorded only where it is not 0 (as runs before LS had it)
    assert "'label_smoothing': 0.1" in tuned_log and "'label_smoothing': 0.0" in logs["rl-k60-s1"]
    assert " TEMP=1.0 LS=0.1 CE_EPOCHS=1 " in (tune / "rl-k60-s1" / "recipe.settings").read_text()
    assert " TEMP=1.0 CE_EPOCHS=1 " in (out / "rl-k60-s1" / "recipe.settings").read_text()
    assert "| small (K = 60) | CE (best checkpoint) | 1 |" in tuned.stdout
    assert not (tune / "rl-k60-s1" / "hyp-test.beam5.txt").exists()
    # a CE_FROM without that finished CE run: refused before anything is trained
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "OUT": str(tmp_path / "tune2"), "CE_FROM": str(tune), "KS": "60 0"})
    assert refused.returncode == 2 and f"CE_FROM: {tune}/ce-k0-s1: not finished." in refused.stderr
    assert not (tmp_path / "tune2" / "rl-k60-s1").exists()
    # REINFORCE's spread over seeds from one CE model: seed 2's CE run is a link to seed 1's (here CE_FROM's)
    spread = tmp_path / "spread"
    run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO,
        env={**env, "OUT": str(spread), "CE_FROM": str(out), "CE_SEED": "1", "SEEDS": "2", "KS": "60",
             "CONTROLS": "", "BEAMS": "1"})
    assert sorted(p.name for p in spread.iterdir() if p.is_dir()) == ["ce-k60-s1", "ce-k60-s2", "rl-k60-s2"]
    assert (spread / "ce-k60-s2").is_symlink() and (spread / "ce-k60-s2").resolve() == (out / "ce-k60-s1").resolve()
    seed2 = (spread / "rl-k60-s2" / "train.log").read_text()
    assert "'seed': 2" in seed2 and str(spread / "ce-k60-s2" / "checkpoint_best.pt") in seed2
    assert " CE_SEED=1 CE_EPOCHS=1 " in (spread / "rl-k60-s2" / "recipe.settings").read_text()
    assert "CE_SEED" not in (out / "rl-k60-s1" / "recipe.settings").read_text()
    # seed 2 with its own CE run already there: refused before anything is trained
    own = tmp_path / "own"
    (own / "ce-k60-s2").mkdir(parents=True)
    refused = run(["bash", "examples/translation/run_transformer_rl_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "OUT": str(own), "CE_FROM": str(out), "CE_SEED": "1", "SEEDS": "1 2", "KS": "60"})
    assert refused.returncode == 2, refused.stderr
    assert f"CE_SEED: {own}/ce-k60-s2 exists, and is not a link to {own}/ce-k60-s1" in refused.stderr
    assert sorted(p.name for p in own.iterdir()) == [".recipe.lock", "ce-k60-s2"]
