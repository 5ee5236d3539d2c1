"""Deployment with CTranslate2 (slow): a tuned checkpoint exported with scripts/export_ctranslate2.py,
CTranslate2's translations equal to fairseq-generate's without the map and inside the map's allowance with it;
what cannot be exported is refused with the reason; the output folder: --force replaces only what an export
wrote, and a killed export leaves nothing behind (SIGTERM, Ctrl-C) or nothing the next export keeps (SIGKILL);
the bench's scoring and the export's check of the map through the command.  The map's content:
test_ctranslate2_map.py; the check's timing and verdict: test_ctranslate2_speed.py."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, USER_DIR, run, sigint_default

from smallvocab_tools.deploy.vmap import VocabMap

EXPORT = str(REPO / "scripts" / "export_ctranslate2.py")


BENCH = str(REPO / "scripts" / "bench_ctranslate2.py")


ARCH = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed",
        "--dropout", "0.1"]


COMMON = ["--batch-size", "32", "--cpu", "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
          "--no-epoch-checkpoints"]


@pytest.fixture(scope="module")
def tuned(predictor, tiny_bin, tmp_path_factory):
    """A small Transformer trained with the small softmax (K = 50), then tuned with REINFORCE."""
    pytest.importorskip("ctranslate2")
    root = tmp_path_factory.mktemp("tuned")
    plugin = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--vocab-predictor", predictor,
              "--candidates-dir", root / "cands", "--small-vocab-size", "50", *ARCH, *COMMON]
    run(["fairseq-train", tiny_bin, *plugin, "--criterion", "label_smoothed_cross_entropy", "--label-smoothing",
         "0.1", "--optimizer", "adam", "--lr", "0.005", "--max-epoch", "40", "--save-dir", root / "ce"])
    run(["fairseq-train", tiny_bin, *plugin, "--criterion", "smallvocab_reinforce", "--optimizer", "sgd",
         "--lr", "0.01",
         "--max-sample-len", "30", "--max-epoch", "1", "--finetune-from-model", root / "ce" / "checkpoint_last.pt",
         "--save-dir", root / "rl"])
    return root / "rl" / "checkpoint_last.pt"


def _hyps(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}


@pytest.mark.slow
def test_exported_model_translates_as_fairseq_and_inside_its_map(tuned, predictor, tiny_bin, tmp_path):
    import ctranslate2

    from smallvocab_tools.deploy.ctranslate2_bench import split_tokens

    out = tmp_path / "ct2"
    done = run(["python", EXPORT, "--path", tuned, "--data", tiny_bin, "--out", out, "--vmap-from", predictor,
                "--vmap-per-token", "10", "--vmap-always", "20", "--vmap-bigrams", "30", "--k", "50"],
               env={"OMP_NUM_THREADS": "1"})  # the quick start's THREADS=1
    # the map checked on 40 valid sentences, with and without it, on the threads asked for, each round said as it
    # ends, and a verdict with one sentence of advice
    assert "valid sentences (all it holds: fewer than the 200 asked)" in done.stderr
    assert "on 1 thread (OMP_NUM_THREADS=1), 5 rounds with and without the map" in done.stderr
    assert len(re.findall(r"^  round \d/5 ", done.stderr, re.M)) == 5
    verdict = re.search(r"^the vocabulary map on 40 valid sentences \(beam 5, batches of 32, 1 thread, 5 rounds each "
                        r"way\): \d+ tokens/s with it, \d+ without, [\d.]+x \(rounds [\d.]+x-[\d.]+x\); BLEU [\d.]+ "
                        r"with it, [\d.]+ without \(nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:"
                        r"[\d.]+\)\. (It pays here.*|It slows translation here.*|No clear difference here.*)$",
                        done.stdout, re.M)
    assert verdict and verdict.group(1).count("use_vmap=") == 1, done.stdout
    assert done.stdout.count("use_vmap=") == 1  # the advice, once
    meta = json.loads((out / "smallvocab_export.json").read_text())
    cover = meta["vmap"]["coverage"]
    assert meta["quantization"] == "float32" and cover["sentences"] == 40 and cover["k"] == 50
    assert 0 < cover["candidates_covered"] <= 100 and cover["allowed_per_sentence"] < cover["vocabulary"]
    vmap = VocabMap.read(out / "vmap.txt")
    assert any(len(key) == 2 for key in vmap.words)

    sources, _ = split_tokens(tiny_bin, "src", "tgt", "test")
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    differs = 0
    for beam in (1, 4):  # the full softmax: the same translations as fairseq-generate's
        gen = run(["fairseq-generate", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab",
                   "--small-vocab-size", "0", "--path", tuned, "--gen-subset", "test", "--beam", str(beam),
                   "--max-len-b", "50", "--batch-size", "16", "--cpu"])
        want = _hyps(gen.stdout)
        assert len(want) == len(sources) == 30
        got = [r.hypotheses[0] for r in translator.translate_batch(sources, beam_size=beam, max_decoding_length=50)]
        # At the length limit the two differ: fairseq's beam search ends every hypothesis with eos there and scores
        # the eos, CTranslate2 returns the unfinished one; greedy search agrees there too.
        cut = {i for i, hyp in enumerate(got) if beam > 1 and 50 in (len(hyp), len(want[i].split()))}
        assert len(cut) <= 10, (beam, cut)
        assert {i: " ".join(hyp) for i, hyp in enumerate(got) if i not in cut} == {
            i: hyp for i, hyp in want.items() if i not in cut}
        for i, tokens in enumerate(sources):  # alone: the map allows what this sentence's tokens allow
            hyp = translator.translate_batch([tokens], beam_size=beam, max_decoding_length=50,
                                             use_vmap=True)[0].hypotheses[0]
            assert set(hyp) <= vmap.allowed(tokens) | {"<unk>"}, (i, hyp)
            differs += " ".join(hyp) != want[i]
    assert differs > 0  # the map restricted some translation: the allowance check above has teeth

    # without --k, the coverage is measured at the K the checkpoint was trained with (50; the paper's rule: 500);
    # without --vmap-per-token, the lines are sized on valid from 20 words, and the coverage is said in words
    done = run(["python", EXPORT, "--path", tuned, "--data", tiny_bin, "--out", tmp_path / "ct2-k", "--vmap-from",
                predictor, "--vmap-always", "20"])
    meta = json.loads((tmp_path / "ct2-k" / "smallvocab_export.json").read_text())
    cover, per_token = meta["vmap"]["coverage"], meta["vmap"]["per_token"]
    assert cover["k"] == 50 and meta["small_vocab_size"] == 50
    assert meta["vmap"]["per_token_tried"][0]["per_token"] == 20 and per_token in (20, 40, 50)
    assert f"vocabulary map: {per_token} words per source word; on valid (40 sentences) it allows " \
           f"{cover['reference_in_map']:.1f}% of the reference words" in done.stdout
    assert ("warning: the map allows" in done.stderr) == (
        cover["reference_in_map"] < cover["reference_in_candidates"] - 1.0)

    for quantization, compute in (("int8", "int8"), ("float16", "float32")):  # float16 computes on a GPU
        folder = tmp_path / f"ct2-{quantization}"
        run(["python", EXPORT, "--path", tuned, "--data", tiny_bin, "--out", folder, "--quantization", quantization])
        assert (folder / "model.bin").stat().st_size < 0.7 * (out / "model.bin").stat().st_size  # tiny: norms stay
        assert not (folder / "vmap.txt").exists()
        assert json.loads((folder / "smallvocab_export.json").read_text())["quantization"] == quantization
        got = ctranslate2.Translator(str(folder), compute_type=compute).translate_batch(sources[:4], beam_size=2)
        assert all(r.hypotheses[0] for r in got)

    _, refs = split_tokens(tiny_bin, "src", "tgt", "valid")
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    table = run(["python", BENCH, "--model", out, "--split", "valid", "--rounds", "1", "--threads", "1",
                 "--batches", "8", "--beams", "1", "--compute-types", "float32", "--out", tmp_path / "bench",
                 "--compare", f"the references=K = 50={tmp_path / 'refs.txt'}"])
    assert re.search(r"\| CTranslate2 \| float32 \| 1 \| 8 \| predictor \| [\d.]+ \| \d+ \| [\d.]+x \|", table.stdout)
    assert "| the references=K = 50 | | | | | 100.00 | | |" in table.stdout
    assert re.search(r"^BLEU: sacrebleu on words, nrefs:1\|case:mixed\|eff:no\|tok:13a\|", table.stdout, re.M)
    assert "on 1 thread (--threads)" in table.stderr
    assert (tmp_path / "bench" / "ct2-float32-beam1-batch8-vmap.txt").is_file()


@pytest.mark.slow
def test_what_cannot_be_exported_is_refused(tuned, predictor, tiny_bin, tmp_path):
    def refused(*args):
        out = run(["python", EXPORT, *map(str, args)], check=False)
        assert out.returncode != 0
        return out.stderr

    lstm = tmp_path / "lstm"
    run(["fairseq-train", tiny_bin, "--user-dir", USER_DIR, "--task", "translation_smallvocab", "--vocab-predictor",
         predictor, "--candidates-dir", tmp_path / "cands", "--small-vocab-size", "50", "--arch", "lstm_smallvocab",
         "--embed-dim", "16", "--criterion", "cross_entropy", "--optimizer", "sgd", "--lr", "0.5", "--max-epoch",
         "1", "--save-dir", lstm, *COMMON])
    assert "LSTM" in refused("--path", lstm / "checkpoint_last.pt", "--data", tiny_bin, "--out", tmp_path / "a")
    assert "is a vocabulary predictor" in refused("--path", predictor, "--data", tiny_bin, "--out", tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    err = refused("--path", tuned, "--data", tiny_bin, "--out", folder)
    assert "--force" in err
    assert "not a CTranslate2 model folder" in refused("--path", tuned, "--data", tiny_bin, "--out", folder,
                                                       "--force")
    # told before the map is computed
    mapped = run(["python", EXPORT, "--path", tuned, "--data", tiny_bin, "--out", folder, "--vmap-from", predictor],
                 check=False)
    assert mapped.returncode != 0 and "--force" in mapped.stderr and "vocabulary map" not in mapped.stdout
    assert (folder / "notes.txt").read_text() == "keep me"

    other = tmp_path / "other-bin"  # another corpus: other dictionaries
    from smallvocab_tools.data.prep import prepare
    from smallvocab_tools.data.synthetic import SyntheticConfig, write_corpus

    write_corpus(tmp_path / "raw", SyntheticConfig(tgt_vocab_size=250, train_size=50, valid_size=5, test_size=5,
                                                   seed=7))
    prepare(tmp_path / "raw", other, "src", "tgt", {"train": "train", "valid": "valid", "test": "test"},
            min_count=1, log=lambda m: None)
    assert "not the ones" in refused("--path", tuned, "--data", other, "--out", tmp_path / "c")
    assert "--vmap-from" in refused("--path", tuned, "--data", other, "--out", tmp_path / "d", "--vmap-from",
                                    predictor)
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written folder left


EXPORT_FILES = {"model.bin", "config.json", "shared_vocabulary.json", "vmap.txt", "smallvocab_export.json"}


def _fake_convert(path, data, out_dir, quantization, vmap_file):
    """CTranslate2's conversion as far as the folder goes: the files it writes (made up), the map copied in."""
    Path(out_dir).mkdir()
    for name in ("model.bin", "config.json", "shared_vocabulary.json"):
        (Path(out_dir) / name).write_text(f"{quantization}\n")
    if vmap_file is not None:
        shutil.copy(vmap_file, Path(out_dir) / "vmap.txt")


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_force_replaces_only_what_an_export_wrote(tmp_path, monkeypatch):
    """--force replaces a model folder that an export wrote (its marker lists the files), or that an older
    export wrote without a marker and that holds only an export's files; a user's file in either is named
    and the folder left as it was, as is a folder that is no model folder (the data tools' own)."""
    pytest.importorskip("ctranslate2")
    from smallvocab_tools.data.output_dir import OUTPUT_MARKER
    from smallvocab_tools.deploy import ctranslate2_export as ct2

    monkeypatch.setattr(ct2, "_convert", _fake_convert)
    info = {"task": "translation", "arch": "transformer", "multilingual": False, "source_lang": "src",
            "target_lang": "tgt"}
    vmap = VocabMap(always=["."], words={("a",): ["x"]})

    def export(out, quantization, force=True):
        return ct2.export("model.pt", "data-bin", out, quantization, vmap=vmap, force=force, info=info)

    out = tmp_path / "ct2"
    export(out, "float32", force=False)
    (out / "mynotes.txt").write_text("keep me")
    before = _files(out)
    with pytest.raises(ct2.ExportError, match=r"holds 1 file\(s\).*mynotes\.txt.*move them out"):
        export(out, "int8")
    assert _files(out) == before
    # what the export wrote: the model and the marker (the map's source is not left in the model)
    assert set(before) == EXPORT_FILES | {OUTPUT_MARKER, "mynotes.txt"}
    (out / "mynotes.txt").unlink()
    export(out, "int8")
    assert (out / "model.bin").read_text() == "int8\n" and "mynotes.txt" not in _files(out)

    older = tmp_path / "older"  # an older export's folder: no marker
    older.mkdir()
    for name in EXPORT_FILES:
        (older / name).write_text("old\n")
    export(older, "int8")
    assert (older / "model.bin").read_text() == "int8\n" and (older / OUTPUT_MARKER).is_file()
    for name in EXPORT_FILES:
        (older / name).write_text("old\n")
    (older / OUTPUT_MARKER).unlink()
    (older / "mynotes.txt").write_text("keep me")
    before = _files(older)
    with pytest.raises(ct2.ExportError, match=r"mynotes\.txt"):
        export(older, "int8")
    assert _files(older) == before

    data = tmp_path / "data-bin"  # the data tools' folder, all its files theirs: not a model folder
    data.mkdir()
    (data / "dict.src.txt").write_text("a 1\n")
    (data / OUTPUT_MARKER).write_text("written by prepare_data.py\n")
    with pytest.raises(ct2.ExportError, match="not a CTranslate2 model folder"):
        export(data, "int8")
    assert set(_files(data)) == {"dict.src.txt", OUTPUT_MARKER}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


