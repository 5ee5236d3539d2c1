"""Shared fixtures (helpers.py holds the rest); the ``slow`` tier."""

import pytest
from helpers import RUNNING, VP_TRAIN, run


def pytest_runtest_setup(item):
    """Before the test's fixtures: whether it may run subprocesses (helpers.run)."""
    RUNNING["slow"] = item.get_closest_marker("slow") is not None


@pytest.fixture(scope="session")
def tiny_raw(tmp_path_factory):
    """A small synthetic corpus (raw text), shared by the tests that only read it."""
    from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus

    out = tmp_path_factory.mktemp("corpus") / "raw"
    write_corpus(out, SyntheticConfig(tgt_vocab_size=300, train_size=400, valid_size=40, test_size=30))
    return out


@pytest.fixture(scope="session")
def tiny_bin(tiny_raw, tmp_path_factory):
    """``tiny_raw`` binarized with every word kept."""
    from smallvocab_tools.data.prep import prepare

    dest = tmp_path_factory.mktemp("bin") / "data-bin"
    splits = {"train": "train", "valid": "valid", "test": "test"}
    prepare(tiny_raw, dest, "src", "tgt", splits, min_count=1, log=lambda m: None)
    return dest


@pytest.fixture(scope="session")
def predictor(tiny_bin, tmp_path_factory):
    """A vocabulary predictor trained for 2 epochs on ``tiny_bin``."""
    save = tmp_path_factory.mktemp("vp")
    run(["fairseq-train", tiny_bin, *VP_TRAIN, "--save-dir", save])
    return save / "checkpoint_last.pt"
