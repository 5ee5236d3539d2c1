"""--force never deletes the user's files: an output overlapping the input is refused before anything
is touched, only folders the tools wrote are replaced (what fairseq and the plugin added there included),
files added meanwhile are kept, and links are followed, kept, or named."""

import json
import shutil

import pytest
from helpers import REPO, load_script, run
from prepare_helpers import MULTI, PREPARE, SPLITS, copy_raw, leftovers, snapshot

from smallvocab_tools.data import prep
from smallvocab_tools.data.output_dir import OUTPUT_MARKER, atomic_output_dir


@pytest.mark.slow
@pytest.mark.parametrize("where", ["same", "parent", "inside"])
def test_dest_overlapping_the_input_is_refused_before_anything_is_touched(tiny_raw, tmp_path, where):
    raw = copy_raw(tiny_raw, tmp_path / "work" / "raw")
    (raw / "notes.txt").write_text("the user's own file\n")
    before = snapshot(tmp_path / "work")
    dest = {"same": raw, "parent": tmp_path / "work", "inside": raw / "bin"}[where]
    result = run([PREPARE, "--raw-dir", raw, "--src", "src", "--tgt", "tgt", "--dest", dest, "--force",
                  "--min-count", "1"], check=False)
    assert result.returncode == 2, result.stdout
    how = {"same": "is", "parent": "contains", "inside": "lies inside"}[where]
    assert f"{how} the input folder" in result.stderr and "nothing was written" in result.stderr
    assert snapshot(tmp_path / "work") == before  # not a byte changed, nothing added


@pytest.mark.slow
def test_other_scripts_refuse_an_output_overlapping_their_input(tiny_raw, tmp_path):
    from smallvocab_tools.data.caption_prep import prepare_captions

    source = copy_raw(tiny_raw, tmp_path / "m30k")
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test2016")):
        for lang, side in (("en", "src"), ("de", "tgt")):
            shutil.copy(tiny_raw / f"{ours}.{side}", source / f"{theirs}.{lang}")
    before = snapshot(source)
    result = run([MULTI, "--source", source, "--out-dir", source.parent, "--min-count", "1", "--force"], check=False)
    assert result.returncode == 0  # data-bin beside the source folder: fine
    result = run([MULTI, "--source", source, "--out-dir", source / "bin", "--force"], check=False)
    assert result.returncode == 2 and "lies inside the input folder" in result.stderr
    assert snapshot(source) == before
    with pytest.raises(prep.DataError, match="is the input folder"):
        prepare_captions(source, source, force=True)
    assert snapshot(source) == before


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
    assert (out / OUTPUT_MARKER).is_file()
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
    before = snapshot(dest)
    with pytest.raises(prep.DataError) as err:
        prep.prepare(tiny_raw, dest, "src", "tgt", SPLITS, min_count=1, force=True, log=lambda m: None)
    message = str(err.value)
    assert "3 file(s) that these tools did not write" in message
    assert "eval/hyps.txt, notes.txt, raw/my-refs.tgt" in message
    assert "move them out" in message and "nothing was changed" in message
    assert snapshot(dest) == before and not leftovers(tmp_path)


def test_force_replaces_what_the_tools_and_fairseq_wrote_there(tiny_bin, tiny_raw, tmp_path):
    dest = tmp_path / "data-bin"
    shutil.copytree(tiny_bin, dest)
    written = {p for p, _ in snapshot(dest)}
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
    assert {p for p, _ in snapshot(dest)} == written
    assert json.loads((dest / "stats.json").read_text())["min_count"] == 1


def test_force_on_a_folder_of_an_older_version_without_the_list_of_files(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    for name in ("dict.src.txt", "train.src-tgt.src.bin", "train.src", "stats.json", "raw/valid.tgt",
                 "spm.src.model", "test.npy", "test.index", "corpus.json", "lexicon.tsv"):
        (dest / name).parent.mkdir(exist_ok=True)
        (dest / name).write_text("old\n")
    (dest / OUTPUT_MARKER).write_text("written by prepare_data.py (fairseq-smallvocab); --force may replace "
                                           "this folder\n")
    (dest / "thesis.tex").write_text("months of work\n")
    with pytest.raises(prep.DataError, match="1 file\\(s\\) that these tools did not write: thesis.tex"):
        with atomic_output_dir(dest, overwrite=True):
            pass
    (dest / "thesis.tex").unlink()
    with atomic_output_dir(dest, overwrite=True) as tmp:
        (tmp / "new.txt").write_text("new\n")
    assert sorted(p.name for p in dest.iterdir()) == [OUTPUT_MARKER, "new.txt"]


def test_files_the_user_adds_while_the_tools_run_are_kept(tmp_path):
    dest = tmp_path / "out"
    with atomic_output_dir(dest) as tmp:
        (tmp / "a.txt").write_text("a\n")
    with pytest.raises(prep.DataError, match="did not write: mine.txt"):
        with atomic_output_dir(dest, overwrite=True) as tmp:
            (tmp / "a.txt").write_text("b\n")
            (dest / "mine.txt").write_text("added meanwhile\n")
    assert (dest / "a.txt").read_text() == "a\n" and (dest / "mine.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_to_a_folder_is_followed_and_stays_a_link(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    with atomic_output_dir(disk / "data-bin") as tmp:
        (tmp / "dict.tgt.txt").write_text("old\n")
    (disk / "data-bin").chmod(0o2750)  # set up for a group
    link = tmp_path / "data-bin"
    link.symlink_to(disk / "data-bin")
    with pytest.raises(prep.DataError, match="data-bin .*already exists.*--force"):
        with atomic_output_dir(link):
            pass
    with atomic_output_dir(link, overwrite=True) as tmp:
        (tmp / "dict.tgt.txt").write_text("new\n")
    assert link.is_symlink() and link.resolve() == (disk / "data-bin").resolve()
    assert (disk / "data-bin" / "dict.tgt.txt").read_text() == "new\n"
    assert (disk / "data-bin").stat().st_mode & 0o7777 == 0o2750
    assert sorted(p.name for p in disk.iterdir()) == ["data-bin"]  # no temporary left beside the target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data-bin", "disk"]
    # a link to an empty folder (made on a larger disk for the output): written there
    (disk / "empty").mkdir()
    (tmp_path / "to-empty").symlink_to(disk / "empty")
    with atomic_output_dir(tmp_path / "to-empty", overwrite=True) as tmp:
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
        with atomic_output_dir(tmp_path / "dangling", overwrite=True):
            pass
    (tmp_path / "file.txt").write_text("x\n")
    (tmp_path / "to-file").symlink_to(tmp_path / "file.txt")
    with pytest.raises(prep.DataError, match="to-file is a link to the file .*file.txt, not a folder"):
        with atomic_output_dir(tmp_path / "to-file", overwrite=True):
            pass
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(prep.DataError, match="loop is a link that cannot be followed"):
        with atomic_output_dir(tmp_path / "loop", overwrite=True):
            pass
    assert (tmp_path / "file.txt").read_text() == "x\n" and (tmp_path / "to-file").is_symlink()
