"""Data preparation: checks, atomic output, subwords, fairseq binarization."""

import json
import shutil

import pytest
from conftest import MULTI30K, REPO, run

from fairseq_smallvocab import prep

SPLITS = {"train": "train", "valid": "valid", "test": "test"}
PREPARE = REPO / "scripts" / "prepare_data.py"
MULTI = REPO / "scripts" / "prepare_multi30k.py"


def _write(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _copy_raw(tiny_raw, dest):
    shutil.copytree(tiny_raw, dest)
    return dest


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_binarized_output_matches_text(tiny_bin, tiny_raw):
    from fairseq.data import Dictionary, data_utils

    stats = json.loads((tiny_bin / "stats.json").read_text())
    tgt_dict = Dictionary.load(str(tiny_bin / "dict.tgt.txt"))
    for split in ("train", "valid", "test"):
        lines = (tiny_raw / f"{split}.tgt").read_text().splitlines()
        ds = data_utils.load_indexed_dataset(str(tiny_bin / f"{split}.src-tgt.tgt"), tgt_dict)
        assert len(ds) == len(lines) == stats["splits"][split]["tgt"]["sentences"]
        assert tgt_dict.string(ds[0]) == lines[0]
        assert (tiny_bin / "raw" / f"{split}.tgt").read_text().splitlines() == lines
    # every word kept (min_count 1): the dictionary is the lexicon's 300 words
    assert stats["dictionary_words"]["tgt"] == 300
    assert stats["splits"]["test"]["tgt"]["oov_rate"] == 0.0


def test_min_count_two_maps_rare_words_to_unk(tiny_raw, tmp_path):
    stats = prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=2, log=lambda m: None)
    train = (tiny_raw / "train.tgt").read_text().split()
    twice = {w for w in set(train) if train.count(w) >= 2}
    assert stats["dictionary_words"]["tgt"] == len(twice)
    assert stats["splits"]["train"]["tgt"]["oov_rate"] > 0


def test_missing_file_is_named_and_nothing_is_written(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    (raw / "valid.tgt").unlink()
    with pytest.raises(prep.DataError, match=r"missing input file: .*valid\.tgt"):
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    assert not (tmp_path / "bin").exists() and not _leftovers(tmp_path)


def test_line_count_mismatch_names_both_files(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "test.src").read_text().splitlines()
    _write(raw, "test.src", lines[:-2])
    with pytest.raises(prep.DataError) as err:
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    message = str(err.value)
    assert f"test.src has {len(lines) - 2} lines" in message and f"test.tgt has {len(lines)}" in message
    assert not (tmp_path / "bin").exists()


def test_empty_lines_fail_with_file_and_line_numbers(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "train.tgt").read_text().splitlines()
    lines[4] = ""
    lines[9] = "   "
    _write(raw, "train.tgt", lines)
    with pytest.raises(prep.DataError) as err:
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    message = str(err.value)
    assert "2 empty line(s)" in message
    assert "line 5 (" in message and "line 10 (" in message and "train.tgt" in message
    assert "--empty-lines drop" in message
    assert not (tmp_path / "bin").exists()


def test_empty_lines_dropped_with_count(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.src").read_text().splitlines()
    n = len(lines)
    lines[0] = ""
    _write(raw, "valid.src", lines)
    logged = []
    stats = prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, empty_lines="drop",
                         log=logged.append)
    assert stats["dropped_pairs"]["valid"] == 1
    assert stats["splits"]["valid"]["src"]["sentences"] == n - 1
    assert any("dropped 1 sentence pair" in m for m in logged)
    kept_tgt = (tmp_path / "bin" / "raw" / "valid.tgt").read_text().splitlines()
    assert kept_tgt == (raw / "valid.tgt").read_text().splitlines()[1:]  # alignment kept


def test_failure_midway_leaves_no_complete_looking_folder(tiny_raw, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise prep.DataError("fairseq-preprocess failed (simulated)")

    monkeypatch.setattr(prep, "fairseq_preprocess", broken)
    with pytest.raises(prep.DataError, match="simulated"):
        prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force_and_is_replaced_only_when_complete(tiny_raw, tmp_path, monkeypatch):
    dest = tmp_path / "bin"
    prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    with pytest.raises(prep.DataError, match="already exists.*--force"):
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS)
    before = (dest / "dict.tgt.txt").read_text()
    monkeypatch.setattr(prep, "fairseq_preprocess", lambda *a, **k: (_ for _ in ()).throw(prep.DataError("boom")))
    with pytest.raises(prep.DataError, match="boom"):
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, force=True)
    assert (dest / "dict.tgt.txt").read_text() == before  # the old output is intact
    assert not _leftovers(tmp_path)


