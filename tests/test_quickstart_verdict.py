"""scripts/quickstart_verdict.py: CE, REINFORCE and CE continued side by side with the paired bootstrap, one
plain sentence per REINFORCE run, and the warning when CE had not converged."""

import random
import re

import pytest

from smallvocab_tools.analysis import bleu

WORDS = "a man in a red shirt is riding a bike down the street while two dogs watch him".split()


def _refs(n=80, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(n)]


def _damaged(refs, share, seed):
    """Each reference with ``share`` of its words replaced by an unseen word."""
    rng = random.Random(seed)
    return [" ".join("zzz" if rng.random() < share else w for w in line.split()) for line in refs]


def _run(folder, hyps, lam=None, lenpen="1.2"):
    folder.mkdir(parents=True)
    (folder / "hyp-test.txt").write_text("\n".join(hyps) + "\n")
    (folder / "eval.settings").write_text(f"BEAM=5\nLENPEN={lenpen}\n")
    if lam is not None:
        (folder / "quickstart.settings").write_text(f"LAMBDA={lam}\nREWARD=gleu_bp\n")
    return folder


def _verdict(tmp_path, runs, ce_hyps, refs):
    from smallvocab_tools.analysis.quickstart_verdict import compare, table, verdicts

    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    ce = _run(tmp_path / "ce", ce_hyps)
    rows = compare(ce, [_run(tmp_path / name, hyps, lam) for name, hyps, lam in runs], tmp_path / "ref.txt",
                   n_samples=200)
    return rows, table(rows), verdicts(rows, len(refs))


def test_a_better_reinforce_run_helped_and_without_a_control_the_verdict_says_what_is_missing(tmp_path):
    import sacrebleu

    refs = _refs()
    ce, rl = _damaged(refs, 0.5, 1), _damaged(refs, 0.1, 2)
    rows, text, said = _verdict(tmp_path, [("rl", rl, 0.005)], ce, refs)
    gain = sacrebleu.corpus_bleu(rl, [refs]).score - sacrebleu.corpus_bleu(ce, [refs]).score
    assert rows[1]["vs_ce"][0] == pytest.approx(gain) and rows[1]["vs_ce"][1] < 0.05
    assert re.search(rf"^\| rl \| REINFORCE \| [\d.]+ \| [\d.]+ \| 1\.000 \| 1\.2 \| \+{gain:.2f} \(p = 0\.\d+\) \| "
                     r"[+-][\d.]+ \(p = [\d.]+\) \|$", text, re.M)
    assert text.endswith(f"BLEU: {bleu.signature()}") and "tok:13a" in text
    assert "| ce | CE |" in text and "vs CE continued" not in text
    assert len(said) == 1 and said[0].startswith(f"Verdict (rl): REINFORCE helped: +{gain:.2f} test BLEU over CE")
    assert "Without the control" in said[0]


def test_with_a_control_reinforce_is_judged_against_it(tmp_path):
    refs = _refs()
    ce = _damaged(refs, 0.5, 1)
    control = _damaged(refs, 0.1, 3)
    rl = _damaged(refs, 0.12, 4)  # better than CE, no better than the control
    rows, text, said = _verdict(tmp_path, [("rl", rl, 0.005), ("ce-continued", control, 1)], ce, refs)
    assert [row["kind"] for row in rows] == ["CE", "REINFORCE", "CE continued"]
    assert rows[1]["vs_ce"][0] > 0 and rows[1]["vs_control"][0] < 0.5 and rows[2]["vs_control"] is None
    assert "vs CE continued |" in text.splitlines()[0]
    assert len(said) == 1 and "against CE continued" in said[0] and "over CE " not in said[0]
    assert "Without the control" not in said[0]
    assert said[0].startswith(("Verdict (rl): inconclusive", "Verdict (rl): REINFORCE did not help"))


def test_a_worse_run_did_not_help_and_an_equal_one_is_inconclusive(tmp_path):
    refs = _refs()
    ce = _damaged(refs, 0.1, 1)
    _, _, said = _verdict(tmp_path / "worse", [("rl", _damaged(refs, 0.5, 2), 0.005)], ce, refs)
    assert said[0].startswith("Verdict (rl): REINFORCE did not help: -")
    _, _, said = _verdict(tmp_path / "same", [("rl", list(ce), 0.005)], ce, refs)
    assert said[0].startswith("Verdict (rl): inconclusive: +0.00 test BLEU against CE, p = ")
    assert "on 80 test sentences" in said[0]


