"""The quick start's time budget (smallvocab_tools/train/time_budget.py): the plan's shares, the reserve set
aside for the evaluation, the refusal of a budget too small, and each training's --stop-time-hours, which adds
the training time fairseq counts from the checkpoint it starts from."""

import json

import pytest

from smallvocab_tools.train import time_budget as tb

PAYS = {"sec_per_step": {"ce": {"small": 1.0, "full": 1.5}, "reinforce": {"small": 2.0, "full": 3.0}},
        "ms_per_sentence": {"small": 10.0, "full": 15.0}, "epoch_updates": 60}


@pytest.mark.parametrize("text, seconds", [("60m", 3600), ("1.5h", 5400), ("5400s", 5400), (" 2h ", 7200)])
def test_a_budget_is_a_number_and_its_unit(text, seconds):
    assert tb.parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["60", "sixty minutes", "0m", "-5m", "9000h", ""])
def test_a_budget_without_its_unit_or_out_of_range_is_refused_with_an_example(text):
    with pytest.raises(tb.BudgetError, match=r"BUDGET=.*e\.g\. 60m"):
        tb.parse_budget(text)


def _plan(budget=3600.0, spent=100.0, steps=("vp", "ce", "rl"), pays=PAYS, softmax="small", models=2):
    return tb.make(budget, spent, list(steps), pays, softmax, 1000, 1000, models, True,
                   {"vp": 20, "ce": 4000, "rl": 500})


def test_the_reserve_is_set_aside_and_the_rest_shared_one_six_three():
    plan = _plan()
    per_model = 2 * tb.START_SECONDS + 2000 * 0.010 * tb.DECODE_MARGIN
    assert plan["reserve"] == pytest.approx(2 * per_model + tb.EXPORT_SECONDS + tb.VERDICT_SECONDS
                                            + tb.START_SECONDS, abs=0.1)
    left = 3600 - 100 - plan["reserve"]
    assert plan["shares"]["vp"] == pytest.approx(left / 10, abs=0.1)
    assert plan["shares"]["ce"] == pytest.approx(left * 6 / 10, abs=0.2)
    assert plan["shares"]["rl"] == pytest.approx(left * 3 / 10, abs=0.2)
    assert sum(plan["shares"].values()) + plan["reserve"] + 100 == pytest.approx(3600, abs=0.5)


def test_the_full_softmax_plans_with_its_own_paces():
    small, full = _plan(), _plan(softmax="full")
    assert full["paces"]["ce"] == 1.5 and full["paces"]["decode"] == 0.015
    assert full["reserve"] > small["reserve"]
    assert full["updates"]["ce"] < small["updates"]["ce"]


def test_under_compare_each_arm_gets_half_of_its_kinds_share():
    plan = _plan(steps=("vp", "ce", "ce-full", "rl", "rl-full"), models=4)
    assert plan["weights"] == {"vp": 1.0, "ce": 3.0, "ce-full": 3.0, "rl": 1.5, "rl-full": 1.5}
    left = 3600 - 100 - plan["reserve"]
    assert plan["shares"]["ce"] == pytest.approx(plan["shares"]["ce-full"], abs=0.2)
    assert plan["shares"]["ce"] == pytest.approx(left * 3 / 10, abs=0.2)


def test_updates_are_the_share_at_the_pace_with_validations_spread():
    plan = _plan()
    validation = tb.validation_seconds(plan)
    assert validation == pytest.approx(1000 * 0.010 * tb.DECODE_MARGIN + 2.0)
    seconds = plan["shares"]["ce"]
    assert plan["updates"]["ce"] == int((seconds - tb.START_SECONDS) / (1.0 + validation / 60))
    assert plan["updates"]["rl"] == int((plan["shares"]["rl"] - tb.START_SECONDS) / (2.0 + validation / 50))


def test_time_a_step_leaves_goes_to_the_steps_after_it_and_an_overrun_is_taken_from_them():
    plan = _plan()
    planned_ce_end = 100 + plan["shares"]["vp"] + plan["shares"]["ce"]
    assert tb.share(plan, "rl", planned_ce_end) == pytest.approx(plan["shares"]["rl"], abs=0.2)
    assert tb.share(plan, "rl", planned_ce_end - 600) == pytest.approx(plan["shares"]["rl"] + 600, abs=0.2)
    assert tb.share(plan, "rl", planned_ce_end + 300) == pytest.approx(plan["shares"]["rl"] - 300, abs=0.2)
    # CE starting early (the predictor stopped at its epochs) gets six ninths of what it left
    early = tb.share(plan, "ce", 100 + plan["shares"]["vp"] - 90)
    assert early == pytest.approx(plan["shares"]["ce"] + 90 * 6 / 9, abs=0.2)


def test_a_budget_that_cannot_hold_the_evaluation_and_a_minute_a_training_is_refused_with_the_least():
    plan = _plan()
    least = 100 + plan["reserve"] + 3 * tb.MIN_STEP_SECONDS
    with pytest.raises(tb.BudgetError, match=r"give at least \d+m, or leave BUDGET unset") as error:
        _plan(budget=least - 1)
    assert f"at least {int(-(-least // 60))}m" in str(error.value)
    assert _plan(budget=least + 1)["shares"]["ce"] > 0


def test_without_measured_paces_the_plan_shares_time_and_says_so():
    plan = _plan(pays=None)
    assert plan["updates"] == {"vp": None, "ce": None, "rl": None}
    text = tb.describe(plan)
    assert "no pace measured" in text and "its pace line says how many the time buys" in text


