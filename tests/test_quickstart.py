"""examples/quickstart/run.sh, the README's quick start, end to end on tiny raw text: sentencepiece with one model
and one dictionary, the predictor and its recall beside the frequency list's, CE inside the candidates with
every embedding shared, REINFORCE, test BLEU of both on the raw references, fairseq-interactive on raw lines and
the CTranslate2 export; run again, it trains nothing and scores the same, refuses other settings than a step
recorded, and a step not marked finished goes on from where it stopped."""

import json
import re

import pytest
from helpers import REPO, run

from smallvocab_tools.analysis.bleu import signature as bleu_signature

TINY = {"SP_VOCAB": "200", "K": "120", "VP_EPOCHS": "1", "CE_EPOCHS": "1", "RL_UPDATES": "12", "THREADS": "1",
        "BEAM": "2", "ARCH_ARGS": "--arch transformer --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 "
        "--decoder-embed-dim 16 --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
        "--decoder-attention-heads 2 --share-all-embeddings"}


@pytest.mark.slow
def test_the_quick_start_runs_from_raw_text_to_an_exported_model(tiny_raw, tmp_path):
    import sacrebleu

    out = tmp_path / "qs"
    # (the small softmax asked for: SOFTMAX=auto would follow does_it_pay.py's timing of this tiny model, which a
    # busy machine sways; the tests below force that measurement each way)
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), "SOFTMAX": "small", **TINY}
    first = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env)
    data = out / "data-bin"
    assert json.loads((data / "stats.json").read_text())["joined_dictionary"] is True
    assert (data / "dict.src.txt").read_text() == (data / "dict.tgt.txt").read_text()
    assert re.search(r"^\| 120 \| [\d.]+ \| [\d.]+ \|$", first.stdout, re.M)  # recall@K: predictor, frequency list
    refs = (tiny_raw / "test.tgt").read_text().splitlines()
    for name in ("ce", "rl"):
        hyps = (out / name / "hyp-test.txt").read_text().splitlines()
        assert len(hyps) == len(refs) and not any("\u2581" in h for h in hyps)  # words, not pieces
        bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
        printed = re.search(rf"^{re.escape(str(out / name))}: BLEU ([\d.]+) \((nrefs:\S+)\) \(lenpen ([\d.]+)\)$",
                            first.stdout, re.M)
        assert printed and float(printed.group(1)) == pytest.approx(bleu, abs=0.0051), first.stdout
        assert printed.group(2) == bleu_signature()  # sacrebleu's signature: its default tokenizer, 13a
        # each model decoded test at its own length penalty, the best on dev (LENPEN=dev, the default)
        chosen = json.loads((out / name / "lenpen.json").read_text())
        assert float(printed.group(3)) == chosen["best_lenpen"] and chosen["subset"] == "valid"
        assert chosen["tokenize"] == "13a" and chosen["bleu_signature"] == printed.group(2)
    rl_log = (out / "rl.train.log").read_text()
    assert "'reward': 'gleu_bp'" in rl_log and "'reward_post_process': 'sentencepiece'" in rl_log
    assert "'lr': [3e-05]" in rl_log and str(out / "ce" / "checkpoint_best.pt") in rl_log
    ce_log = (out / "ce.train.log").read_text()  # CE's budget: updates and patience, a warmup that fits them
    assert "'max_update': 4000" in ce_log and "'patience': 10" in ce_log and "'warmup_updates': 400" in ce_log
    assert len(re.findall(r"^D-\d+\t", first.stdout, re.M)) == 3  # fairseq-interactive on 3 raw source lines
    assert (out / "rl" / "ct2" / "model.bin").is_file() and (out / "rl" / "ct2" / "vmap.txt").is_file()
    # on the screen: whether the small softmax pays, each training's pace early, and the verdict
    assert re.search(r"^Verdict: the small softmax (pays|does not pay|pays little)", first.stdout, re.M)
    assert (out / "does-it-pay.txt").read_text().startswith("# ARCH_ARGS=--arch transformer --encoder-layers 1 ")
    # (REINFORCE's 12 updates reach the pace's window of 10 after the first; the tiny predictor and CE do not)
    assert re.search(r"\| pace: [\d.]+ s/update \(updates 2-11; .*--max-update 12: 1 more updates", first.stdout)
    row = (r"^\| rl \| REINFORCE \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \(p = [\d.]+\) \| "
           r"[+-][\d.]+ \(p = [\d.]+\) \|$")  # BLEU, chrF, length ratio, lenpen; BLEU and chrF against CE
    assert re.search(row, first.stdout, re.M)
    assert re.search(r"^Verdict \(rl\): (REINFORCE helped|REINFORCE did not help|inconclusive)", first.stdout, re.M)
    verdict = (out / "verdict.txt").read_text()  # the verdict kept, as printed, and as JSON
    assert verdict.splitlines()[0] in first.stdout and verdict.strip().splitlines()[-1] in first.stdout
    assert [row["kind"] for row in json.loads((out / "verdict.json").read_text())["rows"]] == ["CE", "REINFORCE"]
    logs = {name: (out / f"{name}.train.log").read_text() for name in ("vp", "ce", "rl")}
    again = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env)
    assert {name: (out / f"{name}.train.log").read_text() for name in ("vp", "ce", "rl")} == logs  # nothing retrained
    scores = re.compile(r"^(\S+): BLEU ([\d.]+) \(nrefs:\S+\) \(lenpen ([\d.]+)", re.M)  # each model's test BLEU
    assert scores.findall(again.stdout) == scores.findall(first.stdout) and len(scores.findall(first.stdout)) == 2
    assert "(lenpen" in again.stdout and again.stdout.count("evaluated before") == 2
    # another setting on the finished run, as its steps recorded them: refused by name before anything runs
    refused = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False,
                  env={**env, "REWARD": "bleu", "K": "100"})
    assert refused.returncode == 2 and "== 1/8" not in refused.stderr, refused.stderr
    assert all(f"/{name} was made with other settings" in refused.stderr for name in ("vp", "ce", "rl"))
    assert "REWARD was gleu_bp, now bleu" in refused.stderr and "K was 120, now 100" in refused.stderr
    assert "data-bin was made" not in refused.stderr
    # the control, CE continued (LAMBDA=1) in its own folder: the REINFORCE run's export stays as it was, the CE
    # model's evaluation is reused, and the verdict judges REINFORCE against the control
    export = (out / "rl" / "ct2" / "model.bin").read_bytes()
    control = run(["bash", "examples/quickstart/run.sh"], cwd=REPO,
                  env={**env, "LAMBDA": "1", "RL_SAVE": str(out / "ce-continued")})
    assert (out / "rl" / "ct2" / "model.bin").read_bytes() == export
    assert not (out / "ce-continued" / "ct2").exists()  # the control is compared, not deployed: not exported
    assert f"not exported: RL_SAVE={out / 'ce-continued'} is the control (LAMBDA=1" in control.stderr
    assert f"{out / 'ce'}: BLEU" in control.stdout and control.stdout.count("evaluated before") == 1
    assert re.search(r"^\| ce-continued \| CE continued \|", control.stdout, re.M)
    assert re.search(r"^Verdict \(rl\): .* against CE continued", control.stdout, re.M)
    # a finished step says so (FOLDER/.quickstart-done); without it the step's training goes on from its
    # checkpoint_last.pt: here CE for a second epoch, the rest left as they are
    assert all((out / name / ".quickstart-done").is_file() for name in ("vp", "ce", "rl"))
    (out / "ce" / ".quickstart-done").unlink()
    resumed = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env={**env, "CE_EPOCHS": "2"})
    assert re.search(rf"Loaded checkpoint {re.escape(str(out / 'ce' / 'checkpoint_last.pt'))} \(epoch \d+ @ [1-9]\d* "
                     r"updates\)", resumed.stdout), resumed.stdout  # the screen says where it resumed
    ce_log = (out / "ce.train.log").read_text()
    assert ce_log.startswith(logs["ce"]) and "epoch 002 | valid on 'valid' subset" in ce_log[len(logs["ce"]):]
    assert "epoch 001 | valid on" not in ce_log[len(logs["ce"]):]
    assert (out / "rl.train.log").read_text() == logs["rl"]
    missing = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env={"OUT": str(tmp_path / "x")})
    assert missing.returncode != 0 and "RAW: the folder of your train, valid and test" in missing.stderr


