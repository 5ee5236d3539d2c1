"""Data preparation: checks, atomic output, subwords, fairseq binarization."""

import json
import os
import shutil
import sys

import pytest
from helpers import MULTI30K, REPO, load_script, run

from smallvocab_tools.data import prep

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


@pytest.fixture
def umask():
    """Set the process umask for one test (``umask(0o027)``), restored after."""
    before = os.umask(0o022)
    os.umask(before)
    yield os.umask
    os.umask(before)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077], ids=["022", "027", "077"])
def test_output_folder_mode_follows_the_umask_like_mkdir(tmp_path, umask, mask):
    umask(mask)
    (tmp_path / "by-mkdir").mkdir()
    with prep.atomic_output_dir(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("x\n")
    mode = (tmp_path / "out").stat().st_mode
    assert mode & 0o7777 == (tmp_path / "by-mkdir").stat().st_mode & 0o7777 == 0o777 & ~mask
    # a set-group-ID parent is inherited as with mkdir (shared group folders)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)
    (shared / "by-mkdir").mkdir()
    with prep.atomic_output_dir(shared / "out") as tmp:
        pass
    assert (shared / "out").stat().st_mode & 0o7777 == (shared / "by-mkdir").stat().st_mode & 0o7777


def test_prepared_data_is_readable_by_the_group_under_umask_027(tiny_raw, tmp_path, umask):
    umask(0o027)
    prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    assert (tmp_path / "bin").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "bin" / "raw").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "bin" / "dict.tgt.txt").stat().st_mode & 0o777 == 0o640


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


@pytest.mark.slow
def test_cli_reports_errors_with_exit_code_2(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
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


# -- --force never deletes the user's files ---------------------------------------------------------

def _snapshot(folder):
    return sorted((p.relative_to(folder).as_posix(), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("where", ["same", "parent", "inside"])
def test_dest_overlapping_the_input_is_refused_before_anything_is_touched(tiny_raw, tmp_path, where):
    raw = _copy_raw(tiny_raw, tmp_path / "work" / "raw")
    (raw / "notes.txt").write_text("the user's own file\n")
    before = _snapshot(tmp_path / "work")
    dest = {"same": raw, "parent": tmp_path / "work", "inside": raw / "bin"}[where]
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", dest, "--force",
                  "--min-count", "1"], check=False)
    assert result.returncode == 2, result.stdout
    how = {"same": "is", "parent": "contains", "inside": "lies inside"}[where]
    assert f"{how} the input folder" in result.stderr and "nothing was written" in result.stderr
    assert _snapshot(tmp_path / "work") == before  # not a byte changed, nothing added


@pytest.mark.slow
def test_other_scripts_refuse_an_output_overlapping_their_input(tiny_raw, tmp_path):
    from smallvocab_tools.data.caption_prep import prepare_captions

    source = _copy_raw(tiny_raw, tmp_path / "m30k")
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test2016")):
        for lang, side in (("en", "src"), ("de", "tgt")):
            shutil.copy(tiny_raw / f"{ours}.{side}", source / f"{theirs}.{lang}")
    before = _snapshot(source)
    result = run([MULTI, "--source", source, "--out-dir", source.parent, "--min-count", "1", "--force"], check=False)
    assert result.returncode == 0  # data-bin beside the source folder: fine
    result = run([MULTI, "--source", source, "--out-dir", source / "bin", "--force"], check=False)
    assert result.returncode == 2 and "lies inside the input folder" in result.stderr
    assert _snapshot(source) == before
    with pytest.raises(prep.DataError, match="is the input folder"):
        prepare_captions(source, source, force=True)
    assert _snapshot(source) == before


@pytest.mark.slow
def test_force_replaces_only_folders_the_tools_wrote(tmp_path):
    gen = REPO / "scripts" / "make_synthetic_corpus.py"
    args = ["--tgt-vocab-size", "200", "--train-size", "250", "--valid-size", "5", "--test-size", "5"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work\n")
    result = run([gen, "--out", mine, "--force", *args], check=False)
    assert result.returncode == 2 and "not written by this project's tools" in result.stderr
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    out = tmp_path / "corpus"
    run([gen, "--out", out, *args])
    assert (out / prep.OUTPUT_MARKER).is_file()
    (out / "train.src").write_text("stale\n")
    run([gen, "--out", out, "--force", *args])  # its own output: replaced
    assert (out / "train.src").read_text() != "stale\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    run([gen, "--out", empty, "--force", *args])
    assert (empty / "train.tgt").is_file()


def test_force_refuses_an_output_folder_holding_the_users_files(tiny_bin, tiny_raw, tmp_path):
    dest = tmp_path / "data-bin"
    shutil.copytree(tiny_bin, dest)
    (dest / "notes.txt").write_text("which run this was\n")
    (dest / "eval").mkdir()
    (dest / "eval" / "hyps.txt").write_text("a translation\n")
    (dest / "raw" / "my-refs.tgt").write_text("a reference\n")
    before = _snapshot(dest)
    with pytest.raises(prep.DataError) as err:
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, force=True, log=lambda m: None)
    message = str(err.value)
    assert "3 file(s) that these tools did not write" in message
    assert "eval/hyps.txt, notes.txt, raw/my-refs.tgt" in message
    assert "move them out" in message and "nothing was changed" in message
    assert _snapshot(dest) == before and not _leftovers(tmp_path)


def test_force_replaces_what_the_tools_and_fairseq_wrote_there(tiny_bin, tiny_raw, tmp_path):
    dest = tmp_path / "data-bin"
    shutil.copytree(tiny_bin, dest)
    written = {p for p, _ in _snapshot(dest)}
    assert {"preprocess.log", "dict.tgt.txt", "train.src-tgt.tgt.bin", "raw/train.tgt", "stats.json"} <= written
    # after it: fairseq-preprocess run again into the folder (another split, another dictionary), the
    # plugin's candidate lists (--candidates-dir DATA/candidates, export_candidates.py), a killed export
    for name in ("test2.src-tgt.src.bin", "test2.src-tgt.src.idx", "dict.de.txt", "candidates/valid.k50.npy",
                 "candidates/valid.k50.json", "candidates/.test.k50.npy.tmp-123", "test.k20.npy",
                 "candidates/train.k50.nogold.npy", "candidates/train.k50.nogold.json"):
        (dest / name).parent.mkdir(exist_ok=True)
        (dest / name).write_text("x\n")
    (dest / "stats.json").write_text("{}\n")  # edited: still the tools' file
    prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, force=True, log=lambda m: None)
    assert {p for p, _ in _snapshot(dest)} == written
    assert json.loads((dest / "stats.json").read_text())["min_count"] == 1


