"""The equal-wall-clock recipe (examples/translation/run_rl_budget_multi30k.sh) end to end on tiny data: the
converged start (annealed, averaged), the interleaved probe, each arm trained for the updates its probed pace
buys in the budget and validated at equal spacing, every run decoded, the report (each arm against the control,
per seed and pooled); run again, it trains nothing; a bad arm is refused before anything."""

import json
import re

import pytest
from helpers import REPO, TINY_TRANSFORMER, run

from smallvocab_tools.analysis.budget_report import settings
from smallvocab_tools.analysis.recipe_runs import corpus_scores
from smallvocab_tools.analysis.train_logs import parse


@pytest.mark.slow
def test_a_bad_arm_is_refused_before_anything(tmp_path):
    result = run(["bash", str(REPO / "examples/translation/run_rl_budget_multi30k.sh")], cwd=tmp_path, check=False,
                 env={"OUT": str(tmp_path / "runs"), "ARMS": "ce-k500 mrt16-k500"})
    assert result.returncode == 2 and "ARMS: 'mrt16-k500' is no arm" in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("setting, said", [
    ({"BUDGET": "1e300"}, "BUDGET=1e300: 1e300 is not a budget: give seconds above 0 and at most 4,838,400"),
    ({"BUDGET": "an hour"}, "BUDGET=an hour: 'an hour' is not a number of seconds"),
    ({"POINTS": "0"}, "POINTS=0: a whole number above 0"),
    ({"PROBE_UPDATES": "2"}, "PROBE_UPDATES=2: more than 2"),
    ({"CONTROL": "ce-k50"}, "CONTROL=ce-k50 is not in ARMS (ce-k500 rf4-k500) nor among the runs of"),
])
def test_bad_settings_are_refused_before_anything(tmp_path, setting, said):
    result = run(["bash", str(REPO / "examples/translation/run_rl_budget_multi30k.sh")], cwd=REPO, check=False,
                 env={"OUT": str(tmp_path / "runs"), "ARMS": "ce-k500 rf4-k500", **setting})
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_budget_other_than_the_folder_s_runs_is_refused_before_anything(tmp_path):
    """The report compares arms of one budget: a run of another in OUT is refused before the start is trained."""
    run_folder = tmp_path / "runs" / "ce-k500-s1"
    run_folder.mkdir(parents=True)
    (run_folder / "recipe.settings").write_text("updates=60 budget=60 seconds_per_update=1.0 LR=3e-5 flags=x\n")
    result = run(["bash", str(REPO / "examples/translation/run_rl_budget_multi30k.sh")], cwd=REPO, check=False,
                 env={"OUT": str(tmp_path / "runs"), "BUDGET": "3600"})
    assert result.returncode == 2 and "holds runs of BUDGET=60" in result.stderr and "set BUDGET=60, or OUT to " \
        "another folder" in result.stderr, result.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["ce-k500-s1"]
    same = run(["bash", str(REPO / "examples/translation/run_rl_budget_multi30k.sh")], cwd=REPO, check=False,
               env={"OUT": str(tmp_path / "runs"), "BUDGET": "60.0", "DATA": str(tmp_path / "no-data")})
    assert "holds runs of" not in same.stderr  # the same number of seconds (it stops later: no data here)