def _finished(out, raw, arch):
    """OUT as a finished quick start leaves its records (the data's, the predictor's, CE's, REINFORCE's, the last in
    the format runs recorded before the others were): nothing else, so that whatever starts would fail."""
    (out / "data-bin").mkdir(parents=True)
    (out / "data-bin" / "stats.json").write_text("{}")
    (out / "data-bin.settings").write_text(f"RAW={raw}\nSRC=src\nTGT=tgt\nSP_VOCAB=200\nEMPTY_LINES=fail\n")
    records = {"vp": "K=120\nSEED=1\nVP_EPOCHS=1\n",
               "ce": f"K=120\nARCH_ARGS={arch}\nWARMUP=400\nSEED=1\nCE_UPDATES=4000\nCE_PATIENCE=10\nCE_EPOCHS=1\n",
               "rl": "LAMBDA=0.005\nREWARD=gleu_bp\nSAMPLES=4\nRL_LR=3e-5\nRL_UPDATES=12\n"}
    for name, text in records.items():
        (out / name).mkdir()
        (out / name / "quickstart.settings").write_text(text)
        (out / name / ".quickstart-done").touch()
    return {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("changed, said", [
    ({"REWARD": "bleu", "LAMBDA": "1"},  # a REINFORCE setting: another RL_SAVE
     [r"error: \S+/rl was made with other settings \(\S+/rl/quickstart\.settings\): LAMBDA was 0\.005, now 1; "
      r"REWARD was gleu_bp, now bleu\. Run with the recorded ones \(LAMBDA=0\.005 REWARD=gleu_bp\) to use it as it "
      r"is; or set RL_SAVE to another folder in OUT \(e\.g\. RL_SAVE=\S+/rl-2", r"or remove \S+/rl and "]),
    ({"K": "100"},  # the predictor's and CE's: another OUT
     [r"error: \S+/vp was made with other settings \(\S+/vp/quickstart\.settings\): K was 120, now 100\. Run with "
      r"the recorded ones \(K=120\) to use it as it is; or set OUT to another folder",
      r"error: \S+/ce was made with other settings .*: K was 120, now 100\."]),
    ({"SP_VOCAB": "300", "EMPTY_LINES": "drop"},
     [r"error: \S+/data-bin was made with other settings \(\S+/data-bin\.settings\): SP_VOCAB was 200, now 300; "
      r"EMPTY_LINES was fail, now drop\."]),
    ({"CE_UPDATES": "8000"},  # a finished step's budget: deleting its .quickstart-done trains it further
     [r"error: \S+/ce was made with other settings .*: CE_UPDATES was 4000, now 8000\. Run with the recorded ones "
      r"\(CE_UPDATES=4000\) to use it as it is; to train it further, delete \S+/ce/\.quickstart-done"]),
])
def test_a_rerun_with_other_settings_is_refused_by_name_before_anything_runs(tiny_raw, tmp_path, changed, said):
    out = tmp_path / "qs"
    before = _finished(out, tiny_raw.resolve(), TINY["ARCH_ARGS"])
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), **TINY, **changed}
    refused = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env, check=False)
    assert refused.returncode == 2, refused.stderr
    for pattern in said:
        assert re.search(pattern, refused.stderr), refused.stderr
    assert "== 1/8" not in refused.stderr and refused.stdout == ""  # no step started, nothing printed as done
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    # the same settings: nothing refused (the run goes on, here to the missing dictionary of the fake data)
    same = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False,
               env={"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), **TINY})
    assert "other settings" not in same.stderr and "== 1/8" in same.stderr


@pytest.mark.slow
def test_a_step_that_made_nothing_or_is_still_open_takes_new_settings(tiny_raw, tmp_path):
    """A REINFORCE run refused at its start (a reward misspelt) recorded its settings and made nothing: the rerun
    with the right setting goes on. CE stopped before its end takes a larger CE_UPDATES, and the WARMUP that
    follows it (a tenth of it under 4,000): both are its budget."""
    out = tmp_path / "qs"
    _finished(out, tiny_raw.resolve(), TINY["ARCH_ARGS"])
    (out / "rl" / ".quickstart-done").unlink()  # and no checkpoint_last.pt: nothing made
    (out / "ce" / ".quickstart-done").unlink()
    (out / "ce" / "checkpoint_last.pt").write_bytes(b"stopped")
    again = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False,
                env={"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), **TINY, "REWARD": "bleu",
                     "CE_UPDATES": "2000"})
    assert "other settings" not in again.stderr and "== 1/8" in again.stderr, again.stderr


