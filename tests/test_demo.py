"""`make demo`'s script, on a tiny corpus."""

from conftest import REPO, run


def test_demo_script_small(tmp_path):
    demo = tmp_path / "demo"
    result = run(["bash", REPO / "scripts" / "demo.sh"],
                 env={"DEMO_DIR": str(demo), "DEMO_VOCAB": "700", "DEMO_TRAIN": "500", "DEMO_VP_EPOCHS": "1"})
    assert "dictionary (words, without specials): src=" in result.stdout
    assert "tgt=700" in result.stdout
    assert (demo / "data-bin" / "train.src-tgt.tgt.bin").exists()
    assert "valid | " in result.stdout and "recall@500" in result.stdout  # K = 500 below 10K words
    assert "| 500 |" in result.stdout and "frequency baseline" in result.stdout
    assert (demo / "predictor" / "checkpoint_best.pt").exists() and (demo / "recall.png").exists()
