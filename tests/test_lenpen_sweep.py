"""scripts/sweep_lenpen.py: one beam search gives, for every length penalty, the
hypotheses fairseq-generate --lenpen gives (the oracle: fairseq-generate run at
each value), their BLEU, the best value printed and recorded; flags the sweep
owns are refused."""

import json
import logging
import os
import re
from pathlib import Path

import pytest
from helpers import REPO, USER_DIR, run

from smallvocab_tools.analysis import bleu, lenpen_sweep
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
               ",".join(lenpens), "--no-widen", "--save-hyps", tmp_path / "hyps", "--", *GENERATE])
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
    assert f"({bleu.signature()})" in out.stdout and record["bleu_signature"] == bleu.signature()
    import sacrebleu  # the recorded BLEU: sacrebleu's (its default 13a), against the T- lines, of the hypotheses

    plain = run(["fairseq-generate", tiny_bin, *GENERATE, "--path", model, "--gen-subset", "valid", "--beam", "4"])
    refs = dict(re.findall(r"^T-(\d+)\t(.*)$", plain.stdout, re.M))
    refs = [refs[str(i)] for i in range(40)]
    for lenpen, hyps in seen.items():
        want = sacrebleu.corpus_bleu(hyps, [refs]).score
        assert rows[float(lenpen)]["bleu"] == pytest.approx(want, abs=0.006), lenpen


@pytest.mark.slow
def test_the_sweep_refuses_flags_it_owns_and_a_beam_of_one(model, tiny_bin, tmp_path):
    for flags, extra, message in (([], ["--lenpen", "1.2"], "--lenpen after '--': the sweep sets it itself; use "
                                                              "--lenpens"),
                                  ([], ["--nbest", "2"], "--nbest after '--'"),
                                  (["--beam", "1"], [], "give --beam >= 2"),
                                  (["--lenpens", "a,b"], [], "--lenpens 'a,b': give comma-separated numbers"),
                                  (["--ref", tmp_path / "none.txt"], [], "no such file"),
                                  (["--out", tmp_path / "gone" / "r.json"], [],
                                   f"--out {tmp_path / 'gone' / 'r.json'}: the folder {tmp_path / 'gone'} does not "
                                   "exist")):
        bad = run([SWEEP, "--path", model, "--data", tiny_bin, *flags, "--", *GENERATE, *extra], check=False)
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr[-2000:]
    (tmp_path / "short.txt").write_text("one line\n")
    bad = run([SWEEP, "--path", model, "--data", tiny_bin, "--ref", tmp_path / "short.txt", "--out",
               tmp_path / "r.json", "--", *GENERATE], check=False)
    assert bad.returncode != 0 and "has 1 lines, the subset 40 sentences" in bad.stderr
    assert not (tmp_path / "r.json").exists()


def test_sacrebleus_tokenization_advice_is_not_repeated_and_scores_stay(caplog, monkeypatch):
    """Tokenized text (a spaced final period) makes sacrebleu advise detokenizing, once per scoring: a sweep (as
    every tool, through the one BLEU, whose signature says the tokenizer) gives none of it, and each value's BLEU
    is sacrebleu's own."""
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
    assert warned == []
    for row in rows:
        want = sacrebleu.corpus_bleu(row["hypotheses"], [refs], tokenize="none", force=True).score
        assert row["bleu"] == round(want, 2)
    assert rows[0]["bleu"] != rows[2]["bleu"]  # the values picked different hypotheses


# -- the outputs, checked before the beam search (in-process: fairseq-generate replaced by a stand-in) ----------

FAKE_GENERATE = "".join(f"T-{i}\ta b c\nH-{i}\t-1.0\ta b\nP-{i}\t-0.5 -0.5 0.0\nH-{i}\t-1.2\ta b c\nP-{i}\t-0.4 -0.4 "
                        "-0.4 0.0\n" for i in range(3))


