"""What the equal-budget tools refuse, and say, before any work: the report of run_rl_budget_multi30k.sh
(budget_report.py: one budget a folder, said above its table; a --control that is one of its arms; outputs it can
write), the probe's numbers and records (budget.py: --skip, --updates, budgets and paces in range, a record that
is whole), and updates_per_epoch.py's usage errors (no flags, no --arch, a data folder that is not one)."""

import json
import math
import os

import pytest

from smallvocab_tools.analysis import budget_report
from smallvocab_tools.train import budget, updates

REFS = ["a b c d e", "f g h i j", "k l m n o", "p q r s t", "u v w x y", "z a b c d"]


def _recipe_out(tmp_path, runs):
    """A recipe's OUT with ``runs`` ({ARM-kK-sSEED: budget seconds}), each with its settings, an empty train.log
    and a test beam 5 decode; the corpus's references. Returns (OUT, DATA)."""
    out, data = tmp_path / "runs", tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "test.tgt").write_text("\n".join(REFS) + "\n")
    for i, (name, seconds) in enumerate(runs.items()):
        folder = out / name
        folder.mkdir(parents=True)
        (folder / "recipe.settings").write_text(f"updates=10 budget={seconds} seconds_per_update={seconds / 10} "
                                                "LR=3e-5 flags=--ce-weight 1\n")
        (folder / "train.log").write_text("")
        hyps = [ref if j % (i + 2) else "x y z" for j, ref in enumerate(REFS)]
        (folder / "hyp-test.beam5.txt").write_text("\n".join(hyps) + "\n")
    return out, data


def _report(out, data, *flags):
    return [str(out), "--data", str(data), "--tgt", "tgt", "--bootstrap", "20", *flags]