@pytest.mark.slow
@pytest.mark.parametrize("setting, said", [
    ({"K": "abc"}, "K=abc: K, the candidates per sentence, must be a whole number"),
    ({"K": "3"}, "K=3 leaves no room for words beside the target dictionary's 4 special symbols: set K above 4"),
    ({"EMPTY_LINES": "keep"}, "EMPTY_LINES=keep: fail (stop at a sentence pair with an empty side) or drop"),
])
def test_a_bad_k_or_empty_lines_is_refused_by_name_before_anything_is_written(tmp_path, setting, said):
    out = tmp_path / "qs"
    refused = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False,
                  env={"RAW": str(tmp_path / "corpus"), "OUT": str(out), **setting})
    assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert not out.exists()


@pytest.mark.slow
def test_k_not_below_the_dictionary_trains_the_full_softmax_and_empty_lines_can_be_dropped(tiny_raw, tmp_path):
    import shutil

    from fairseq.data import Dictionary

    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw, raw)
    lines = (raw / "train.tgt").read_text().splitlines()
    (raw / "train.tgt").write_text("\n".join(["", *lines[1:]]) + "\n")  # the first pair's target empty
    env = {"RAW": str(raw), "SRC": "src", "TGT": "tgt", **TINY, "K": "100000", "BEAM": "1", "RL_UPDATES": "2"}
    failed = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env={**env, "OUT": str(tmp_path / "a")})
    assert failed.returncode == 2 and "1 empty line(s): line 1" in failed.stderr  # the default: EMPTY_LINES=fail
    assert "in the quick start, EMPTY_LINES=drop leaves the sentence pairs with an empty side out" in failed.stderr
    out = tmp_path / "b"
    done = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env={**env, "OUT": str(out), "EMPTY_LINES": "drop"})
    assert json.loads((out / "data-bin" / "stats.json").read_text())["dropped_pairs"]["train"] == 1
    vocab = len(Dictionary.load(str(out / "data-bin" / "dict.tgt.txt")))
    assert (f"K=100000 is not below the target dictionary's size, |V| = {vocab} ({out}/data-bin/dict.tgt.txt: "
            f"{vocab - 4} entries and 4 special symbols): the full softmax, as fairseq-train does with "
            "--small-vocab-size 100000") in done.stderr
    assert "'small_vocab_size': 0" in (out / "ce.train.log").read_text()
    assert "'small_vocab_size': 0" in (out / "rl.train.log").read_text()
    assert not (out / "vp" / "checkpoint_best.pt").exists() and not (out / "does-it-pay.txt").exists()
    assert (out / "rl" / "ct2" / "model.bin").is_file() and not (out / "rl" / "ct2" / "vmap.txt").exists()
    assert re.search(r"^Verdict \(rl\): ", done.stdout, re.M)