def _sweep_in_process(monkeypatch, tmp_path, *flags, searched=None, checkpoint="checkpoint_best.pt"):
    """lenpen_sweep.main on ``tmp_path / checkpoint`` with fairseq-generate replaced: ``searched`` (a list) counts
    the beam searches; None: a search fails the test (the command must be refused before it)."""
    import subprocess

    from smallvocab_tools.analysis import lenpen_sweep

    def generate(command, **kwargs):
        if searched is None:
            pytest.fail(f"the beam search started: {command}")
        searched.append(command)
        return subprocess.CompletedProcess(command, 0, FAKE_GENERATE, "")

    monkeypatch.setattr(lenpen_sweep, "subprocess", type("Stand-in", (), {"run": staticmethod(generate)}))
    checkpoint = tmp_path / checkpoint
    if not checkpoint.exists():
        checkpoint.write_bytes(b"not read: fairseq-generate is a stand-in")
    return lenpen_sweep.main(["--path", str(checkpoint), "--data", "data-bin", "--beam", "2", *map(str, flags)])


def _outputs(tmp_path):
    """{case: (flags, what the refusal says)}, the files they meet made in ``tmp_path``."""
    (tmp_path / "checkpoint_best.pt").write_bytes(b"not read: fairseq-generate is a stand-in")
    (tmp_path / "a-file").write_text("x\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's\n")
    (tmp_path / "other.json").write_text('{"not": "a sweep record"}\n')
    d = tmp_path
    return {
        "an existing folder": (["--out", d], f"--out {d}: {d} is a folder; give a file name, e.g. {d / 'lenpen.json'}"),
        "a path under a file": (["--out", d / "a-file" / "r.json"], f"--out {d / 'a-file' / 'r.json'}: {d / 'a-file'}"
                                                                    " is not a folder: it is a file"),
        "a path deeper under a file": (["--out", d / "a-file" / "sub" / "r.json"],
                                       f"the folder {d / 'a-file' / 'sub'} cannot exist: {d / 'a-file'} is not a "
                                       "folder"),
        "a missing folder": (["--out", d / "gone" / "r.json"], f"--out {d / 'gone' / 'r.json'}: the folder "
                                                               f"{d / 'gone'} does not exist; create it"),
        "another file": (["--out", d / "other.json"], f"--out {d / 'other.json'} exists and is not a record of "
                                                      "scripts/sweep_lenpen.py"),
        "the checkpoint": (["--out", d / "checkpoint_best.pt"], f"--out {d / 'checkpoint_best.pt'} exists and is not"
                                                                " a record of scripts/sweep_lenpen.py"),
        "hypotheses into a file": (["--save-hyps", d / "a-file"], f"--save-hyps {d / 'a-file'}: {d / 'a-file'} is "
                                                                  "not a folder: it is a file"),
        "hypotheses under a file": (["--save-hyps", d / "a-file" / "hyps"], f"--save-hyps {d / 'a-file' / 'hyps'}: "
                                                                            f"{d / 'a-file' / 'hyps'} cannot be made"),
        "hypotheses among the user's files": (["--save-hyps", d / "mine"], f"--save-hyps {d / 'mine'} holds 1 file(s)"
                                                                           " this sweep does not write: notes.txt"),
    }


@pytest.mark.parametrize("case", ["an existing folder", "a path under a file", "a path deeper under a file",
                                  "a missing folder", "another file", "the checkpoint", "hypotheses into a file",
                                  "hypotheses under a file", "hypotheses among the user's files"])
def test_the_sweep_refuses_outputs_it_cannot_write_before_the_beam_search(monkeypatch, tmp_path, case):
    """An --out that is a folder, lies under a file or in a missing folder, or is a file other than a sweep's
    record (the checkpoint given by mistake), and a --save-hyps that is a file, lies under one, or holds files
    that are not the sweep's own hypotheses: refused naming the path and the fix,
    before the beam search, nothing written."""
    flags, message = _outputs(tmp_path)[case]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        _sweep_in_process(monkeypatch, tmp_path, *flags)
    assert message in str(exit_.value.code)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written
    assert (tmp_path / "checkpoint_best.pt").read_bytes().startswith(b"not read")