def test_a_short_hypothesis_file_is_refused_by_name(tmp_path):
    refs = _refs()
    with pytest.raises(ValueError, match=r"rl/hyp-test.txt: 79 hypotheses for the 80 references"):
        _verdict(tmp_path, [("rl", refs[:-1], 0.005)], refs, refs)


def _valid(epoch, bleu, best, updates):
    return (f"2026-12-03 20:34:33 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss 3.6 "
            f"| bleu {bleu} | bleu_len_ratio 0.98 | wps 220.8 | num_updates {updates} | best_bleu {best}\n")


@pytest.mark.parametrize("lines, warned", [
    ([_valid(1, 10.0, 10.0, 100), _valid(2, 12.5, 12.5, 200)], True),  # a new best at the last validation
    ([_valid(1, 10.0, 10.0, 100), _valid(2, 9.5, 10.0, 200)], False),  # past its best
    ([_valid(1, 10.0, 10.0, 100), _valid(2, 12.5, 12.5, 200),
      "| INFO | fairseq_cli.train | early stop since valid performance hasn't improved for last 10 runs\n"], False),
    ([_valid(1, 10.0, 10.0, 100)], False),  # one validation: nothing to tell
])
def test_ce_that_stopped_while_dev_bleu_rose_is_warned_about(tmp_path, lines, warned):
    from smallvocab_tools.analysis.quickstart_verdict import ce_not_converged

    log = tmp_path / "ce.train.log"
    log.write_text("".join(lines))
    warning = ce_not_converged(log)
    assert (warning is not None) == warned
    if warned:
        assert "CE stopped at its cap (200 updates) with dev BLEU still rising (its best, 12.50" in warning


def test_the_command_prints_the_table_the_verdict_and_the_warning(tmp_path, capsys):
    from smallvocab_tools.analysis.quickstart_verdict import main

    refs = _refs()
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    _run(tmp_path / "ce", _damaged(refs, 0.5, 1))
    _run(tmp_path / "rl", _damaged(refs, 0.1, 2), 0.005)
    (tmp_path / "ce.train.log").write_text(_valid(1, 10.0, 10.0, 100) + _valid(2, 12.5, 12.5, 200))
    main([str(x) for x in ("--ce", tmp_path / "ce", "--runs", tmp_path / "rl", tmp_path / "ce", "--ref",
                           tmp_path / "ref.txt", "--ce-log", tmp_path / "ce.train.log", "--n-samples", "100")])
    out = capsys.readouterr().out
    assert out.count("| rl | REINFORCE |") == 1 and out.count("| ce | CE |") == 1  # CE among --runs: once
    assert "Verdict (rl): REINFORCE helped" in out and "warning: CE stopped at its cap" in out


@pytest.mark.parametrize("ce, rl, wording", [
    ((0.5, 1), (0.1, 2), "REINFORCE helped"),  # far apart: p = 0.005, the bootstrap's smallest at 200 resamples
    ((0.1, 2), (0.5, 1), "REINFORCE did not help"),
    ((0.3, 3), (0.3, 21), "inconclusive"),  # +0.15 BLEU, p about 0.4
    ((0.3, 1), (0.3, 1), "inconclusive"),  # the same output: sacrebleu's bootstrap alone gives it p = 1/201
])
def test_the_verdicts_wording_follows_the_difference_and_p_it_prints(tmp_path, monkeypatch, ce, rl, wording):
    monkeypatch.setenv("SACREBLEU_SEED", "12345")  # sacrebleu's default: the resamples are fixed
    refs = _refs()
    _, text, said = _verdict(tmp_path, [("rl", _damaged(refs, *rl), 0.005)], _damaged(refs, *ce), refs)
    delta, p = re.search(r"^\| rl \| REINFORCE \|.* \| ([+-][\d.]+) \(p = ([\d.]+)\) \| [+-][\d.]+ \(p = [\d.]+\) \|$",
                         text, re.M).groups()
    assert said[0].startswith(f"Verdict (rl): {wording}: {delta} test BLEU")
    assert f"p = {p}" in said[0]  # the table's numbers, and the verdict's
    significant = float(p) < 0.05
    assert "not significant at 0.05" not in said[0] or not significant
    assert ("REINFORCE helped" in said[0]) == (significant and float(delta) > 0)
    assert ("REINFORCE did not help" in said[0]) == (significant and float(delta) < 0)
    assert (wording == "inconclusive") == (not significant or float(delta) == 0)


