"""The tools around fairseq-train: updates per epoch (what a schedule that ends at an epoch's end is sized by),
averaging a run's last epoch checkpoints, and the interleaved probe that turns a budget in seconds into each
fine-tuning arm's updates."""

import json
import re
import subprocess
import sys

import pytest
import torch
from helpers import BUSY_TORCH_THREAD, REPO, USER_DIR, run

from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals
from smallvocab_tools.train import budget

MODEL = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--embed-dim", "16",
         "--small-vocab-size", "0", "--cpu", "--num-workers", "0", "--no-progress-bar", "--log-format", "simple"]


def test_update_seconds_reads_the_timed_lines_after_start_up():
    log = "x\nprobe_update_seconds 3.5\nprobe_update_seconds 1.25\nprobe_update_seconds 1.5\ny\n"
    assert budget.update_seconds(log, 3, 1) == [1.25, 1.5]
    with pytest.raises(ValueError, match="timed 3 updates, not the 4"):
        budget.update_seconds(log, 4, 1)


def test_probe_interleaves_the_arms_and_takes_medians():
    """Round 1 runs the arms in order, round 2 in reverse; an arm's pace is the median of its rounds' medians;
    a budget becomes each arm's updates at that pace."""
    calls = []
    pace = {"--a": [1.0, 3.0], "--b": [10.0, 30.0]}

    def runner(command):
        arm = next(flag for flag in ("--a", "--b") if flag in command)
        calls.append(arm)
        seconds = pace[arm][sum(c == arm for c in calls) - 1]
        return "".join(f"probe_update_seconds {seconds if u else 99.0}\n" for u in range(5))

    record = budget.probe({"a": ["--a"], "b": ["--b"]}, ["DATA"], updates=5, rounds=2, skip=1, runner=runner,
                          log=lambda m: None)
    assert calls == ["--a", "--b", "--b", "--a"]
    assert record["arms"]["a"]["rounds"] == [1.0, 3.0] and record["arms"]["a"]["seconds_per_update"] == 2.0
    assert record["arms"]["b"]["seconds_per_update"] == 20.0
    assert budget.updates_for(record, 100) == {"a": 50, "b": 5}
    assert budget.updates_for(record, 1) == {"a": 1, "b": 1}


def test_an_arm_added_later_is_probed_beside_the_known_ones_and_scaled_by_the_drift():
    """The machine got twice as slow since the record: the known arm keeps its recorded pace, the new arm's
    measured pace is halved; an arm of the record with other flags, or no known arm beside, is refused."""
    record = {"arms": {"a": {"seconds_per_update": 1.0, "rounds": [1.0], "flags": "--a"}}}

    def runner(command):
        seconds = 2.0 if "--a" in command else 8.0
        return "".join(f"probe_update_seconds {seconds}\n" for _ in range(3))

    out = budget.extend(record, {"a": ["--a"], "b": ["--b"]}, ["DATA"], updates=3, rounds=2, skip=1,
                        runner=runner, log=lambda m: None)
    assert out["arms"]["a"] == record["arms"]["a"]
    assert out["arms"]["b"]["seconds_per_update"] == 4.0 and out["arms"]["b"]["drift"] == 0.5
    with pytest.raises(ValueError, match="probed with other flags: a"):
        budget.extend(record, {"a": ["--a", "--x"], "b": ["--b"]}, ["DATA"], 3, 2, 1, runner=runner, log=print)
    with pytest.raises(ValueError, match="needs one the record has"):
        budget.extend(record, {"b": ["--b"]}, ["DATA"], 3, 2, 1, runner=runner, log=print)


@pytest.mark.slow
def test_updates_per_epoch_is_what_fairseq_train_makes_in_an_epoch(tiny_bin, tmp_path):
    flags = [*MODEL, "--batch-size", "8"]
    got = run(["scripts/updates_per_epoch.py", tiny_bin, *flags]).stdout.strip()
    out = run(["fairseq-train", tiny_bin, *flags, "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1",
               "--max-epoch", "1", "--save-dir", tmp_path, "--no-save", "--disable-validation"])
    logged = re.search(r"train \| epoch 001 \|.* num_updates (\d+)", out.stdout + out.stderr).group(1)
    assert got == logged and int(got) > 1


