"""fairseq-train's pace (compat/pace.py): one line after the first updates with the seconds per update and the
time to the run's budget, whichever of --max-update and --max-epoch comes first."""

import re
from types import SimpleNamespace

import pytest
from helpers import VP_TRAIN, run


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _updates(pace, clock, seconds_each, count, optimization, start=1, dataset=None):
    """Updates start..start+count-1, each ``seconds_each`` long; the lines said."""
    lines = []
    for n in range(start, start + count):
        clock.now += seconds_each
        line = pace.update(n, optimization, dataset)
        if line:
            lines.append((n, line))
    return lines


def test_the_pace_is_said_once_after_ten_timed_updates_the_first_left_out():
    from fairseq_smallvocab.compat.pace import Pace

    clock = Clock()
    pace = Pace(clock)
    opt = SimpleNamespace(max_update=4000, max_epoch=0)
    clock.now += 50.0  # the first update: loading and allocations, not the pace
    assert pace.update(1, opt) == ""
    said = _updates(pace, clock, 1.5, 30, opt, start=2)
    assert said == [(11, "pace: 1.500 s/update (updates 2-11; validation and saving not included); --max-update "
                         "4,000: 3,989 more updates, about 100 min at this pace")]


def test_slow_updates_are_said_within_the_window_s_seconds():
    from fairseq_smallvocab.compat.pace import WINDOW_SECONDS, Pace

    clock = Clock()
    pace = Pace(clock)
    opt = SimpleNamespace(max_update=139, max_epoch=0)
    pace.update(126, opt)  # a resumed run: its first update here
    said = _updates(pace, clock, WINDOW_SECONDS / 2 + 1, 5, opt, start=127)
    assert said == [(128, "pace: 16.000 s/update (updates 127-128; validation and saving not included); "
                          "--max-update 139: 11 more updates, about 2.9 min at this pace")]


def test_a_validation_within_the_first_window_is_left_out_of_the_first_pace():
    """A validation after update 5 (--validate-interval-updates 4): 5 s of the epoch's end, then 60 s of validating
    and saving; the first pace says 1.5 s an update, as it says validation and saving are not in it."""
    from fairseq_smallvocab.compat.pace import Pace

    clock = Clock()
    pace = Pace(clock)
    opt = SimpleNamespace(max_update=4000, max_epoch=0)
    data = SimpleNamespace(validate_interval_updates=4, validate_interval=0, disable_validation=False)
    pace.update(1, opt, data)
    assert _updates(pace, clock, 1.5, 4, opt, start=2, dataset=data) == []
    clock.now += 5.0
    pace.validating()
    clock.now += 60.0
    pace.before_update()
    said = _updates(pace, clock, 1.5, 10, opt, start=6, dataset=data)
    assert said == [(11, "pace: 1.500 s/update (updates 2-11; validation and saving not included); --max-update "
                         "4,000: 3,989 more updates, about 100 min at this pace")]


@pytest.mark.parametrize("opt, epoch_updates, expected", [
    ({"max_update": 0, "max_epoch": 3}, 100, "--max-epoch 3 (100 updates an epoch): 289 more updates"),
    ({"max_update": 200, "max_epoch": 3}, 100, "--max-update 200: 189 more updates"),
    ({"max_update": 500, "max_epoch": 3}, 100, "--max-epoch 3 (100 updates an epoch): 289 more updates"),
    ({"max_update": 0, "max_epoch": 0}, 100, "no --max-update or --max-epoch: it runs until stopped (100 updates an "
                                             "epoch, 3.3 min)"),
    ({"max_update": 0, "max_epoch": 3}, None, "no --max-update or --max-epoch: it runs until stopped"),
])
def test_the_budget_is_the_nearer_of_max_update_and_max_epoch(opt, epoch_updates, expected):
    from fairseq_smallvocab.compat.pace import pace_line

    line = pace_line(2.0, 2, 11, SimpleNamespace(**opt), epoch_updates)
    assert line.startswith("pace: 2.000 s/update (updates 2-11;") and expected in line
    assert line.endswith(expected + ("" if "until stopped" in expected else ", about "
                                     f"{int(expected.split(': ')[-1].split()[0]) * 2 / 60:.1f} min at this pace"))


