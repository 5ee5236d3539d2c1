"""`make demo`'s script, on a tiny corpus."""

from conftest import REPO, run


def test_demo_script_small(tmp_path):
    result = run(["bash", REPO / "scripts" / "demo.sh"],
                 env={"DEMO_DIR": str(tmp_path / "demo"), "DEMO_VOCAB": "400", "DEMO_TRAIN": "400"})
    assert "dictionary (words, without specials): src=" in result.stdout
    assert "tgt=400" in result.stdout
    assert (tmp_path / "demo" / "data-bin" / "train.src-tgt.tgt.bin").exists()
