"""One BLEU in every tool (smallvocab_tools/analysis/bleu.py): the same hypotheses score the same in the quick
start's scorer (scripts/bleu.py), its verdict, the length-penalty sweep, the multilingual table and the records'
tools; each prints sacrebleu's signature; subword pieces are refused, not scored."""

import json
import subprocess
import sys

import pytest
from helpers import REPO

from smallvocab_tools.analysis import bleu

# detokenized text whose tokenization matters (attached punctuation: 13a splits it, "none" does not), so a tool
# that scored with another tokenizer would give another number
REFS = ["A dog runs through the park.", "Two men, both smiling, play chess.", "The child's kite is red!",
        "A woman sings on a stage.", "Cars wait at the light."] * 4
HYPS = ["A dog runs in the park.", "Two men play chess, smiling.", "The child's kite is blue!",
        "A woman sings on stage.", "Cars wait at a light."] * 4


def test_the_default_is_sacrebleus_own_and_the_tokenizer_changes_the_number():
    from sacrebleu.metrics import BLEU

    assert BLEU().tokenizer.signature() == bleu.TOKENIZE == "13a"
    with_13a, without = bleu.corpus(HYPS, REFS), bleu.corpus(HYPS, REFS, "none")
    assert with_13a.bleu == pytest.approx(BLEU().corpus_score(HYPS, [REFS]).score)
    assert abs(with_13a.bleu - without.bleu) > 1  # the data tells tokenizers apart
    assert str(with_13a) == f"BLEU {with_13a.bleu:.2f} ({bleu.signature()})" and "|tok:13a|" in str(with_13a)
    assert "|tok:none|" in str(without)


def _folder(path, hyps, lam=None):
    path.mkdir(parents=True)
    (path / "hyp-test.txt").write_text("\n".join(hyps) + "\n")
    (path / "eval.settings").write_text("BEAM=5\nLENPEN=1\n")
    if lam is not None:
        (path / "quickstart.settings").write_text(f"LAMBDA={lam}\n")
    return path


def test_every_tool_scores_the_same_hypotheses_the_same(tmp_path):
    from smallvocab_tools.analysis import lenpen_sweep, paired_bleu, quickstart_verdict, recipe_runs

    want = bleu.corpus(HYPS, REFS).bleu
    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(HYPS) + "\n")
    other = [h.replace("A ", "The ") for h in HYPS]
    # the verdict: both runs, against CE
    rows = quickstart_verdict.compare(_folder(tmp_path / "ce", other), [_folder(tmp_path / "rl", HYPS, 0.005)],
                                      tmp_path / "ref.txt", n_samples=50)
    assert rows[1]["bleu"] == pytest.approx(want) and rows[0]["bleu"] == pytest.approx(bleu.corpus(other, REFS).bleu)
    # the multilingual table
    for name, hyps in (("ce", other), ("rl", HYPS)):
        (tmp_path / f"ml-{name}").mkdir()
        (tmp_path / f"ml-{name}" / "hyp-test.de.txt").write_text("\n".join(hyps) + "\n")
        (tmp_path / f"ml-{name}" / "ref-test.de.txt").write_text("\n".join(REFS) + "\n")
    table = paired_bleu.compare([("ce", tmp_path / "ml-ce"), ("rl", tmp_path / "ml-rl")], "ce", ["de"], 50)
    assert table[1]["bleu"] == round(want, 2)
    # the length-penalty sweep: one hypothesis per sentence, the same at every value
    sentences = {i: lenpen_sweep.Sentence([lenpen_sweep.Hypothesis(-1.0, 3, h)]) for i, h in enumerate(HYPS)}
    assert [row["bleu"] for row in lenpen_sweep.sweep(sentences, [0.6, 1.0], REFS)] == [round(want, 2)] * 2
    # the records' tools
    assert recipe_runs.corpus_scores(tmp_path / "hyp.txt", tmp_path / "ref.txt")[0] == pytest.approx(want)
    # the command the quick start prints each model's test BLEU with
    out = subprocess.run([sys.executable, "scripts/bleu.py", "--ref", tmp_path / "ref.txt", tmp_path / "hyp.txt"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout == f"BLEU {want:.2f} ({bleu.signature()})\n"


def test_the_verdict_prints_the_signature_and_keeps_itself_in_files(tmp_path, capsys):
    from smallvocab_tools.analysis.quickstart_verdict import main

    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n")
    ce = _folder(tmp_path / "ce", [h.replace("A ", "The ") for h in HYPS])
    rl = _folder(tmp_path / "rl", HYPS, 0.005)
    main(["--ce", str(ce), "--runs", str(rl), "--ref", str(tmp_path / "ref.txt"), "--n-samples", "50", "--tokenize",
          "none", "--out", str(tmp_path / "verdict.txt"), "--json", str(tmp_path / "verdict.json")])
    printed = capsys.readouterr().out
    assert f"BLEU: {bleu.signature('none')}" in printed and (tmp_path / "verdict.txt").read_text() == printed
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["rows"][1]["bleu"] == pytest.approx(bleu.corpus(HYPS, REFS, "none").bleu)
    assert record["verdicts"] and record["verdicts"][0] in printed


@pytest.mark.parametrize("which", ["hypotheses", "references"])
def test_pieces_are_refused_by_the_command_naming_the_fix(tmp_path, which):
    pieces = ["\u2581A \u2581dog \u2581run s"] * 3
    words = ["A dog runs"] * 3
    hyps, refs = (pieces, words) if which == "hypotheses" else (words, pieces)
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    out = subprocess.run([sys.executable, "scripts/bleu.py", "--ref", tmp_path / "ref.txt", tmp_path / "hyp.txt"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert "3 of 3 lines hold sentencepiece pieces" in out.stderr and "--post-process sentencepiece" in out.stderr


def test_the_command_refuses_files_that_do_not_pair_and_an_unknown_tokenizer(tmp_path):
    (tmp_path / "hyp.txt").write_text("a\nb\n")
    (tmp_path / "ref.txt").write_text("a\n")
    out = subprocess.run([sys.executable, "scripts/bleu.py", "--ref", tmp_path / "ref.txt", tmp_path / "hyp.txt"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and "2 lines against 1 references: the same number, in the same order" in out.stderr
    out = subprocess.run([sys.executable, "scripts/bleu.py", "--ref", tmp_path / "ref.txt", tmp_path / "hyp.txt",
                          "--tokenize", "moses"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and "invalid choice: 'moses'" in out.stderr and "13a" in out.stderr