@pytest.mark.slow
def test_the_budget_recipe_runs_end_to_end_on_tiny_data(tiny_bin, predictor, tmp_path):
    cands, out = tmp_path / "cands", tmp_path / "runs"
    run(["scripts/export_candidates.py", "--predictor", predictor, "--splits", "train", "valid", "test",
         "--k", "60", "--out-dir", cands], cwd=REPO)
    env = {"DATA": str(tiny_bin), "CANDS": str(cands), "OUT": str(out), "SEEDS": "1 2",
           "ARMS": "ce-k60 risk3-k60 rf2-k0", "CONTROL": "ce-k60", "CE_EPOCHS": "2", "AVERAGE": "2",
           "BUDGET": "2", "POINTS": "2", "PROBE_UPDATES": "3", "BATCH": "16", "SRC": "src", "TGT": "tgt",
           "THREADS": "1", "PARALLEL": "2", "ARCH_ARGS": TINY_TRANSFORMER}
    run(["bash", "examples/translation/run_rl_budget_multi30k.sh"], cwd=REPO, env=env)
    ce_log = (out / "ce" / "train.log").read_text()
    assert "'lr_scheduler': {'_name': 'polynomial_decay'" in ce_log and (out / "ce" / "checkpoint_avg.pt").is_file()
    speed = json.loads((out / "speed.json").read_text())
    assert set(speed["arms"]) == {"ce-k60", "risk3-k60", "rf2-k0"} and speed["rounds"] == 2
    for arm in speed["arms"]:
        for seed in (1, 2):
            save = out / f"{arm}-s{seed}"
            recorded = settings(save / "recipe.settings")
            pace = speed["arms"][arm]["seconds_per_update"]
            assert int(recorded["updates"]) == max(1, int(2 // pace)) and float(recorded["seconds_per_update"]) == pace
            log = parse(save / "train.log")
            assert log["train"][-1]["num_updates"] == int(recorded["updates"])
            start = str(out / "ce" / "checkpoint_avg.pt")
            assert f"'finetune_from_model': '{start}'" in (save / "train.log").read_text()
            for split, lines in (("valid", 40), ("test", 30)):
                for tag in ("", ".beam5"):
                    assert (save / f"hyp-{split}{tag}.txt").read_text().count("\n") == lines
    risk_log = (out / "risk3-k60-s1" / "train.log").read_text()
    assert "'rl_objective': risk" in risk_log and re.search(r"\| risk [\d.]+ \| distinct ", risk_log)
    assert "'small_vocab_size': 0" in (out / "rf2-k0-s1" / "train.log").read_text()
    for k in (60, 0):  # the start, decoded as each softmax's arms decode
        assert (out / f"start-k{k}" / "hyp-test.beam5.txt").read_text().count("\n") == 30
    table = (out / "table.md").read_text()
    bleu, _ = corpus_scores(out / "risk3-k60-s2" / "hyp-test.beam5.txt", tiny_bin / "raw" / "test.tgt")
    row = next(line for line in table.splitlines() if line.startswith("| risk3-k60 | 60 | 2 |"))
    assert f"| {bleu:.2f} |" in row
    for arm in ("risk3-k60", "rf2-k0"):
        for seeds in ("1", "2", "pooled"):
            assert re.search(rf"^\| {arm} \| ce-k60 \| {seeds} \| [\d.]+ \| [\d.]+ \| [-+][\d.]+ \(0\.\d+\) \|", table,
                             re.M), (arm, seeds, table)
    assert (out / "dev_bleu_seconds.png").stat().st_size > 0
    runs = json.loads((out / "runs.json").read_text())["runs"]
    # the start, then POINTS = 2 validations, or one where the pace bought a single update (a busy machine)
    for r in (r for r in runs if r["arm"] == "risk3-k60"):
        updates = int(settings(out / f"risk3-k60-s{r['seed']}" / "recipe.settings")["updates"])
        assert len(r["curve"]) == 1 + min(2, updates) and r["curve"][0][0] == 0, (updates, r["curve"])
    again = run(["bash", "examples/translation/run_rl_budget_multi30k.sh"], cwd=REPO, env=env)
    assert "fairseq_cli.train" not in again.stdout + again.stderr
    # an arm added later: probed beside the recorded ones, which keep their pace (their runs stay as they are)
    run(["bash", "examples/translation/run_rl_budget_multi30k.sh"], cwd=REPO, env={**env, "ARMS": "rf2-k60",
                                                                                   "SEEDS": "1"})
    extended = json.loads((out / "speed.json").read_text())
    assert {a: extended["arms"][a] for a in speed["arms"]} == speed["arms"] and extended["arms"]["rf2-k60"]["drift"] > 0
    assert (out / "rf2-k60-s1" / "hyp-test.beam5.txt").is_file() and not (out / "rf2-k60-s2").exists()
    changed = run(["bash", "examples/translation/run_rl_budget_multi30k.sh"], cwd=REPO, check=False,
                  env={**env, "LR": "1e-4"})
    assert changed.returncode != 0 and "was trained with" in changed.stderr