@pytest.mark.slow
def test_averaged_checkpoint_holds_the_mean_of_the_last_epochs_and_decodes(tiny_bin, tmp_path):
    """fairseq-train with --keep-last-epochs 3 over 4 epochs; the average of the last 3 (checkpoint4/3/2.pt) holds
    each parameter's mean and the newest one's other fields, and fairseq-generate decodes with it; asking for
    more epochs than the folder holds, or writing over an input, is refused."""
    save = tmp_path / "ce"
    run(["fairseq-train", tiny_bin, *MODEL, "--batch-size", "8", "--criterion", "cross_entropy", "--optimizer", "adam",
         "--lr", "0.01", "--max-epoch", "4", "--keep-last-epochs", "3", "--save-dir", save, "--disable-validation"])
    assert sorted(p.name for p in save.glob("checkpoint[0-9]*.pt")) == ["checkpoint2.pt", "checkpoint3.pt",
                                                                         "checkpoint4.pt"]
    out = run(["scripts/average_checkpoints.py", "--inputs", save, "--num-epoch-checkpoints", "3", "--output",
               save / "checkpoint_avg.pt"])
    assert "averaged 3 checkpoints (checkpoint4.pt, checkpoint3.pt, checkpoint2.pt)" in out.stdout
    with allowed_globals():
        states = [torch.load(save / f"checkpoint{e}.pt", weights_only=True) for e in (2, 3, 4)]
        avg = torch.load(save / "checkpoint_avg.pt", weights_only=True)
    assert avg["extra_state"]["train_iterator"]["epoch"] == states[2]["extra_state"]["train_iterator"]["epoch"]
    for key, value in avg["model"].items():
        torch.testing.assert_close(value, sum(s["model"][key] for s in states) / 3)
    assert not torch.equal(avg["model"][key], states[2]["model"][key])
    generated = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
                     "--small-vocab-size", "0", "--path", save / "checkpoint_avg.pt", "--gen-subset", "valid",
                     "--batch-size", "8", "--beam", "1", "--cpu"])
    assert "Generate valid with beam=1" in generated.stdout + generated.stderr
    refused = run(["scripts/average_checkpoints.py", "--inputs", save, "--num-epoch-checkpoints", "5", "--output",
                   tmp_path / "x.pt"], check=False)
    assert refused.returncode != 0 and "holds 3 epoch checkpoints" in refused.stderr and "--keep-last-epochs" in \
        refused.stderr and not (tmp_path / "x.pt").exists()
    refused = run(["scripts/average_checkpoints.py", "--inputs", save / "checkpoint2.pt", save / "checkpoint3.pt",
                   "--output", save / "checkpoint3.pt"], check=False)
    assert refused.returncode != 0 and "is one of the inputs" in refused.stderr