def test_the_pace_with_validation_is_said_once_after_the_first_validation():
    """The updates' own pace re-measured between validations (here slower at first, as on a machine that was busy
    during the first window), plus the validation's seconds spread over the updates between validations."""
    from fairseq_smallvocab.compat.pace import Pace

    clock = Clock()
    pace = Pace(clock)
    opt = SimpleNamespace(max_update=4000, max_epoch=0)
    data = SimpleNamespace(validate_interval_updates=100, validate_interval=1, disable_validation=False)
    pace.update(1, opt, data)
    assert len(_updates(pace, clock, 6.0, 10, opt, start=2, dataset=data)) == 1  # the pace, 6 s, at update 11
    assert _updates(pace, clock, 1.5, 9, opt, start=12, dataset=data) == []  # then 1.5 s each
    for n in (21, 22):  # validations after updates 20 and 21, each 60 s with its saving
        pace.validating()
        clock.now += 30.0
        pace.validating()  # its second batch
        clock.now += 30.0
        pace.before_update()
        said = _updates(pace, clock, 1.5, 1, opt, start=n, dataset=data)
        if n == 21:  # updates 2-20 (the first is not timed)
            pace_between = (10 * 6.0 + 9 * 1.5) / 19
            assert said == [(21, "pace with validation: a validation and its saving took 1.0 min, one every 100 "
                                 f"updates: {pace_between:.3f} s an update between validations, "
                                 f"{pace_between + 0.6:.3f} with them; --max-update 4,000: 3,979 more updates, "
                                 f"about {3979 * (pace_between + 0.6) / 60:.0f} min")]
        else:
            assert said == []  # said once


@pytest.mark.parametrize("data, epoch_updates, rate", [
    ({"validate_interval_updates": 100, "validate_interval": 1}, None, 1 / 100),
    ({"validate_interval_updates": 0, "validate_interval": 2}, 50, 1 / 100),
    ({"validate_interval_updates": 100, "validate_interval": 1}, 100, 2 / 100),
    ({"validate_interval_updates": 100, "validate_interval": 1, "disable_validation": True}, 100, 0.0),
])
def test_validations_per_update_add_both_intervals(data, epoch_updates, rate):
    from fairseq_smallvocab.compat.pace import validation_line, validations_per_update

    data = SimpleNamespace(**data)
    assert validations_per_update(data, epoch_updates) == pytest.approx(rate)
    line = validation_line(1.0, 30.0, 10, SimpleNamespace(max_update=1010, max_epoch=0), data, epoch_updates)
    if rate:
        assert line.endswith(f": 1.000 s an update between validations, {1 + 30 * rate:.3f} with them; "
                             "--max-update 1,010: 1,000 more updates, about "
                             f"{1000 * (1 + 30 * rate) / 60:.0f} min")
    else:
        assert line == "pace with validation: a validation and its saving took 30 s"


@pytest.mark.slow
def test_fairseq_train_logs_its_pace_and_the_epoch_budget(tiny_bin, tmp_path):
    """Three epochs of the predictor on 400 pairs in batches of at most 64: the epoch's updates as trained; the
    pace after update 11, then with validation after the first validation that follows."""
    out = run(["fairseq-train", tiny_bin, *VP_TRAIN, "-s", "src", "-t", "tgt", "--save-dir", tmp_path / "vp",
               "--log-interval", "100", "--max-epoch", "3"])
    logs = out.stdout + out.stderr
    lines = re.findall(r"fairseq_smallvocab\.pace \| (pace: .*)$", logs, re.M)
    assert len(lines) == 1, logs[-2000:]
    total = int(re.findall(r"num_updates (\d+)", logs)[-1])
    epoch = total // 3
    assert total % 3 == 0 and 6 <= epoch <= 10  # the pace is said in epoch 2
    assert re.fullmatch(r"pace: \d+\.\d{3} s/update \(updates 2-11; validation and saving not included\); "
                        rf"--max-epoch 3 \({epoch} updates an epoch\): {total - 11} more updates, about \d+ s "
                        "at this pace", lines[0]), lines[0]
    # epoch 2's validation, said at the first update of epoch 3, spread over an epoch's updates
    lines = re.findall(r"fairseq_smallvocab\.pace \| (pace with validation: .*)$", logs, re.M)
    assert len(lines) == 1 and re.fullmatch(
        rf"pace with validation: a validation and its saving took \d+ s, one every {epoch} updates: "
        r"\d+\.\d{3} s an update between validations, \d+\.\d{3} with them; "
        rf"--max-epoch 3 \({epoch} updates an epoch\): {epoch - 1} more updates, "
        r"about \d+ s", lines[0]), lines


def test_under_a_time_limit_the_pace_says_the_updates_the_time_left_buys():
    from fairseq_smallvocab.compat.pace import Pace

    clock = Clock()
    pace = Pace(clock)
    opt = SimpleNamespace(max_update=4000, max_epoch=0, stop_time_hours=0.5)
    assert pace.update(1, opt, trained=lambda: 700.0) == ""
    said = ""
    for n in range(2, 12):
        clock.now += 2.0
        said = pace.update(n, opt, trained=lambda n=n: 700.0 + 2.0 * (n - 1)) or said
    # 1,800 s of limit, of which 720 trained (the starting checkpoint's 700 included): 1,080 s at 2 s an update
    assert said.endswith("; --stop-time-hours 0.5: 18 min left, about 540 more updates at this pace (validation "
                         "not included)"), said
    assert "about 540" not in Pace(clock).update(1, SimpleNamespace(max_update=4000, max_epoch=0),
                                             trained=lambda: 1.0)