def test_the_plan_names_each_step_its_minutes_and_what_its_cap_would_need():
    text = tb.describe(_plan())
    assert text.startswith("the plan for BUDGET=60 min (1.7 min spent; does_it_pay.py's paces, small softmax):")
    assert "- the predictor: at most" in text and "(or its 20 epochs, if sooner)" in text
    assert "- CE: " in text and "its cap, 4,000 updates, would need about" in text
    assert "- REINFORCE: " in text and "updates at 2.00 s an update (validation included)" in text
    big = tb.describe(_plan(budget=40 * 3600.0))
    assert "within its cap of 500" in big


def test_the_limit_adds_the_training_time_fairseq_counts_from_the_checkpoint(tmp_path):
    import torch

    parent = tmp_path / "checkpoint_best.pt"
    torch.save({"model": {}, "extra_state": {"previous_training_time": 1234.5}}, parent)
    plan = _plan()
    seconds = tb.share(plan, "rl", 2000)
    said = tb.limit(plan, "rl", 2000, parent)
    own = seconds - tb.START_SECONDS - tb.validation_seconds(plan)
    assert said["counted"] == 1234.5 and not said["over"]
    assert said["hours"] == pytest.approx((own + 1234.5) / 3600, abs=1e-4)
    assert tb.limit(plan, "rl", 2000, tmp_path / "absent.pt")["counted"] == 0
    late = tb.limit(plan, "rl", 3500, None)  # past the budget: a minute all the same, said
    assert late["over"] and late["seconds"] == tb.MIN_STEP_SECONDS


def test_the_command_prints_the_plan_and_each_limit_in_hours(tmp_path, capsys):
    pays = tmp_path / "pays.json"
    pays.write_text(json.dumps(PAYS))
    out = tmp_path / "budget.json"
    assert tb.main(["plan", "--budget", "60m", "--spent", "100", "--steps", "vp", "ce", "rl", "--does-it-pay",
                    str(pays), "--dev-sentences", "1000", "--test-sentences", "1000", "--models", "2", "--export",
                    "--caps", "vp=20", "ce=4000", "rl=500", "--out", str(out)]) == 0
    assert "the plan for BUDGET=60m" in capsys.readouterr().out
    assert tb.main(["limit", "--plan", str(out), "--step", "ce", "--spent", "300"]) == 0
    said = capsys.readouterr()
    assert float(said.out) == pytest.approx(tb.limit(json.loads(out.read_text()), "ce", 300)["hours"])
    assert "budget: CE may take" in said.err and "--stop-time-hours" in said.err
    assert tb.main(["check", "60"]) == 2
    assert "BUDGET=60: a number and its unit" in capsys.readouterr().err
    assert tb.main(["plan", "--budget", "5m", "--spent", "100", "--steps", "vp", "ce", "rl", "--dev-sentences",
                    "1000", "--test-sentences", "1000", "--models", "2", "--out", str(tmp_path / "b2.json")]) == 2
    assert "give at least" in capsys.readouterr().err and not (tmp_path / "b2.json").exists()


@pytest.mark.slow
def test_a_fine_tune_runs_its_own_share_though_fairseq_counts_its_parents_training_time(tiny_bin, tmp_path):
    """fairseq-train --finetune-from-model loads the parent's previous_training_time, so --stop-time-hours of the
    step's share alone stops a fine-tune of a parent that trained 2 hours after its first update; the limit,
    which adds that time, lets it run its updates (the mutant: the limit without it)."""
    import torch
    from helpers import TINY_TRANSFORMER, USER_DIR, run

    common = ["fairseq-train", tiny_bin, "--user-dir", USER_DIR, "--task", "translation", "-s", "src", "-t", "tgt",
              "--cpu", "--num-workers", "0", *TINY_TRANSFORMER.split(), "--optimizer", "adam", "--lr", "0.001",
              "--max-tokens", "200", "--no-progress-bar", "--no-epoch-checkpoints", "--disable-validation"]
    run([*common, "--max-update", "2", "--save-dir", tmp_path / "ce"])
    parent = tmp_path / "ce" / "checkpoint_last.pt"
    state = torch.load(parent, map_location="cpu", weights_only=False)
    state["extra_state"]["previous_training_time"] = 7200.0
    torch.save(state, parent)
    plan = _plan()
    spent = 100 + plan["shares"]["vp"] + plan["shares"]["ce"]
    for hours, updates in ((tb.limit(plan, "rl", spent, parent)["hours"], 5),
                           (tb.limit(plan, "rl", spent, None)["hours"], 1)):
        save = tmp_path / f"rl-{updates}"
        log = run([*common, "--max-update", "5", "--finetune-from-model", parent, "--stop-time-hours", str(hours),
                   "--save-dir", save]).stderr
        assert torch.load(save / "checkpoint_last.pt", map_location="cpu",
                          weights_only=False)["optimizer_history"][-1]["num_updates"] == updates, log[-2000:]


def test_compare_s_full_arms_are_planned_at_the_full_softmax_s_paces():
    plan = _plan(steps=("vp", "ce", "ce-full", "rl", "rl-full"), models=4)
    assert plan["updates"]["ce-full"] < plan["updates"]["ce"]  # the same share, the full softmax's slower pace
    assert "updates at 1.50 s an update" in tb.describe(plan)
    assert plan["reserve"] > _plan(models=4)["reserve"]  # the evaluation at the slower decoding's pace
