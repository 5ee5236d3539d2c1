"""The multilingual recipe (examples/translation/run_multilingual_multi30k.sh) end to end on tiny data: a
stock multilingual model trained by stock fairseq, a predictor per pair, CE fine-tuning small and full,
REINFORCE and its CE-continued control, every run decoded for both pairs and the table of BLEU per pair with
the paired bootstrap; run again, it trains nothing. And the table's numbers: sacrebleu's."""

import re

import pytest
from helpers import REPO, run
from multilingual_helpers import PAIRS, write_three_way

from smallvocab_tools.analysis.paired_bleu import compare, main, read, versus

TINY = ("--arch transformer --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
        "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
        "--decoder-attention-heads 2 --share-all-embeddings")


def test_paired_bleu_is_sacrebleus(tmp_path):
    import sacrebleu

    refs = ["a man is riding a bike .", "two dogs play in the snow .", "a woman sings ."]
    runs = {"base": ["a man rides a bike .", "two dogs in snow .", "a woman sings ."],
            "other": ["a man is riding a bike .", "two dogs play in the snow .", "a woman is singing ."]}
    for name, hyps in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "hyp-test.de.txt").write_text("\n".join(hyps) + "\n")
        (tmp_path / name / "ref-test.de.txt").write_text("\n".join(refs) + "\n")
    rows = compare([(n, tmp_path / n) for n in runs], "base", ["de"], n_samples=100)
    by = {r["run"]: r for r in rows}
    for name, hyps in runs.items():
        assert by[name]["bleu"] == pytest.approx(round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2))
    assert by["base"]["p"] is None and 0 <= by["other"]["p"] <= 1
    assert by["other"]["delta"] == pytest.approx(by["other"]["bleu"] - by["base"]["bleu"], abs=0.011)
    (tmp_path / "other" / "hyp-test.de.txt").write_text("one line\n")
    with pytest.raises(ValueError, match="1 hypotheses for 3 references"):
        compare([(n, tmp_path / n) for n in runs], "base", ["de"])
    assert read(tmp_path / "base" / "ref-test.de.txt") == refs


def test_versus_compares_two_runs_alone(tmp_path, capsys):
    """--versus RUN=OTHER: RUN's BLEU minus OTHER's and the bootstrap of RUN against OTHER only (the baseline
    and the other runs play no part), for each language."""
    import sacrebleu

    refs = ["a man is riding a bike .", "two dogs play in the snow .", "a woman sings .", "a cat sleeps ."]
    runs = {"ce": ["a man .", "dogs .", "a woman .", "a cat ."],
            "ctl": ["a man rides a bike .", "two dogs in snow .", "a woman sings .", "a cat is sleeping ."],
            "rl": ["a man is riding a bike .", "two dogs play in the snow .", "a woman is singing .", "a cat ."]}
    for name, hyps in runs.items():
        (tmp_path / name).mkdir()
        for lang in ("de", "fr"):
            (tmp_path / name / f"hyp-test.{lang}.txt").write_text("\n".join(hyps) + "\n")
            (tmp_path / name / f"ref-test.{lang}.txt").write_text("\n".join(refs) + "\n")
    folders = [(n, tmp_path / n) for n in runs]
    rows = versus(folders, [("rl", "ctl")], ["de", "fr"], n_samples=100)
    bleu = {n: sacrebleu.corpus_bleu(h, [refs]).score for n, h in runs.items()}
    assert [(r["run"], r["other"], r["lang"]) for r in rows] == [("rl", "ctl", "de"), ("rl", "ctl", "fr")]
    for r in rows:
        assert r["delta"] == pytest.approx(round(bleu["rl"] - bleu["ctl"], 2))
        assert 0 <= r["p"] <= 1
    with pytest.raises(ValueError, match="'nope' is not among the runs"):
        versus(folders, [("rl", "nope")], ["de"])
    args = [a for n in runs for a in ("--run", f"{n}={tmp_path / n}")]
    main(args + ["--baseline", "ce", "--versus", "rl=ctl", "--langs", "de", "--n-samples", "50",
                 "--out", str(tmp_path / "table.md")])
    text = (tmp_path / "table.md").read_text()
    assert f"| rl | ctl | de | {bleu['rl'] - bleu['ctl']:+.2f} |" in text and "| rl | de |" in text
    with pytest.raises(SystemExit):
        main(args + ["--baseline", "ce", "--versus", "rl", "--langs", "de"])
    assert "--versus 'rl': give RUN=OTHER" in capsys.readouterr().err


@pytest.mark.slow
def test_the_multilingual_recipe_end_to_end(tmp_path):
    from smallvocab_tools.data.multilingual_prep import prepare_multilingual

    raw = write_three_way(tmp_path / "raw")
    data = tmp_path / "bin"
    prepare_multilingual(raw, data, PAIRS, {"train": "train", "valid": "valid", "test": "test"}, min_count=1,
                         log=lambda m: None)
    out = tmp_path / "runs"
    env = {"DATA": str(data), "OUT": str(out), "K": "60", "SEEDS": "1", "STOCK_EPOCHS": "3", "VP_EPOCHS": "2",
           "FT_EPOCHS": "1", "RL_UPDATES": "2", "BEAM": "2", "THREADS": "1", "MAX_TOKENS": "2000", "ARCH_ARGS": TINY}
    script = str(REPO / "examples/translation/run_multilingual_multi30k.sh")
    result = run(["bash", script], cwd=REPO, env=env)
    assert "predictor en-de, best val recall@60" in result.stdout
    runs = ["ce-k60", "stock", "ce-full", "rl-s1", "ctl-ce-s1"]
    table = (out / "table.md").read_text()
    for name in runs:
        for lang in ("de", "fr"):
            assert f"| {name} | {lang} |" in table
    for lang in ("de", "fr"):
        assert f"| rl-s1 | ctl-ce-s1 | {lang} |" in table  # REINFORCE against its own control
    for folder in ("stock", "ce-k0", "ce-k60", "rl-s1", "ctl-ce-s1"):
        for lang in ("de", "fr"):
            hyps = read(out / folder / f"hyp-test.{lang}.txt")
            assert len(hyps) == 30 == len(read(out / folder / f"ref-test.{lang}.txt"))  # every test sentence
            assert not any("__" in h for h in hyps)
    rl, ctl = ((out / name / "train.log").read_text() for name in ("rl-s1", "ctl-ce-s1"))
    assert re.search(r"\breward[ =]\d", rl)
    # the control samples nothing in training; on validation it samples, so its reward compares with REINFORCE's
    ctl_train = [line for line in ctl.splitlines() if "valid on" not in line]
    assert not any(re.search(r"\breward[ =]\d", line) for line in ctl_train)
    assert any(re.search(r"\breward[ =]\d", line) for line in ctl.splitlines() if "valid on" in line)
    stamp = {p: p.stat().st_mtime for p in out.glob("*/checkpoint_last.pt")}
    again = run(["bash", script], cwd=REPO, env=env)  # everything is there: nothing trained again
    assert {p: p.stat().st_mtime for p in out.glob("*/checkpoint_last.pt")} == stamp
    assert again.stdout.count("| ce-k60 |") == 2