@pytest.fixture(scope="module")
def stock(tiny_bin, tmp_path_factory):
    """A stock fairseq Transformer of ``tiny_bin`` after two updates: a checkpoint to export, quickly made."""
    pytest.importorskip("ctranslate2")
    save = tmp_path_factory.mktemp("stock")
    run(["fairseq-train", tiny_bin, "--task", "translation", *ARCH, *COMMON, "--criterion", "cross_entropy",
         "--optimizer", "adam", "--lr", "0.001", "--max-update", "2", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.mark.slow
def test_force_keeps_a_users_file_in_the_model_folder(stock, tiny_bin, tmp_path):
    out = tmp_path / "ct2"
    run(["python", EXPORT, "--path", stock, "--data", tiny_bin, "--out", out])
    (out / "mynotes.txt").write_text("keep me")
    before = _files(out)
    refused = run(["python", EXPORT, "--path", stock, "--data", tiny_bin, "--out", out, "--force",
                   "--quantization", "int8"], check=False)
    assert refused.returncode != 0 and "mynotes.txt" in refused.stderr, refused.stderr
    assert _files(out) == before
    (out / "mynotes.txt").unlink()
    run(["python", EXPORT, "--path", stock, "--data", tiny_bin, "--out", out, "--force", "--quantization", "int8"])
    assert json.loads((out / "smallvocab_export.json").read_text())["quantization"] == "int8"


# a stand-in for CTranslate2 (found first on PYTHONPATH) whose conversion writes part of the model and waits
FAKE_CONVERTER = """import os, time


class FairseqConverter:
    def __init__(self, *args, **kwargs):
        pass

    def convert(self, output_dir, vmap=None, quantization=None, force=False):
        os.makedirs(output_dir)
        with open(os.path.join(output_dir, "model.bin"), "wb") as f:
            f.write(b"half a model")
        pid = os.environ["FAKE_CONVERTER_PID"]
        with open(pid + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid + ".tmp", pid)  # whole, or not there
        time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_killed_export_leaves_nothing_the_next_one_keeps(stock, tiny_bin, tmp_path, sig):
    """SIGTERM or Ctrl-C while the model is converted: the half-written temporary folder is removed and the
    command exits as a killed one does (143, 130).  SIGKILL runs no cleanup: the next export removes what it
    left, and leaves alone the temporary folder of an export still running."""
    fake = tmp_path / "fake"
    (fake / "ctranslate2").mkdir(parents=True)
    (fake / "ctranslate2" / "__init__.py").write_text("")
    (fake / "ctranslate2" / "converters.py").write_text(FAKE_CONVERTER)
    pid_file = tmp_path / "converter.pid"
    env = dict(os.environ, FAKE_CONVERTER_PID=str(pid_file), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]))
    folder = tmp_path / "models"
    out = folder / "ct2"

    proc = subprocess.Popen([sys.executable, EXPORT, "--path", str(stock), "--data", str(tiny_bin), "--out",
                             str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the conversion did not start"
            time.sleep(0.05)
        assert [p.name for p in folder.iterdir() if p.name.startswith(".ct2")]  # the conversion's folder
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -9}[sig], stderr
    assert "Traceback" not in stderr, stderr
    left = sorted(p.name for p in folder.iterdir())
    if sig != "SIGKILL":
        assert left == []  # no model, no temporary folder
        return
    assert left and not out.exists()  # what SIGKILL left: the temporary folder and its half model
    live = folder / f".ct2.tmp-{os.getpid()}-running"  # an export still running (this process) writes there
    live.mkdir()
    run(["python", EXPORT, "--path", stock, "--data", tiny_bin, "--out", out])  # the real CTranslate2
    assert sorted(p.name for p in folder.iterdir()) == [live.name, "ct2"]
    assert (out / "model.bin").stat().st_size > 1000


def test_the_bench_scores_words_whatever_the_pieces(tmp_path, capsys):
    """bench_ctranslate2.py on sentencepiece data: the references and the model's hypotheses are joined into
    words, and a --compare file scores alike whether it holds words or pieces (a correct word-level file once
    scored 0.02 against pieces, unwarned); on word-level data nothing is joined."""
    from smallvocab_tools.deploy import ctranslate2_bench as bench

    words = ["a dog runs on the grass .", "two men sit on a bench ."]
    pieces = ["\u2581" + line.replace(" ", " \u2581") for line in words]
    pieces = [" ".join(p for token in line.split() for p in ([token[:2], token[2:]] if len(token) > 3 else [token]))
              for line in pieces]  # some words split in two pieces
    (tmp_path / "dict.de.txt").write_text("".join(f"{p} 1\n" for p in sorted({p for line in pieces for p in
                                                                               line.split()})))
    (tmp_path / "dict.en.txt").write_text("dog 1\nruns 1\n")
    assert bench.target_scheme(tmp_path, "de") == "sentencepiece" and bench.target_scheme(tmp_path, "en") is None
    assert bench.as_words(pieces, "sentencepiece") == words and bench.as_words(words, None) == words
    as_pieces = bench.bleu(bench.compared_words("tuned", pieces), words)
    assert "--compare tuned: its lines hold sentencepiece pieces; joined" in capsys.readouterr().err
    assert as_pieces == bench.bleu(bench.compared_words("tuned", words), words)
    assert as_pieces.bleu == pytest.approx(100.0) and str(as_pieces).startswith("BLEU 100.00 (nrefs:1|")
    assert capsys.readouterr().err == ""  # words are kept as they are