@pytest.mark.slow
def test_where_the_small_softmax_does_not_pay_the_quick_start_trains_the_full_one_and_says_so(tiny_raw, tmp_path):
    """SOFTMAX=auto follows scripts/does_it_pay.py: its measurement forced here (the recorded one, which a run
    with the same settings reuses) to "does not pay", the quick start skips the predictor, trains, tunes, exports
    and judges with the full softmax, and says so; a run that would decide otherwise on that CE is refused."""
    out = tmp_path / "qs"
    out.mkdir()
    arch = " ".join(TINY["ARCH_ARGS"].split())
    (out / "does-it-pay.txt").write_text(f"# ARCH_ARGS={arch} K=120 SAMPLES=4 BEAM=2 THREADS=1 DEVICE=cpu\n"
                                         "|V| = 204, K = 120 (a forced measurement)\n"
                                         "Verdict: the small softmax does not pay on this model here (0.95x)\n")
    (out / "does-it-pay.json").write_text(json.dumps({"verdict": "does not pay", "step_ratio": 0.95, "ceiling": 1.1}))
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), **TINY}
    done = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env)
    assert "The small softmax does not pay here (above): the quick start trains and decodes with the full " \
           "softmax" in done.stderr
    assert "(a forced measurement)" in done.stdout  # the recorded measurement, not a new one
    assert not (out / "vp" / "checkpoint_best.pt").exists() and "skipped: the full softmax" in done.stdout
    for log in ("ce.train.log", "rl.train.log"):
        assert "'small_vocab_size': 0" in (out / log).read_text()
    assert (out / "ce" / "quickstart.softmax").read_text() == "0\n"
    assert re.search(r"^Verdict \(rl\): ", done.stdout, re.M)
    assert not (out / "rl" / "ct2" / "vmap.txt").exists()  # no map: no predictor
    # a measurement that now says "pays" (made again, say, with other threads) would decide K = 120 for the CE
    # model trained full: refused before anything else runs
    (out / "does-it-pay.json").write_text(json.dumps({"verdict": "pays", "step_ratio": 1.5, "ceiling": 1.6}))
    refused = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env=env)
    assert refused.returncode == 2 and f"error: {out / 'ce'} was trained with the full softmax, and today's " \
        "settings decide K = 120" in refused.stderr and "== 3/8" not in refused.stderr


