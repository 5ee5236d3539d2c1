"""The multilingual recipe (examples/translation/run_multilingual_multi30k.sh) end to end on tiny data: a
stock multilingual model trained by stock fairseq, a predictor per pair, CE fine-tuning small and full,
REINFORCE and its CE-continued control, every run decoded for both pairs and the table of BLEU per pair with
the paired bootstrap; run again, it trains nothing. And the table's numbers: sacrebleu's."""

import re

import pytest
from helpers import REPO, run
from multilingual_helpers import PAIRS, write_three_way

from smallvocab_tools.analysis.paired_bleu import compare, read

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
    for folder in ("stock", "ce-k0", "ce-k60", "rl-s1", "ctl-ce-s1"):
        for lang in ("de", "fr"):
            hyps = read(out / folder / f"hyp-test.{lang}.txt")
            assert len(hyps) == 30 == len(read(out / folder / f"ref-test.{lang}.txt"))  # every test sentence
            assert not any("__" in h for h in hyps)
    rl, ctl = ((out / name / "train.log").read_text() for name in ("rl-s1", "ctl-ce-s1"))
    assert re.search(r"\breward[ =]\d", rl) and not re.search(r"\breward[ =]\d", ctl)  # the control samples nothing
    stamp = {p: p.stat().st_mtime for p in out.glob("*/checkpoint_last.pt")}
    again = run(["bash", script], cwd=REPO, env=env)  # everything is there: nothing trained again
    assert {p: p.stat().st_mtime for p in out.glob("*/checkpoint_last.pt")} == stamp
    assert again.stdout.count("| ce-k60 |") == 2
