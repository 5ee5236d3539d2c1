"""examples/quickstart/run.sh, the README's quick start, end to end on tiny raw text: sentencepiece with one model
and one dictionary, the predictor and its recall beside the frequency list's, CE inside the candidates with
every embedding shared, REINFORCE, test BLEU of both on the raw references, fairseq-interactive on raw lines and
the CTranslate2 export; run again, it trains nothing and scores the same, and a step not marked finished
goes on from where it stopped."""

import json
import re

import pytest
from helpers import REPO, run

TINY = {"SP_VOCAB": "200", "K": "120", "VP_EPOCHS": "1", "CE_EPOCHS": "1", "RL_UPDATES": "12", "THREADS": "1",
        "BEAM": "2", "ARCH_ARGS": "--arch transformer --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 "
        "--decoder-embed-dim 16 --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
        "--decoder-attention-heads 2 --share-all-embeddings"}


@pytest.mark.slow
def test_the_quick_start_runs_from_raw_text_to_an_exported_model(tiny_raw, tmp_path):
    import sacrebleu

    out = tmp_path / "qs"
    env = {"RAW": str(tiny_raw), "SRC": "src", "TGT": "tgt", "OUT": str(out), **TINY}
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
        printed = re.search(rf"^{re.escape(str(out / name))}: BLEU ([\d.]+) \(lenpen ([\d.]+)\)$", first.stdout, re.M)
        assert printed and float(printed.group(1)) == pytest.approx(bleu, abs=0.051), first.stdout
        # each model decoded test at its own length penalty, the best on dev (LENPEN=dev, the default)
        chosen = json.loads((out / name / "lenpen.json").read_text())
        assert float(printed.group(2)) == chosen["best_lenpen"] and chosen["subset"] == "valid"
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
    row = r"^\| rl \| REINFORCE \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \(p = [\d.]+\) \|$"
    assert re.search(row, first.stdout, re.M)
    assert re.search(r"^Verdict \(rl\): (REINFORCE helped|REINFORCE did not help|inconclusive)", first.stdout, re.M)
    logs = {name: (out / f"{name}.train.log").read_text() for name in ("vp", "ce", "rl")}
    again = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env=env)
    assert {name: (out / f"{name}.train.log").read_text() for name in ("vp", "ce", "rl")} == logs  # nothing retrained
    scores = re.compile(r"^(\S+): BLEU ([\d.]+) \(lenpen ([\d.]+)", re.M)  # each model's test BLEU
    assert scores.findall(again.stdout) == scores.findall(first.stdout) and len(scores.findall(first.stdout)) == 2
    assert "(lenpen" in again.stdout and again.stdout.count("evaluated before") == 2
    # the control, CE continued (LAMBDA=1) in its own folder: the REINFORCE run's export stays as it was, the CE
    # model's evaluation is reused, and the verdict judges REINFORCE against the control
    export = (out / "rl" / "ct2" / "model.bin").read_bytes()
    control = run(["bash", "examples/quickstart/run.sh"], cwd=REPO,
                  env={**env, "LAMBDA": "1", "RL_SAVE": str(out / "ce-continued")})
    assert (out / "rl" / "ct2" / "model.bin").read_bytes() == export
    assert (out / "ce-continued" / "ct2" / "model.bin").is_file()
    assert f"{out / 'ce'}: BLEU" in control.stdout and control.stdout.count("evaluated before") == 1
    assert re.search(r"^\| ce-continued \| CE continued \|", control.stdout, re.M)
    assert re.search(r"^Verdict \(rl\): .* against CE continued", control.stdout, re.M)
    # a finished step says so (FOLDER/.quickstart-done); without it the step's training goes on from its
    # checkpoint_last.pt: here CE for a second epoch, the rest left as they are
    assert all((out / name / ".quickstart-done").is_file() for name in ("vp", "ce", "rl"))
    (out / "ce" / ".quickstart-done").unlink()
    run(["bash", "examples/quickstart/run.sh"], cwd=REPO, env={**env, "CE_EPOCHS": "2"})
    ce_log = (out / "ce.train.log").read_text()
    assert ce_log.startswith(logs["ce"]) and "epoch 002 | valid on 'valid' subset" in ce_log[len(logs["ce"]):]
    assert "epoch 001 | valid on" not in ce_log[len(logs["ce"]):]
    assert (out / "rl.train.log").read_text() == logs["rl"]
    missing = run(["bash", "examples/quickstart/run.sh"], cwd=REPO, check=False, env={"OUT": str(tmp_path / "x")})
    assert missing.returncode != 0 and "RAW: the folder of your train, valid and test" in missing.stderr