@pytest.mark.slow
def test_compare_full_trains_both_softmaxes_and_the_verdict_answers_both_questions(tiny_raw, tmp_path):
    """COMPARE=full: CE and REINFORCE with K candidates and with the full softmax, each decoded at its own dev
    length penalty; the verdict judges REINFORCE against CE (the small softmax's runs only) and then the small
    softmax against the full one, with BLEU, chrF, p, seconds and the pace lines' speed beside does_it_pay.py's."""
    out = tmp_path / "qs"
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), "COMPARE": "full", **TINY}
    done = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env)
    for name in ("ce-full", "rl-full"):
        assert "'small_vocab_size': 0" in (out / f"{name}.train.log").read_text()
        assert (out / name / "hyp-test.txt").is_file() and (out / name / "quickstart.softmax").read_text() == "0\n"
    assert "'small_vocab_size': 120" in (out / "rl.train.log").read_text()
    assert not (out / "rl-full" / "ct2").exists()  # the export is the tuned small model's alone
    assert re.search(r"^\| rl \| REINFORCE \|", done.stdout, re.M) and "| rl-full |" not in done.stdout
    assert "The small softmax against the full one:" in done.stdout
    for what in ("CE", "REINFORCE"):
        difference = r"[+-][\d.]+ \(p = [\d.]+\)"
        row = rf"^\| {what} \| [\d.]+ \| [\d.]+ \| {difference} \| {difference} \| \d+ / \d+ \| "
        assert re.search(row, done.stdout, re.M), done.stdout
        assert re.search(rf"^Verdict \(softmax, {what}\): the small softmax ", done.stdout, re.M)
    pays = json.loads((out / "does-it-pay.json").read_text())
    predicted = pays["step_ratio"]
    # (REINFORCE's pace line is said within its 12 updates; CE's single tiny epoch ends before its window)
    assert re.search(rf"^Verdict \(softmax, REINFORCE\): .*; its updates [\d.]+x as fast \(scripts/does_it_pay\.py "
                     rf"predicted {predicted:.2f}x: [+-]\d+%\)\.$", done.stdout, re.M), done.stdout
    record = json.loads((out / "verdict.json").read_text())
    assert [row["what"] for row in record["versus_full"]] == ["CE", "REINFORCE"]
    assert record["does_it_pay_step_ratio"] == predicted


@pytest.mark.slow
def test_a_budget_is_planned_after_the_measurement_and_each_training_stops_at_its_time(tiny_raw, tmp_path):
    """BUDGET: the plan printed before the predictor (each step's minutes, the reserve), every training run with
    fairseq-train's --stop-time-hours, REINFORCE's adding the training time fairseq counts from CE's checkpoint;
    a budget with no unit, or one too small for the evaluation, is refused before anything is trained."""
    import torch

    out = tmp_path / "qs"
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), "SOFTMAX": "small", **TINY}
    refused = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env={**env, "BUDGET": "60"})
    assert refused.returncode == 2 and "BUDGET=60: a number and its unit, s, m or h (e.g. 60m" in refused.stderr
    assert not out.exists()
    small = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env={**env, "BUDGET": "90s"})
    assert small.returncode == 2 and re.search(r"error: BUDGET=90s: .* give at least \d+m", small.stderr)
    assert not (out / "vp" / "checkpoint_best.pt").exists() and not (out / "budget.json").exists()
    (out / "rl").mkdir(exist_ok=True)  # (the refused run made the folders)
    (out / "rl" / "checkpoint_1_50.pt").write_bytes(b"an interval checkpoint: a finished run needs none")
    done = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env={**env, "BUDGET": "20m"})
    assert not list((out / "rl").glob("checkpoint_*_*.pt")) and (out / "rl" / "checkpoint_last.pt").is_file()
    plan = json.loads((out / "budget.json").read_text())
    assert plan["steps"] == ["vp", "ce", "rl"] and plan["budget"] == 1200 and plan["caps"]["rl"] == 12
    assert "the plan for BUDGET=20m" in done.stdout and "- CE: " in done.stdout
    assert done.stderr.index("BUDGET=20m: the plan") < done.stderr.index("== 3/8")
    hours = {}
    for name in ("vp", "ce", "rl"):
        found = re.search(r"'stop_time_hours': ([\d.]+)", (out / f"{name}.train.log").read_text())
        assert found, name
        hours[name] = float(found.group(1))
        assert re.search(rf"budget: {re.escape(tb_name(name))} may take ", done.stderr), done.stderr
    parent = torch.load(out / "ce" / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    counted = parent["extra_state"]["previous_training_time"]
    assert counted > 0 and hours["rl"] * 3600 > counted + 30  # its own share on top of what fairseq counts
    assert "which counts the" in done.stderr
    assert re.search(r"^Verdict \(rl\): ", done.stdout, re.M)
    assert "BUDGET=20m" in (out / "ce" / "quickstart.settings").read_text()


def tb_name(step):
    from smallvocab_tools.train.time_budget import NAMES

    return NAMES[step]
