"""Shared fixtures (helpers.py holds the rest); the ``slow`` tier; one thread per pytest-xdist worker."""

import os

import pytest
from helpers import CAP, RUNNING, TINY, TRAIN, VP_TRAIN, run

# Several xdist workers (make test: one per core): each worker, and every command it starts, computes with one
# thread. torch's default is one per core, so two workers would run four threads on two cores, whose OpenMP
# threads spin waiting on each other. (Before torch is imported: the test modules import it after this file.)
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")


def pytest_addoption(parser):
    parser.addoption("--order", default="file", metavar="ORDER",
                     help="the order the tests run in: 'file' (as collected, the default), 'reverse', or "
                          "'shuffle:SEED' (a seeded shuffle, the same on every xdist worker). A test that passes in "
                          "one order and fails in another depends on another test's state.")


def reordered(items, order):
    """``items`` in the ``--order`` given: as they are ('file'), reversed, or shuffled by a seed; a
    pytest.UsageError for any other value."""
    if order == "file":
        return list(items)
    if order == "reverse":
        return list(reversed(items))
    kind, _, seed = order.partition(":")
    if kind != "shuffle" or not seed.isdigit():
        raise pytest.UsageError(f"--order {order!r}: use 'file', 'reverse' or 'shuffle:SEED' (SEED an integer, "
                                "e.g. shuffle:1)")
    import random

    shuffled = list(items)
    random.Random(int(seed)).shuffle(shuffled)
    return shuffled


def pytest_collection_modifyitems(config, items):
    """``--order``: reverse or shuffle the collected tests (every xdist worker collects the same order)."""
    items[:] = reordered(items, config.getoption("order"))


@pytest.fixture(autouse=True)
def _torch_threads():
    """Each test starts with this worker's torch threads: a test that sets them (the benchmarks set them for
    their process) leaves them to itself. Left changed, they changed the order of every later test's float sums
    in that worker, and so which tests came out within their tolerances depended on the tests before them."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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


@pytest.fixture(scope="session")
def cap_raw(tmp_path_factory):
    from smallvocab_tools.data.synthetic_captions import write_captions

    out = tmp_path_factory.mktemp("captions") / "raw"
    write_captions(out, TINY)
    return out

@pytest.fixture(scope="session")
def cap_bin(cap_raw, tmp_path_factory):
    from smallvocab_tools.data.caption_prep import prepare_captions

    dest = tmp_path_factory.mktemp("capbin") / "bin"
    prepare_captions(cap_raw, dest, log=lambda m: None)
    return dest

@pytest.fixture(scope="session")
def cap_predictor(cap_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("capvp")
    run(["fairseq-train", cap_bin, *VP_TRAIN, "--source-features", cap_bin, "--save-dir", save])
    return save / "checkpoint_last.pt"

@pytest.fixture(scope="session")
def cap_model(cap_bin, cap_predictor, tmp_path_factory):
    """A small-vocabulary captioner (K = 40), 2 CE epochs, predictor given."""
    save = tmp_path_factory.mktemp("capmodel")
    run(["fairseq-train", cap_bin, *CAP, *TRAIN, "--criterion", "cross_entropy", "--max-epoch", "2",
         "--vocab-predictor", cap_predictor, "--small-vocab-size", "40", "--save-dir", save,
         "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 30}', "--one-caption-per-image"])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def ml_bin(tmp_path_factory):
    """A tiny three-way corpus (en, de, fr) prepared as one multilingual data folder with its shared dictionary."""
    from multilingual_helpers import PAIRS, write_three_way

    from smallvocab_tools.data.multilingual_prep import prepare_multilingual

    folder = tmp_path_factory.mktemp("ml")
    raw = write_three_way(folder / "raw")
    splits = {"train": "train", "valid": "valid", "test": "test"}
    prepare_multilingual(raw, folder / "bin", PAIRS, splits, min_count=1, log=lambda m: None)
    return folder / "bin"