def test_force_on_a_folder_of_an_older_version_without_the_list_of_files(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    for name in ("dict.src.txt", "train.src-tgt.src.bin", "train.src", "stats.json", "raw/valid.tgt",
                 "spm.src.model", "test.npy", "test.index", "corpus.json", "lexicon.tsv"):
        (dest / name).parent.mkdir(exist_ok=True)
        (dest / name).write_text("old\n")
    (dest / prep.OUTPUT_MARKER).write_text("written by prepare_data.py (fairseq-smallvocab); --force may replace "
                                           "this folder\n")
    (dest / "thesis.tex").write_text("months of work\n")
    with pytest.raises(prep.DataError, match="1 file\\(s\\) that these tools did not write: thesis.tex"):
        with prep.atomic_output_dir(dest, overwrite=True):
            pass
    (dest / "thesis.tex").unlink()
    with prep.atomic_output_dir(dest, overwrite=True) as tmp:
        (tmp / "new.txt").write_text("new\n")
    assert sorted(p.name for p in dest.iterdir()) == [prep.OUTPUT_MARKER, "new.txt"]


def test_files_the_user_adds_while_the_tools_run_are_kept(tmp_path):
    dest = tmp_path / "out"
    with prep.atomic_output_dir(dest) as tmp:
        (tmp / "a.txt").write_text("a\n")
    with pytest.raises(prep.DataError, match="did not write: mine.txt"):
        with prep.atomic_output_dir(dest, overwrite=True) as tmp:
            (tmp / "a.txt").write_text("b\n")
            (dest / "mine.txt").write_text("added meanwhile\n")
    assert (dest / "a.txt").read_text() == "a\n" and (dest / "mine.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_to_a_folder_is_followed_and_stays_a_link(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    with prep.atomic_output_dir(disk / "data-bin") as tmp:
        (tmp / "dict.tgt.txt").write_text("old\n")
    (disk / "data-bin").chmod(0o2750)  # set up for a group
    link = tmp_path / "data-bin"
    link.symlink_to(disk / "data-bin")
    with pytest.raises(prep.DataError, match="data-bin .*already exists.*--force"):
        with prep.atomic_output_dir(link):
            pass
    with prep.atomic_output_dir(link, overwrite=True) as tmp:
        (tmp / "dict.tgt.txt").write_text("new\n")
    assert link.is_symlink() and link.resolve() == (disk / "data-bin").resolve()
    assert (disk / "data-bin" / "dict.tgt.txt").read_text() == "new\n"
    assert (disk / "data-bin").stat().st_mode & 0o7777 == 0o2750
    assert sorted(p.name for p in disk.iterdir()) == ["data-bin"]  # no temporary left beside the target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data-bin", "disk"]
    # a link to an empty folder (made on a larger disk for the output): written there
    (disk / "empty").mkdir()
    (tmp_path / "to-empty").symlink_to(disk / "empty")
    with prep.atomic_output_dir(tmp_path / "to-empty", overwrite=True) as tmp:
        (tmp / "a.txt").write_text("a\n")
    assert (disk / "empty" / "a.txt").is_file() and (tmp_path / "to-empty").is_symlink()


def test_a_link_to_a_folder_with_the_users_files_is_refused_naming_them(tiny_raw, tmp_path, capsys):
    script = load_script(PREPARE)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work\n")
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(SystemExit) as exit_:
        script.main(["--raw-dir", str(tiny_raw), "--src", "src", "--tgt", "tgt", "--dest", str(tmp_path / "link"),
                     "--force"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "link (a link to" in err and "not written by this project's tools" in err
    assert "not a folder" not in err
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"] and (tmp_path / "link").is_symlink()


def test_links_to_nothing_or_to_a_file_are_named_as_such(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(prep.DataError, match="dangling is a link to .*gone, which does not exist; create"):
        with prep.atomic_output_dir(tmp_path / "dangling", overwrite=True):
            pass
    (tmp_path / "file.txt").write_text("x\n")
    (tmp_path / "to-file").symlink_to(tmp_path / "file.txt")
    with pytest.raises(prep.DataError, match="to-file is a link to the file .*file.txt, not a folder"):
        with prep.atomic_output_dir(tmp_path / "to-file", overwrite=True):
            pass
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(prep.DataError, match="loop is a link that cannot be followed"):
        with prep.atomic_output_dir(tmp_path / "loop", overwrite=True):
            pass
    assert (tmp_path / "file.txt").read_text() == "x\n" and (tmp_path / "to-file").is_symlink()


@pytest.mark.slow
def test_stale_temporary_folders_of_killed_runs_are_removed(tiny_raw, tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a PID that has exited
    stale = [f".bin.tmp-{dead}-k2j4h5", f".bin.old-{dead}", ".bin.tmp-a1b2c3d4"]  # the last: older naming
    kept = [f".bin.tmp-{os.getppid()}-x9y8z7", ".bin.tmp-notours", ".other.tmp-a1b2c3d4", "bin-notes"]
    for name in stale + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "half-written.bin").write_text("x")
    prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=lambda m: None)
    left = {p.name for p in tmp_path.iterdir()}
    assert not left & set(stale)
    assert left == set(kept) | {"bin"}  # a live run's folder and foreign names untouched


def test_non_utf8_input_names_the_line(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "valid.tgt").read_bytes().split(b"\n")
    lines[6] = lines[6] + " caf\xe9".encode("latin-1")
    (raw / "valid.tgt").write_bytes(b"\n".join(lines))
    with pytest.raises(prep.DataError, match=r"valid\.tgt: line 7, byte \d+ of the line is not UTF-8"):
        prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS)


@pytest.mark.slow
def test_literal_special_tokens_are_reported(tiny_raw, tmp_path):
    raw = _copy_raw(tiny_raw, tmp_path / "raw")
    lines = (raw / "train.src").read_text().splitlines()
    for i in (3, 10, 11, 20, 30, 40, 50):
        lines[i] += " <unk>"
    lines[10] += " </s>"
    _write(raw, "train.src", lines)
    messages = []
    prep.prepare(raw, tmp_path / "bin", "src", "tgt", SPLITS, min_count=1, log=messages.append)
    warning = [m for m in messages if "literal special token" in m]
    assert len(warning) == 1 and "train.src: 8 literal special token(s) (<unk> x7, </s> x1)" in warning[0]
    assert "line(s) 4, 11, 12, 21, 31 and 2 more" in warning[0]
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", tmp_path / "b2",
                  "--min-count", "1"])
    assert "literal special token" in result.stderr


@pytest.mark.parametrize("argv, problem", [
    (["--sp-vocab-size", "0"], "argument --sp-vocab-size: 0 is too small: give 1 or more"),
    (["--workers", "0"], "argument --workers: 0 is too small: give 1 or more"),
    (["--workers", "-2"], "argument --workers: -2 is too small: give 1 or more"),
    (["--min-count", "0"], "argument --min-count: 0 is too small: give 1 or more"),
])
def test_cli_refuses_counts_below_one(tiny_raw, tmp_path, capsys, argv, problem):
    """Nonsense counts are refused on the command line (issue #46), not with a traceback from inside the run."""
    with pytest.raises(SystemExit) as exit_:
        load_script("prepare_data").main(["--raw-dir", str(tiny_raw), "--src", "src", "--tgt", "tgt",
                                          "--dest", str(tmp_path / "bin"), *argv])
    assert exit_.value.code == 2 and problem in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_sentencepiece_vocabulary_smaller_than_the_characters_is_named(tiny_raw, tmp_path):
    with pytest.raises(prep.DataError, match=r"--sp-vocab-size 5 is too small for spm\.src: .* need (\d+) pieces; "
                                             r"give --sp-vocab-size \1 or more"):
        prep.prepare(tiny_raw, tmp_path / "bin", "src", "tgt", SPLITS, subword="sentencepiece", sp_vocab_size=5,
                     log=lambda m: None)
    assert list(tmp_path.iterdir()) == []


FAKE_PREPROCESS = """import os, sys, time
pid = os.environ["FAKE_PREPROCESS_PID"]
with open(pid + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pid + ".tmp", pid)  # whole, or not there
time.sleep(120)
"""


def _running(pid):
    """Whether the process runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; SIGKILL's case is Linux's prctl")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_killing_the_cli_stops_fairseq_preprocess_and_leaves_nothing(tiny_raw, tmp_path, sig):
    """SIGTERM or Ctrl-C while fairseq-preprocess runs (a stand-in that waits, found first on PYTHONPATH): the
    child is stopped and waited for, and neither the output nor its temporary folder is left.  SIGKILL runs no
    cleanup: the kernel stops the child (PR_SET_PDEATHSIG), and only the temporary folder is left (the next run
    removes it)."""
    import signal
    import subprocess
    import time

    fake = tmp_path / "fake"
    (fake / "fairseq_cli").mkdir(parents=True)
    (fake / "fairseq_cli" / "__init__.py").write_text("")
    (fake / "fairseq_cli" / "preprocess.py").write_text(FAKE_PREPROCESS)
    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, FAKE_PREPROCESS_PID=str(pid_file),
               PYTHONPATH=os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(PREPARE), "--raw-dir", str(tiny_raw), "--src", "src", "--tgt", "tgt",
                             "--dest", str(out / "bin")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    child = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "fairseq-preprocess did not start"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -9}[sig], stderr
        assert "Traceback" not in stderr
        deadline = time.monotonic() + 5
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child), f"fairseq-preprocess (pid {child}) outlived prepare_data.py"
        left = [p.name for p in out.iterdir()]
        if sig == "SIGKILL":
            assert len(left) == 1 and left[0].startswith(".bin.tmp-"), left
        else:
            assert left == []  # no output, and no temporary folder
    finally:
        if proc.poll() is None:
            proc.kill()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)