def test_the_sweep_refuses_a_folder_it_cannot_write_before_the_beam_search(monkeypatch, tmp_path):
    """A read-only folder, for --out and for --save-hyps (a folder there, or one to make in it).  Denied by the
    permission check itself: the tests run as root, whom a read-only mode does not stop."""
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and real(path, mode))
    for flags, message in ((["--out", locked / "r.json"], f"--out {locked / 'r.json'}: the folder {locked} is not "
                                                          "writable"),
                           (["--save-hyps", locked], f"--save-hyps {locked}: the folder {locked} is not writable"),
                           (["--save-hyps", locked / "hyps"], f"--save-hyps {locked / 'hyps'}: {locked / 'hyps'} "
                                                              f"cannot be made: the folder {locked} is not writable")):
        with pytest.raises(SystemExit) as exit_:
            _sweep_in_process(monkeypatch, tmp_path, *flags)
        assert message in str(exit_.value.code)
    assert list(locked.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_the_sweep_refuses_a_read_only_folder_before_the_beam_search(monkeypatch, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(SystemExit) as exit_:
            _sweep_in_process(monkeypatch, tmp_path, "--out", locked / "r.json")
        assert f"the folder {locked} is not writable" in str(exit_.value.code)
    finally:
        locked.chmod(0o755)


def test_a_rerun_into_the_same_outputs_replaces_them(monkeypatch, tmp_path):
    """The quick start and decode_multi30k.sh sweep again into the same --out (a retrained checkpoint, another
    CKPT, other --lenpens): an earlier sweep's record is replaced, as are its hypotheses at the same values."""
    searched = []
    out, hyps = tmp_path / "lenpen.json", tmp_path / "hyps"
    first = _sweep_in_process(monkeypatch, tmp_path, "--out", out, "--save-hyps", hyps, "--lenpens", "0.5,2",
                              "--no-widen", searched=searched)
    assert json.loads(out.read_text()) == first and sorted(p.name for p in hyps.iterdir()) == [
        "hyp.lenpen0.5.txt", "hyp.lenpen2.txt"]
    again = _sweep_in_process(monkeypatch, tmp_path, "--out", out, "--save-hyps", hyps, "--lenpens", "0.5,2",
                              "--no-widen", searched=searched)
    last = _sweep_in_process(monkeypatch, tmp_path, "--out", out, "--lenpens", "1,1.5", "--no-widen",
                             searched=searched, checkpoint="checkpoint_avg.pt")
    assert len(searched) == 3 and again == first
    assert json.loads(out.read_text()) == last and [r["lenpen"] for r in last["sweep"]] == [1.0, 1.5]
    assert last["checkpoint"] == str(tmp_path / "checkpoint_avg.pt")


def _sentences(choices):
    """Sentences of two finished hypotheses each, (score, length, text): what ``parse_generate`` gives."""
    return {i: lenpen_sweep.Sentence([lenpen_sweep.Hypothesis(*h) for h in hyps]) for i, hyps in enumerate(choices)}


def test_a_best_at_the_grids_edge_widens_it_until_the_best_is_inside():
    """A long hypothesis (the reference) whose sum needs a large penalty to win: the given grid's best is its
    largest value, so the grid grows past it a spacing at a time (the same hypotheses, rescored) until the best
    lies inside; ``--no-widen`` keeps the grid.  Each added value's BLEU is that value's hypotheses' own."""
    ref = "a man rides a red bike down the street"
    short = "a man rides"
    # sum -3 over 4 tokens against -9 over 10: the long one wins where 10 ** p / 4 ** p > 3, p > 1.2
    sentences = _sentences([[(-3.0, 4, short), (-9.0, 10, ref)]] * 4)
    rows, tried = lenpen_sweep.widened(sentences, [0.6, 0.8, 1.0], [ref] * 4)
    assert tried[:3] == [0.6, 0.8, 1.0] and tried[3:] == pytest.approx([1.2, 1.4]) and len(rows) == 5
    chosen = lenpen_sweep.best(rows)  # 1.2 and 1.4 tie at 100: the one closer to 1, now inside the grid
    assert chosen["lenpen"] == pytest.approx(1.2) and chosen["bleu"] == 100.0
    assert [row["lenpen"] for row in rows] == sorted(row["lenpen"] for row in rows)
    assert rows[2]["bleu"] < 100.0 and rows[4]["bleu"] == 100.0
    assert rows[3]["hypotheses"] == lenpen_sweep.sweep(sentences, [1.2], [ref] * 4)[0]["hypotheses"] == [ref] * 4
    # the smallest edge: the short one is the reference, wins below; the grid grows downwards
    sentences = _sentences([[(-3.0, 4, short), (-2.9, 10, ref)]] * 4)
    rows, tried = lenpen_sweep.widened(sentences, [1.0, 1.5, 2.0], [short] * 4)
    assert tried[0] < 1.0 and lenpen_sweep.best(rows)["lenpen"] > tried[0]


def test_a_best_still_at_the_edge_after_the_widening_stops_there():
    """BLEU rising with the penalty for longer than the widening goes (sentence i takes its long hypothesis, the
    reference, above a penalty of 1.15 + 0.1 i): the grid grows by MAX_WIDENING values, the best its last."""
    ref = "a b c d e f g h i j"
    sentences = _sentences([[(-3.0, 4, "a b c"), (-3.0 * 2.5 ** (1.15 + 0.1 * i), 10, ref)] for i in range(30)])
    rows, tried = lenpen_sweep.widened(sentences, [1.2, 1.3], [ref] * 30)
    assert len(tried) == 2 + lenpen_sweep.MAX_WIDENING and lenpen_sweep.best(rows)["lenpen"] == tried[-1]
    assert [row["bleu"] for row in rows] == sorted(row["bleu"] for row in rows) and rows[0]["bleu"] < rows[-1]["bleu"]


def test_pieces_are_never_scored_and_the_refusal_names_the_fix():
    """sentencepiece's pieces (fairseq-generate without --post-process) score near 0 for every value: refused,
    naming --post-process sentencepiece; references of pieces too."""
    pieces = "\u2581a \u2581man \u2581ri des"
    sentences = _sentences([[(-1.0, 4, pieces), (-2.0, 5, pieces + " \u2581x")]] * 3)
    with pytest.raises(ValueError, match="pass --post-process sentencepiece"):
        lenpen_sweep.sweep(sentences, [1.0], ["a man rides"] * 3)
    words = _sentences([[(-1.0, 4, "a man rides"), (-2.0, 5, "a man rides x")]] * 3)
    with pytest.raises(ValueError, match="the references: 3 of 3 lines hold sentencepiece pieces"):
        lenpen_sweep.sweep(words, [1.0], [pieces] * 3)


def test_the_sweep_refuses_pieces_from_fairseq_generate_as_a_user_runs_it(monkeypatch, tmp_path):
    """The command as the docs showed it, on sentencepiece data (no --post-process): an error naming the fix,
    no record written."""
    import subprocess

    pieces = "".join(f"T-{i}\t\u2581a \u2581b\nH-{i}\t-1.0\t\u2581a \u2581b\nP-{i}\t-0.5 -0.5 0.0\n" for i in range(3))
    monkeypatch.setattr(lenpen_sweep, "subprocess", type("Stand-in", (), {"run": staticmethod(
        lambda command, **kwargs: subprocess.CompletedProcess(command, 0, pieces, ""))}))
    (tmp_path / "checkpoint_best.pt").write_bytes(b"not read")
    with pytest.raises(SystemExit) as exit_:
        lenpen_sweep.main(["--path", str(tmp_path / "checkpoint_best.pt"), "--data", "d", "--beam", "2"])
    assert "--post-process sentencepiece" in str(exit_.value.code)
    assert not (tmp_path / "checkpoint_best.lenpen-valid.json").exists()


def test_a_rerun_into_the_same_hypotheses_folder_replaces_the_earlier_sweeps_files(monkeypatch, tmp_path):
    """An earlier sweep's hyp.lenpenV.txt at a value this one does not try (a widened grid's) is removed, so the
    folder holds this sweep's values only; the user's other files are refused (above)."""
    (tmp_path / "hyps").mkdir()
    (tmp_path / "hyps" / "hyp.lenpen0.4.txt").write_text("an earlier sweep's\n")
    _sweep_in_process(monkeypatch, tmp_path, "--lenpens", "0.6,1,1.5", "--no-widen", "--save-hyps",
                      tmp_path / "hyps", searched=[])
    assert sorted(p.name for p in (tmp_path / "hyps").iterdir()) == ["hyp.lenpen0.6.txt", "hyp.lenpen1.5.txt",
                                                                    "hyp.lenpen1.txt"]
