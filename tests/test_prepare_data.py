"""Data preparation: the input checks, fairseq binarization, subwords, the commands' statistics and
errors, and Multi30k.  The output folder (atomic, its mode, killed runs): test_prepare_output_folder.py;
--force and the user's files: test_prepare_force.py."""

import json
import shutil

import pytest
from helpers import MULTI30K, load_script, run
from prepare_helpers import MULTI, PREPARE, SPLITS, copy_raw, leftovers, write_lines

from smallvocab_tools.data import prep


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
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    (raw / "valid.tgt").unlink()
    with pytest.raises(prep.DataError, match=r"missing input file: .*valid\.tgt"):
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    assert not (tmp_path / "bin").exists() and not leftovers(tmp_path)


def test_line_count_mismatch_names_both_files(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "test.src").read_text().splitlines()
    write_lines(raw, "test.src", lines[:-2])
    with pytest.raises(prep.DataError) as err:
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    message = str(err.value)
    assert f"test.src has {len(lines) - 2} lines" in message and f"test.tgt has {len(lines)}" in message
    assert not (tmp_path / "bin").exists()


def test_empty_lines_fail_with_file_and_line_numbers(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "train.tgt").read_text().splitlines()
    lines[4] = ""
    lines[9] = "   "
    write_lines(raw, "train.tgt", lines)
    with pytest.raises(prep.DataError) as err:
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)
    message = str(err.value)
    assert "2 empty line(s)" in message
    assert "line 5 (" in message and "line 10 (" in message and "train.tgt" in message
    assert "--empty-lines drop" in message
    assert not (tmp_path / "bin").exists()


def test_empty_lines_dropped_with_count(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.src").read_text().splitlines()
    n = len(lines)
    lines[0] = ""
    write_lines(raw, "valid.src", lines)
    logged = []
    stats = prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, empty_lines="drop",
                         log=logged.append)
    assert stats["dropped_pairs"]["valid"] == 1
    assert stats["splits"]["valid"]["src"]["sentences"] == n - 1
    assert any("dropped 1 sentence pair" in m for m in logged)
    kept_tgt = (tmp_path / "bin" / "raw" / "valid.tgt").read_text().splitlines()
    assert kept_tgt == (raw / "valid.tgt").read_text().splitlines()[1:]  # alignment kept


def test_carriage_return_inside_a_line_keeps_pairs_aligned(tiny_raw, tmp_path):
    from fairseq.data import Dictionary, data_utils

    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.src").read_text().splitlines()
    words = lines[2].split()
    lines[2] = " ".join(words[:2]) + "\r" + " ".join(words[2:])
    (raw / "valid.src").write_bytes(("\n".join(lines) + "\r\n").encode())  # CRLF at the end, too
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    src_dict = Dictionary.load(str(tmp_path / "bin" / "dict.src.txt"))
    ds = data_utils.load_indexed_dataset(str(tmp_path / "bin" / "valid.src-tgt.src"), src_dict)
    assert len(ds) == len(lines)
    assert src_dict.string(ds[2]) == " ".join(words)


def test_a_byte_order_mark_is_dropped_from_every_copy(tiny_raw, tmp_path):
    """A file that starts with a UTF-8 byte-order mark (as some editors save): no copy keeps it, neither the
    binarized first sentence nor the raw reference copy that decodes are scored against."""
    from fairseq.data import Dictionary, data_utils

    raw = copy_raw(tiny_raw, tmp_path / "raw")
    for name in ("valid.src", "valid.tgt"):
        (raw / name).write_bytes(b"\xef\xbb\xbf" + (raw / name).read_bytes())
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    kept = (tmp_path / "bin" / "raw" / "valid.tgt").read_text(encoding="utf-8")
    assert "\ufeff" not in kept and kept.splitlines() == (tiny_raw / "valid.tgt").read_text().splitlines()
    tgt_dict = Dictionary.load(str(tmp_path / "bin" / "dict.tgt.txt"))
    ds = data_utils.load_indexed_dataset(str(tmp_path / "bin" / "valid.src-tgt.tgt"), tgt_dict)
    assert tgt_dict.string(ds[0]) == (tiny_raw / "valid.tgt").read_text().splitlines()[0]


def test_non_utf8_input_names_the_line(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.tgt").read_bytes().split(b"\n")
    lines[6] = lines[6] + " caf\xe9".encode("latin-1")
    (raw / "valid.tgt").write_bytes(b"\n".join(lines))
    with pytest.raises(prep.DataError, match=r"valid\.tgt: line 7, byte \d+ of the line is not UTF-8"):
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)


@pytest.mark.slow
def test_literal_special_tokens_are_reported(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "train.src").read_text().splitlines()
    for i in (3, 10, 11, 20, 30, 40, 50):
        lines[i] += " <unk>"
    lines[10] += " </s>"
    write_lines(raw, "train.src", lines)
    messages = []
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=messages.append)
    warning = [m for m in messages if "literal special token" in m]
    assert len(warning) == 1 and "train.src: 8 literal special token(s) (<unk> x7, </s> x1)" in warning[0]
    assert "line(s) 4, 11, 12, 21, 31 and 2 more" in warning[0]
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", tmp_path / "b2",
                  "--min-count", "1"])
    assert "literal special token" in result.stderr


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


