"""scripts/sweep_lenpen.py: one beam search gives, for every length penalty, the
hypotheses fairseq-generate --lenpen gives (the oracle: fairseq-generate run at
each value), their BLEU, the best value printed and recorded; flags the sweep
owns are refused."""

import json
import logging
import re

import pytest
from helpers import REPO, USER_DIR, run

from smallvocab_tools.analysis.lenpen_sweep import Hypothesis, Sentence, sweep

SWEEP = REPO / "scripts" / "sweep_lenpen.py"
TRAIN = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--embed-dim",
         "16", "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "0.01", "--batch-size", "32",
         "--max-epoch", "2", "--cpu", "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints",
         "--small-vocab-size", "0"]
GENERATE = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--cpu", "--batch-size", "16",
            "--max-len-b", "30", "--small-vocab-size", "0"]


@pytest.fixture(scope="module")
def model(tiny_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("lenpen")
    run(["fairseq-train", tiny_bin, *TRAIN, "--save-dir", save])
    return save / "checkpoint_last.pt"


def _hypotheses(stdout):
    found = {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}
    return [found[i] for i in sorted(found)]


@pytest.mark.slow
def test_one_beam_search_gives_every_lenpens_hypotheses_as_fairseq_generate(model, tiny_bin, tmp_path):
    lenpens = ["0.1", "1", "4"]
    out = run([SWEEP, "--path", model, "--data", tiny_bin, "--beam", "4", "--subset", "valid", "--lenpens",
               ",".join(lenpens), "--save-hyps", tmp_path / "hyps", "--", *GENERATE])
    record = json.loads((model.parent / "checkpoint_last.lenpen-valid.json").read_text())
    seen = {}
    for lenpen in lenpens:
        want = _hypotheses(run(["fairseq-generate", tiny_bin, *GENERATE, "--path", model, "--gen-subset", "valid",
                                "--beam", "4", "--lenpen", lenpen]).stdout)
        got = (tmp_path / "hyps" / f"hyp.lenpen{float(lenpen):g}.txt").read_text().splitlines()
        assert len(got) == 40 and got == want, lenpen
        seen[lenpen] = got
    # the penalty matters here: a small one favours short hypotheses, a large one long ones
    lengths = {lp: sum(len(h.split()) for h in hyps) for lp, hyps in seen.items()}
    assert lengths["0.1"] <= lengths["1"] <= lengths["4"] and lengths["0.1"] < lengths["4"], lengths
    rows = {row["lenpen"]: row for row in record["sweep"]}
    assert sorted(rows) == [0.1, 1.0, 4.0] and record["sentences"] == 40 and record["beam"] == 4
    assert rows[0.1]["len_ratio"] <= rows[1.0]["len_ratio"] <= rows[4.0]["len_ratio"] and \
        rows[0.1]["len_ratio"] < rows[4.0]["len_ratio"]
    chosen = max(rows.values(), key=lambda r: (r["bleu"], -abs(r["lenpen"] - 1)))
    assert record["best_lenpen"] == chosen["lenpen"] and record["best_bleu"] == chosen["bleu"]
    assert f"best --lenpen {chosen['lenpen']:g}: valid BLEU {chosen['bleu']:.2f}" in out.stdout
    assert record["best_at_edge"] == (chosen["lenpen"] in (0.1, 4.0))
    assert ("widen --lenpens" in out.stderr) == record["best_at_edge"]
    import sacrebleu  # the recorded BLEU: sacrebleu's, against the T- lines, of the hypotheses written

    plain = run(["fairseq-generate", tiny_bin, *GENERATE, "--path", model, "--gen-subset", "valid", "--beam", "4"])
    refs = dict(re.findall(r"^T-(\d+)\t(.*)$", plain.stdout, re.M))
    refs = [refs[str(i)] for i in range(40)]
    for lenpen, hyps in seen.items():
        want = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
        assert rows[float(lenpen)]["bleu"] == pytest.approx(want, abs=0.006), lenpen


@pytest.mark.slow
def test_the_sweep_refuses_flags_it_owns_and_a_beam_of_one(model, tiny_bin, tmp_path):
    for flags, extra, message in (([], ["--lenpen", "1.2"], "--lenpen after '--': the sweep sets it itself; use "
                                                              "--lenpens"),
                                  ([], ["--nbest", "2"], "--nbest after '--'"),
                                  (["--beam", "1"], [], "give --beam >= 2"),
                                  (["--lenpens", "a,b"], [], "--lenpens 'a,b': give comma-separated numbers"),
                                  (["--ref", tmp_path / "none.txt"], [], "no such file"),
                                  (["--out", tmp_path / "gone" / "r.json"], [], f"--out: the folder {tmp_path / 'gone'}"
                                                                              " does not exist")):
        bad = run([SWEEP, "--path", model, "--data", tiny_bin, *flags, "--", *GENERATE, *extra], check=False)
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr[-2000:]
    (tmp_path / "short.txt").write_text("one line\n")
    bad = run([SWEEP, "--path", model, "--data", tiny_bin, "--ref", tmp_path / "short.txt", "--out",
               tmp_path / "r.json", "--", *GENERATE], check=False)
    assert bad.returncode != 0 and "has 1 lines, the subset 40 sentences" in bad.stderr
    assert not (tmp_path / "r.json").exists()


def test_sacrebleus_tokenization_warning_comes_once_per_sweep_and_scores_stay(caplog, monkeypatch):
    """Tokenized text (a spaced final period) makes sacrebleu warn; a sweep warns once, not once per value, and
    each value's BLEU is sacrebleu's own."""
    import sacrebleu

    from fairseq_smallvocab.compat.quiet_logs import OncePerMessage

    # the sweep's own behaviour: without the plugin's once-per-process filter (which an earlier test may have fed)
    logger = logging.getLogger("sacrebleu")
    monkeypatch.setattr(logger, "filters", [f for f in logger.filters if not isinstance(f, OncePerMessage)])
    refs = [f"a man number {i} rides a horse ." for i in range(120)]
    sentences = {i: Sentence([Hypothesis(-1.0, 8, f"a man number {i} rides ."),
                              Hypothesis(-1.2, 16, f"a man number {i} rides a horse .")]) for i in range(120)}
    with caplog.at_level(logging.WARNING):
        rows = sweep(sentences, [0.0, 1.0, 3.0], refs, "none")
    warned = [r for r in caplog.records if "tokenized period" in r.getMessage()]
    assert len(warned) == 1
    for row in rows:
        want = sacrebleu.corpus_bleu(row["hypotheses"], [refs], tokenize="none", force=True).score
        assert row["bleu"] == round(want, 2)
    assert rows[0]["bleu"] != rows[2]["bleu"]  # the values picked different hypotheses