def test_with_the_full_softmaxs_arms_the_verdict_compares_the_softmaxes_too(tmp_path, capsys):
    """--full-ce / --full-rl (the quick start's COMPARE=full): a second table, small against full for CE and for
    REINFORCE (BLEU, chrF, p, each training's seconds and seconds per update, read from FOLDER.train.log), and
    one sentence each: a loss the test can tell is said as a loss; each sets the pace lines' speed beside the
    ratio does_it_pay.py predicted for its kind of step, and how far from it the runs' ratio is."""
    import json

    from smallvocab_tools.analysis.quickstart_verdict import main

    refs = _refs()
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    _run(tmp_path / "ce", _damaged(refs, 0.3, 1))
    _run(tmp_path / "rl", _damaged(refs, 0.3, 2), 0.005)
    _run(tmp_path / "ce-full", _damaged(refs, 0.3, 3))
    _run(tmp_path / "rl-full", _damaged(refs, 0.05, 4), 0.005)  # far better: the small softmax lost there
    for name, wall, pace in (("ce", 600, 0.5), ("ce-full", 900, 0.8), ("rl", 100, 0.25), ("rl-full", 300, 1.0)):
        (tmp_path / f"{name}.train.log").write_text(
            f"| INFO | fairseq_smallvocab.compat.pace | pace: {pace:.3f} s/update (updates 2-11; validation and saving "
            f"not included)\nepoch 001 | loss 5.1 | wall {wall // 2} | train_wall 10\n"
            f"epoch 002 | loss 4.9 | wall {wall} | train_wall 20\n")
    (tmp_path / "pays.json").write_text(json.dumps({"verdict": "pays", "step_ratio": 3.6, "ceiling": 4.0,
                                                          "ce_ratio": 2.0}))
    main([str(x) for x in ("--ce", tmp_path / "ce", "--runs", tmp_path / "rl", "--ref", tmp_path / "ref.txt",
                           "--n-samples", "100", "--full-ce", tmp_path / "ce-full", "--full-rl", tmp_path / "rl-full",
                           "--does-it-pay", tmp_path / "pays.json", "--json", tmp_path / "v.json")])
    out = capsys.readouterr().out
    assert "The small softmax against the full one:" in out and "| rl-full |" not in out
    assert re.search(r"^\| CE \| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \(p = [\d.]+\) \| [+-][\d.]+ \(p = [\d.]+\) \| "
                     r"600 / 900 \| 0\.500 / 0\.800 \| 1\.60x \|$", out, re.M), out
    assert re.search(r"^\| REINFORCE \| .* \| 100 / 300 \| 0\.250 / 1\.000 \| 4\.00x \|$", out, re.M), out
    assert re.search(r"^Verdict \(softmax, REINFORCE\): the small softmax lost -[\d.]+ test BLEU against the full "
                     r"softmax \(p = 0\.0\d+\); its updates 4\.00x as fast \(scripts/does_it_pay\.py predicted "
                     r"3\.60x: \+11%\)\.$", out, re.M), out
    assert re.search(r"^Verdict \(softmax, CE\): .*; its updates 1\.60x as fast \(scripts/does_it_pay\.py predicted "
                     r"2\.00x: -20%\)\.$", out, re.M), out
    assert re.search(r"^Verdict \(softmax, CE\): the small softmax (made no BLEU difference the test can tell|gained|"
                     r"lost)", out, re.M)
    record = json.loads((tmp_path / "v.json").read_text())
    assert [r["what"] for r in record["versus_full"]] == ["CE", "REINFORCE"] and record["does_it_pay_step_ratio"] == 3.6
    assert record["does_it_pay_ce_ratio"] == 2.0
    assert record["versus_full"][1]["seconds"] == 100 and record["versus_full"][1]["full_sec_per_update"] == 1.0