@pytest.mark.slow
def test_budget_probe_times_each_arms_own_fairseq_train_and_sizes_the_budget(tiny_bin, tmp_path):
    """Two arms of the smallvocab_reinforce criterion (the CE control and risk over 3 samples) probed for 4
    updates each, 2 rounds: the record holds each arm's flags and positive paces, and --arm-updates turns a
    budget into updates."""
    record = tmp_path / "speed.json"
    common = [tiny_bin, *MODEL, "--batch-size", "8", "--criterion", "smallvocab_reinforce", "--optimizer", "adam",
              "--lr", "1e-4", "--max-sample-len", "20"]
    out = run(["scripts/budget_probe.py", "--arm", "ce=--ce-weight 1", "--arm",
               "risk3=--rl-objective risk --rl-samples 3", "--updates", "4", "--skip", "1", "--rounds", "2",
               "--json", record, "--", *common])
    assert re.search(r"risk3: [\d.]+ s/update", out.stdout)
    data = json.loads(record.read_text())
    assert set(data["arms"]) == {"ce", "risk3"} and data["arms"]["risk3"]["flags"] == "--rl-objective risk " \
        "--rl-samples 3"
    assert all(len(arm["rounds"]) == 2 and arm["seconds_per_update"] > 0 for arm in data["arms"].values())
    want = int(100 // data["arms"]["risk3"]["seconds_per_update"])
    got = run(["scripts/budget_probe.py", "--json", record, "--budget", "100", "--arm-updates", "risk3"])
    assert int(got.stdout) == max(1, want)
    refused = run(["scripts/budget_probe.py", "--json", record, "--budget", "100", "--arm-updates", "rf9"],
                  check=False)
    assert refused.returncode != 0 and "has no arm 'rf9' (it has ce, risk3)" in refused.stderr


PROBE_WORKER_WITH_A_BUSY_THREAD = BUSY_TORCH_THREAD + """
import logging, sys
from fairseq_cli import train
from smallvocab_tools.train import budget

def cli_main():  # stands in for a run that --max-update stopped while the data-buffer thread still collates
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("fairseq_cli.train").info("done training")
    print("probe_update_seconds 0.5")
    if sys.argv[1:] == ["--fail"]:
        raise RuntimeError("the run failed")

train.cli_main = cli_main
budget.main(["--timed-train", *sys.argv[1:]])
"""


@pytest.mark.slow
def test_the_probe_worker_exits_0_after_a_good_run_while_a_daemon_thread_still_runs_torch():
    """A daemon thread inside torch when Python exits aborts the process (exit -6) after a good run; the probe's
    worker ends without that teardown, its output complete. A failed run still fails."""
    done = subprocess.run([sys.executable, "-c", PROBE_WORKER_WITH_A_BUSY_THREAD], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert budget.update_seconds(done.stdout, 1, 0) == [0.5] and "done training" in done.stdout
    failed = subprocess.run([sys.executable, "-c", PROBE_WORKER_WITH_A_BUSY_THREAD, "--fail"], capture_output=True,
                            text=True, timeout=120)
    assert failed.returncode != 0 and "the run failed" in failed.stderr


@pytest.mark.slow
def test_the_annealed_transformer_recipe_shows_why_updates_per_epoch_failed(tmp_path):
    """SCHEDULE=anneal counts an epoch's updates first: a data folder that is not one stops the recipe with
    updates_per_epoch.py's own message (it was hidden, and the shell's arithmetic failed on the empty count),
    before the save folder is made."""
    result = run(["bash", "examples/translation/run_transformer_multi30k.sh"], cwd=REPO, check=False,
                 env={"SCHEDULE": "anneal", "DATA": str(tmp_path / "nodata"), "CANDS": str(tmp_path / "cands"),
                      "SAVE": str(tmp_path / "save")})
    assert result.returncode == 2, result.stderr
    assert f"the data folder {tmp_path / 'nodata'} does not exist" in result.stderr, result.stderr
    assert "syntax error" not in result.stderr and not (tmp_path / "save").exists()


# fairseq's data-buffer thread collating (in torch) when the process ends, as at a --max-update stop
BUFFER_BUSY_AT_EXIT = """
import torch
import fairseq_smallvocab  # noqa: F401  (as --user-dir imports it)
from fairseq.data.iterators import BufferedIterator


class Source:
    def __len__(self):
        return 10 ** 9

    def __iter__(self):
        a = torch.randn(1000)
        while True:
            for _ in range(100):
                a = a + a * 0
            yield a


batches = BufferedIterator(10 ** 6, Source())  # a buffer that never fills: its thread never rests
next(batches)
print("done training", flush=True)
"""


@pytest.mark.slow
def test_a_run_whose_data_buffer_thread_is_busy_at_exit_exits_0():
    """The plugin stops fairseq's data-buffer thread before the interpreter's teardown, in which a thread inside
    torch aborts the process (exit -6) after a finished run (with the patch left out: 3 aborts of 3 here)."""
    done = subprocess.run([sys.executable, "-c", BUFFER_BUSY_AT_EXIT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "done training\n", (done.returncode, done.stderr[-2000:])