def test_sentencepiece_subwords_round_trip_through_fairseq_post_process(tiny_raw, tmp_path):
    from fairseq.data import Dictionary, data_utils

    dest = tmp_path / "sp"
    stats = prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, subword="sentencepiece",
                         sp_vocab_size=200, log=lambda m: None)
    assert (dest / "spm.src.model").exists() and (dest / "spm.tgt.model").exists()
    assert stats["min_count"] == 1 and stats["subword"] == "sentencepiece"
    tgt_dict = Dictionary.load(str(dest / "dict.tgt.txt"))
    ds = data_utils.load_indexed_dataset(str(dest / "test.src-tgt.tgt"), tgt_dict)
    reference = (tiny_raw / "test.tgt").read_text().splitlines()
    pieces = tgt_dict.string(ds[3])
    assert "\u2581" in pieces and pieces != reference[3]
    # what fairseq-generate --post-process sentencepiece does
    assert tgt_dict.string(ds[3], "sentencepiece") == reference[3]


def test_cli_reports_errors_with_exit_code_2(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    (raw / "train.src").unlink()
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", tmp_path / "bin"],
                 check=False)
    assert result.returncode == 2
    assert "error: missing input file" in result.stderr and "train.src" in result.stderr
    assert not (tmp_path / "bin").exists()


def test_cli_prints_statistics(tiny_raw, tmp_path):
    result = run([PREPARE, "--raw-dir", tiny_raw, "--src", "src", "--tgt", "tgt", "--dest",
                  tmp_path / "bin", "--min-count", "1"])
    assert "dictionary (words, without specials): src=" in result.stdout
    assert "Zipf slope" in result.stdout


def _fake_official_repo(tiny_raw, folder):
    """Files named as in the Multi30k repository, from the tiny corpus."""
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for ours_lang, lang in (("src", "en"), ("tgt", "de")):
            shutil.copy(tiny_raw / f"{ours}.{ours_lang}", folder / f"{theirs}.lc.norm.tok.{lang}")


def test_multi30k_download_path(tiny_raw, tmp_path):
    official = tmp_path / "official"
    official.mkdir()
    _fake_official_repo(tiny_raw, official)
    result = run([MULTI, "--download", "--download-url", official.as_uri(), "--out-dir", tmp_path / "out",
                  "--min-count", "1"])
    dest = tmp_path / "out" / "multi30k.en-de"
    assert (dest / "dict.de.txt").exists() and (dest / "test.en-de.de.bin").exists()
    assert "binarized en-de" in result.stdout
    assert (dest / "raw" / "valid.de").read_text() == (tiny_raw / "valid.tgt").read_text()


def test_multi30k_download_failure_is_clear(tmp_path):
    result = run([MULTI, "--download", "--download-url", (tmp_path / "nothing").as_uri(),
                  "--out-dir", tmp_path / "out"], check=False)
    assert result.returncode == 2 and "cannot download" in result.stderr and "--source" in result.stderr
    assert not (tmp_path / "out").exists()


def test_multi30k_missing_source_folder(tmp_path):
    result = run([MULTI, "--source", tmp_path / "absent", "--out-dir", tmp_path / "out"], check=False)
    assert result.returncode == 2 and "no Multi30k folder" in result.stderr


@pytest.mark.skipif(not (MULTI30K / "train.de").exists(), reason="../shared/data/multi30k is absent")
def test_real_multi30k_en_de_word_level(tmp_path):
    result = run([MULTI, "--source", MULTI30K, "--out-dir", tmp_path, "--pairs", "en-de", "--workers", "2"])
    stats = json.loads((tmp_path / "multi30k.en-de" / "stats.json").read_text())
    # the dataset's README: 7,855 German types are seen at least twice in train
    assert stats["dictionary_words"]["de"] == 7855
    assert stats["splits"]["train"]["de"]["sentences"] == 29000
    assert stats["splits"]["valid"]["de"]["sentences"] == 1014
    assert stats["splits"]["test"]["de"]["sentences"] == 1000
    assert 0 < stats["splits"]["test"]["de"]["oov_rate"] < 0.05
    assert "binarized en-de" in result.stdout


def test_carriage_return_inside_a_line_keeps_pairs_aligned(tiny_raw, tmp_path):
    from fairseq.data import Dictionary, data_utils

    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.src").read_text().splitlines()
    words = lines[2].split()
    lines[2] = " ".join(words[:2]) + "\r" + " ".join(words[2:])
    (raw / "valid.src").write_bytes(("\n".join(lines) + "\r\n").encode())  # CRLF at the end, too
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    src_dict = Dictionary.load(str(tmp_path / "bin" / "dict.src.txt"))
    ds = data_utils.load_indexed_dataset(str(tmp_path / "bin" / "valid.src-tgt.src"), src_dict)
    assert len(ds) == len(lines)
    assert src_dict.string(ds[2]) == " ".join(words)