def _refused(main, argv, capsys):
    """``main(argv)``'s exit status and stderr, where it exits (``sys.exit(message)``: 1 and the message, as the
    interpreter says it)."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    code, err = exit.value.code, capsys.readouterr().err
    return (1, err + code) if isinstance(code, str) else (code, err)


def test_the_report_says_the_budget_above_its_table_and_in_its_json(tmp_path, capsys):
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60, "rf2-k5-s1": 60})
    budget_report.main(_report(out, data, "--control", "ce-k5", "--markdown", str(tmp_path / "table.md"),
                               "--json", str(tmp_path / "runs.json")))
    said = capsys.readouterr().out
    assert said.startswith("Budget: 60 s of training per run") and "2 runs of 60 s each" in said
    assert (tmp_path / "table.md").read_text().startswith("Budget: 60 s of training per run")
    assert "| rf2-k5 | ce-k5 | 1 |" in said
    assert json.loads((tmp_path / "runs.json").read_text())["budget"] == 60


def test_the_report_refuses_runs_of_different_budgets_before_any_work(tmp_path, capsys, monkeypatch):
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60, "rf2-k5-s1": 3600})
    monkeypatch.setattr(budget_report, "corpus_scores", lambda *a: pytest.fail("scored before refusing"))
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5", "--markdown",
                                                     str(tmp_path / "table.md")), capsys)
    assert code == 2 and "different budgets (60 s: ce-k5-s1; 3,600 s: rf2-k5-s1)" in err, err
    assert not (tmp_path / "table.md").exists()


@pytest.mark.parametrize("control", ["ce-k500", "ce-k55"])
def test_a_control_that_is_no_arm_of_the_runs_is_refused(tmp_path, capsys, monkeypatch, control):
    """The default ce-k500 where the runs used another K, or a typo."""
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60, "rf2-k5-s1": 60})
    monkeypatch.setattr(budget_report, "corpus_scores", lambda *a: pytest.fail("scored before refusing"))
    code, err = _refused(budget_report.main, _report(out, data, "--control", control), capsys)
    assert code == 2 and f"--control {control}: {out} has no run of that arm (its arms: ce-k5, rf2-k5)" in err, err


def test_a_control_without_the_compared_decode_is_refused(tmp_path, capsys):
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60, "rf2-k5-s1": 60})
    (out / "ce-k5-s1" / "hyp-test.beam5.txt").unlink()
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5"), capsys)
    assert code == 2 and "--control ce-k5: none of its runs has hyp-test.beam5.txt (the decoded arms: rf2-k5)" in err


def test_a_run_s_settings_that_are_no_number_are_named(tmp_path, capsys):
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60})
    settings = out / "ce-k5-s1" / "recipe.settings"
    settings.write_text(settings.read_text().replace("budget=60", "budget=sixty"))
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5"), capsys)
    assert code == 2 and f"{settings}: budget=sixty is not a number above 0" in err, err


@pytest.mark.parametrize("flag", ["--markdown", "--json", "--png"])
def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path, capsys, monkeypatch, flag):
    """Into a folder that does not exist, a folder that is not writable (os.access says so: root writes
    anywhere), or onto a folder."""
    out, data = _recipe_out(tmp_path, {"ce-k5-s1": 60, "rf2-k5-s1": 60})
    monkeypatch.setattr(budget_report, "corpus_scores", lambda *a: pytest.fail("scored before refusing"))
    missing = tmp_path / "no" / "such" / "out.file"
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5", flag, str(missing)), capsys)
    assert code == 2 and f"{flag} {missing}: the folder {missing.parent} does not exist; create it" in err, err
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5", flag, str(out)), capsys)
    assert code == 2 and f"{flag} {out}: {out} is a folder" in err, err
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: p != locked and real_access(p, mode))
    code, err = _refused(budget_report.main, _report(out, data, "--control", "ce-k5", flag, str(locked / "x")),
                         capsys)
    assert code == 2 and f"{flag} {locked / 'x'}: the folder {locked} is not writable" in err, err


def _record(tmp_path, text):
    path = tmp_path / "speed.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("argv, said", [
    (["--skip", "-1"], "--skip must be 0 or more"),
    (["--updates", "0", "--skip", "0"], "--updates must exceed --skip"),
    (["--updates", "2"], "--updates must exceed --skip (updates timed after start-up), got 2 and 2"),
])
def test_the_probe_refuses_nonsense_counts_before_probing(tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.setattr(budget, "_run", lambda command: pytest.fail("probed"))
    code, err = _refused(budget.main, ["--arm", "a=--a", *argv, "--json", str(tmp_path / "speed.json"), "--",
                                       "DATA"], capsys)
    assert code == 2 and said in err, err
    assert not (tmp_path / "speed.json").exists()


@pytest.mark.parametrize("seconds", ["0", "-5", "1e300", "inf", "nan", "sixty"])
def test_a_budget_out_of_range_is_refused(tmp_path, capsys, seconds):
    path = _record(tmp_path, json.dumps({"arms": {"a": {"seconds_per_update": 1.0}}}))
    code, err = _refused(budget.main, ["--json", str(path), "--budget", seconds, "--arm-updates", "a"], capsys)
    assert code == 2 and "--budget" in err and seconds in err, err


@pytest.mark.parametrize("text, said", [
    ('{"arms": {"a": {"seconds_per_update": 0}}}', "arms.a.seconds_per_update: 0 is not a pace a probe measures"),
    ('{"arms": {"a": {"seconds_per_update": -2.0}}}', "arms.a.seconds_per_update: -2.0 is not a pace"),
    ('{"arms": {"a": {"seconds_per_update": 1e-300}}}', "arms.a.seconds_per_update: 1e-300 is not a pace"),
    ('{"arms": {"a": {"seconds_per_update": 1e6}}}', "arms.a.seconds_per_update: 1000000.0 is not a pace"),
    ('{"arms": {"a": {"seconds_per_update": "fast"}}}', 'arms.a.seconds_per_update: "fast" is not a number'),
    ('{"arms": {"a": {"seconds_per_update": null}}}', "arms.a.seconds_per_update: null is not a number"),
    ('{"arms": {"a": {"seconds_per_update": NaN}}}', "arms.a.seconds_per_update: nan is not a pace"),
    ('{"arms": {"a": {}}}', "arms.a.seconds_per_update: null is not a number"),
    ('{"arms": {"a": {"seconds_per_update": 1.0}', "not a whole JSON record"),
    ('["a"]', "no 'arms' object"),
])
def test_arm_updates_names_the_record_and_the_field_it_cannot_use(tmp_path, capsys, text, said):
    path = _record(tmp_path, text)
    code, err = _refused(budget.main, ["--json", str(path), "--budget", "60", "--arm-updates", "a"], capsys)
    assert code == 1 and f"{path}: {said}" in err and "probe the arms again" in err, err
    assert "Traceback" not in err


def test_arm_updates_refuses_more_updates_than_fairseq_train_takes(tmp_path, capsys):
    path = _record(tmp_path, json.dumps({"arms": {"a": {"seconds_per_update": 1e-6}}}))
    code, err = _refused(budget.main, ["--json", str(path), "--budget", "1e6", "--arm-updates", "a"], capsys)
    assert code == 1 and f"{path}: --budget 1e+06:" in err and "more than fairseq-train's " \
        "--max-update holds (2,147,483,647)" in err, err
    assert budget.updates_for({"arms": {"a": {"seconds_per_update": 1e-6}}}, 2000) == {"a": 2_000_000_000}


def test_updates_for_refuses_a_pace_that_is_no_pace():
    """Rather than 1 update for a negative pace."""
    with pytest.raises(ValueError, match="arms.a.seconds_per_update: -1.0 is not a pace"):
        budget.updates_for({"arms": {"a": {"seconds_per_update": -1.0}}}, 60)
    with pytest.raises(ValueError, match="budget: inf is not a budget"):
        budget.updates_for({"arms": {"a": {"seconds_per_update": 1.0}}}, math.inf)


def test_a_probe_adding_arms_to_a_broken_record_names_it_before_probing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(budget, "_run", lambda command: pytest.fail("probed"))
    path = _record(tmp_path, '{"arms": {"a": {"seconds_per_update": 1.')
    code, err = _refused(budget.main, ["--arm", "a=--a", "--arm", "b=--b", "--json", str(path), "--", "DATA"], capsys)
    assert code == 1 and f"{path}: not a whole JSON record" in err, err


@pytest.mark.parametrize("argv, said", [
    ([], "give the binarized data folder and fairseq-train's flags"),
    (["DATA", "--bogus-flag"], "no --arch: give the model's architecture"),
])
def test_updates_per_epoch_answers_a_usage_error(capsys, argv, said):
    code, err = _refused(updates.main, argv, capsys)
    assert code == 2 and "usage: smallvocab-updates-per-epoch DATA" in err and said in err, err


def test_updates_per_epoch_names_a_data_folder_that_is_not_one(tmp_path, capsys):
    flags = ["--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer", "--batch-size", "8"]
    code, err = _refused(updates.main, [str(tmp_path / "nope"), *flags], capsys)
    assert code == 2 and f"the data folder {tmp_path / 'nope'} does not exist" in err, err
    code, err = _refused(updates.main, [str(tmp_path), *flags], capsys)
    assert code == 2 and f"{tmp_path} is not a binarized corpus of these flags" in err and "dict.en.txt" in err, err