def test_a_sentencepiece_vocabulary_smaller_than_the_characters_is_named(tiny_raw, tmp_path):
    with pytest.raises(prep.DataError, match=r"--sp-vocab-size 5 is too small for spm\.src: .* need (\d+) pieces; "
                                             r"give --sp-vocab-size \1 or more"):
        prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, subword="sentencepiece", sp_vocab_size=5,
                     log=lambda m: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_reports_errors_with_exit_code_2(tiny_raw, tmp_path):
    raw = copy_raw(tiny_raw, tmp_path / "raw")
    (raw / "train.src").unlink()
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", tmp_path / "bin"],
                 check=False)
    assert result.returncode == 2
    assert "error: missing input file" in result.stderr and "train.src" in result.stderr
    assert not (tmp_path / "bin").exists()


@pytest.mark.slow
def test_cli_prints_statistics(tiny_raw, tmp_path):
    result = run([PREPARE, "--raw-dir", tiny_raw, "--src", "src", "--tgt", "tgt", "--dest",
                  tmp_path / "bin", "--min-count", "1"])
    assert "dictionary (words, without specials): src=" in result.stdout
    assert "Zipf slope" in result.stdout


@pytest.mark.parametrize("argv, problem", [
    (["--sp-vocab-size", "0"], "argument --sp-vocab-size: 0 is too small: give 1 or more"),
    (["--workers", "0"], "argument --workers: 0 is too small: give 1 or more"),
    (["--workers", "-2"], "argument --workers: -2 is too small: give 1 or more"),
    (["--min-count", "0"], "argument --min-count: 0 is too small: give 1 or more"),
])
def test_cli_refuses_counts_below_one(tiny_raw, tmp_path, capsys, argv, problem):
    """Nonsense counts are refused on the command line, not with a traceback from inside the run."""
    with pytest.raises(SystemExit) as exit_:
        load_script("prepare_data").main(["--raw-dir", str(tiny_raw), "--src", "src", "--tgt", "tgt",
                                          "--dest", str(tmp_path / "bin"), *argv])
    assert exit_.value.code == 2 and problem in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _fake_official_repo(tiny_raw, folder):
    """Files named as in the Multi30k repository, from the tiny corpus."""
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for ours_lang, lang in (("src", "en"), ("tgt", "de")):
            shutil.copy(tiny_raw / f"{ours}.{ours_lang}", folder / f"{theirs}.lc.norm.tok.{lang}")


@pytest.mark.slow
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


@pytest.mark.slow
def test_multi30k_download_failure_is_clear(tmp_path):
    result = run([MULTI, "--download", "--download-url", (tmp_path / "nothing").as_uri(),
                  "--out-dir", tmp_path / "out"], check=False)
    assert result.returncode == 2 and "cannot download" in result.stderr and "--source" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_multi30k_missing_source_folder(tmp_path):
    result = run([MULTI, "--source", tmp_path / "absent", "--out-dir", tmp_path / "out"], check=False)
    assert result.returncode == 2 and "no Multi30k folder" in result.stderr


@pytest.mark.slow
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


def test_a_joined_dictionary_serves_both_languages_and_shares_one_sentencepiece_model(tiny_raw, tmp_path):
    """--joined-dictionary (fairseq's --share-all-embeddings needs it): one dictionary holding both languages'
    tokens, and with sentencepiece one model trained on both sides, written under each language's name; without
    it, each language its own."""
    from fairseq.data import Dictionary

    for subword in ("none", "sentencepiece"):
        dest = tmp_path / subword
        stats = prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, subword=subword, sp_vocab_size=200,
                             log=lambda m: None, joined_dictionary=True)
        assert stats["joined_dictionary"] is True
        src, tgt = (Dictionary.load(str(dest / f"dict.{lang}.txt")) for lang in ("src", "tgt"))
        assert src.symbols == tgt.symbols
        text = (dest / ("subword" if subword == "sentencepiece" else "raw") / "train.src").read_text()
        if subword == "none":  # every word of either side is in the one dictionary
            words = set(text.split()) | set((dest / "raw" / "train.tgt").read_text().split())
            assert words <= set(src.symbols)
        else:
            assert (dest / "spm.src.model").read_bytes() == (dest / "spm.tgt.model").read_bytes()
        stats = prep.prepare(tiny_raw, tmp_path / f"{subword}-apart", "src", "tgt", SPLITS, subword=subword,
                             sp_vocab_size=200, log=lambda m: None)
        src, tgt = (Dictionary.load(str(tmp_path / f"{subword}-apart" / f"dict.{lang}.txt")) for lang in ("src", "tgt"))
        assert src.symbols != tgt.symbols and stats["joined_dictionary"] is False
