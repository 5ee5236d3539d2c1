"""Deployment with CTranslate2: the vocabulary map made from a predictor (its lines are the predictor's own
rankings: an oracle computed here), and (slow) a tuned checkpoint exported with scripts/export_ctranslate2.py,
CTranslate2's translations equal to fairseq-generate's without the map and inside the map's allowance with it;
what cannot be exported is refused with the reason."""

import json
import re
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO, USER_DIR, make_dictionary, run

from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig
from smallvocab_tools.deploy.vmap import VocabMap, build_vmap, coverage

EXPORT = str(REPO / "scripts" / "export_ctranslate2.py")
BENCH = str(REPO / "scripts" / "bench_ctranslate2.py")


def _predictor(src_dict, tgt_dict, seed=0):
    torch.manual_seed(seed)
    model = VocabPredictor(VocabPredictorConfig(embed_dim=8), len(tgt_dict), source_dict=src_dict).eval()
    torch.nn.init.normal_(model.output.weight)  # fairseq starts it at 0: every word alike
    torch.nn.init.normal_(model.output.bias)
    model.set_prior(torch.rand(len(tgt_dict)))
    return model


def _task(src_dict, tgt_dict, sentences=()):
    """What build_vmap reads of a vocab_prediction task: its dictionaries and (for bigrams) a training split."""
    src = [torch.tensor(s + [src_dict.eos()]) for s in sentences]
    dataset = SimpleNamespace(src=src)
    return SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict, datasets={"train": dataset},
                           dataset=lambda split: dataset)


def _dicts():
    src, tgt = make_dictionary(30), make_dictionary(40)
    tgt.add_symbol(",")
    tgt.add_symbol(".")
    return src, tgt


def _ranking(model, src_ids, exclude):
    scores = model.predict(src_tokens=torch.tensor([src_ids]))[0]
    return [i for i in scores.argsort(descending=True).tolist() if i not in exclude]


def test_map_lines_are_the_predictors_rankings():
    src, tgt = _dicts()
    model = _predictor(src, tgt)
    vmap = build_vmap(model, _task(src, tgt), per_token=5, always=6)
    punctuation = {tgt.index(","), tgt.index(".")}
    words = [i for i in range(tgt.nspecial, len(tgt)) if i not in punctuation]
    frequent = sorted(words, key=lambda i: -float(model.prior[i]))[:6]
    assert set(vmap.always) == {tgt[i] for i in frequent} | {",", "."}
    fixed = set(range(tgt.nspecial)) | punctuation | set(frequent)
    assert len(vmap.words) == len(src) - src.nspecial
    for w in range(src.nspecial, len(src)):
        assert vmap.words[(src[w],)] == [tgt[i] for i in _ranking(model, [w], fixed)[:5]]


class _ProductPredictor:
    """A predictor whose scores of a word pair are not those of either word (the product of their rows)."""

    def __init__(self, src_dict, tgt_dict):
        torch.manual_seed(3)
        self.table = torch.randn(len(src_dict), len(tgt_dict))
        self.prior = torch.rand(len(tgt_dict))

    def predict(self, src_tokens):
        return torch.sigmoid(self.table[src_tokens].prod(1))


def test_bigram_lines_add_what_their_words_alone_do_not_allow():
    src, tgt = _dicts()
    model = _ProductPredictor(src, tgt)
    a, b, c = 4, 5, 6
    task = _task(src, tgt, [[a, b, c], [a, b], [b, c, a], [c]])  # (a b) twice, (b c) twice, (c a) once
    vmap = build_vmap(model, task, per_token=6, always=3, bigrams=2)
    assert {key for key in vmap.words if len(key) == 2} == {(src[a], src[b]), (src[b], src[c])}
    fixed = {i for i in range(len(tgt)) if tgt[i] in vmap.always or i < tgt.nspecial}
    for x, y in ((a, b), (b, c)):
        assert vmap.words[(src[x],)] == [tgt[i] for i in _ranking(model, [x], fixed)[:6]]
        alone = set(vmap.words[(src[x],)]) | set(vmap.words[(src[y],)])
        want = [tgt[i] for i in _ranking(model, [x, y], fixed)[:6] if tgt[i] not in alone]
        assert want and vmap.words[(src[x], src[y])] == want


def test_map_written_as_ctranslate2_reads_it(tmp_path):
    vmap = VocabMap(always=[".", "the"], words={("a",): ["x", "y"], ("a", "b"): ["z"]})
    path = tmp_path / "vmap.txt"
    vmap.write(path)
    assert path.read_text() == "\t. the\na\tx y\na b\tz\n"
    assert VocabMap.read(path) == vmap
    assert vmap.allowed(["b", "a", "b"]) == {".", "the", "x", "y", "z"}
    assert vmap.allowed(["b", "a"]) == {".", "the", "x", "y"}
    assert list(tmp_path.iterdir()) == [path]  # no temporary left behind


def test_map_write_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "vmap.txt"
    path.write_text("\told\n")

    class Broken(VocabMap):
        def lines(self):
            yield "\tnew"
            raise OSError("disk full")

    with pytest.raises(OSError):
        Broken(always=["new"]).write(path)
    assert path.read_text() == "\told\n" and list(tmp_path.iterdir()) == [path]


def test_sizes_are_checked():
    src, tgt = _dicts()
    with pytest.raises(ValueError, match="per_token >= 1"):
        build_vmap(_predictor(src, tgt), _task(src, tgt), per_token=0)


# -- end to end (slow): fairseq-train, the export command, CTranslate2 -----------------------------------

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
    run(["fairseq-train", tiny_bin, *plugin, "--criterion", "reinforce_gleu", "--optimizer", "sgd", "--lr", "0.01",
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
                "--vmap-per-token", "10", "--vmap-always", "20", "--vmap-bigrams", "30", "--k", "50"])
    assert "use_vmap=True" in done.stdout
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


def _vp_task(data):
    from fairseq_smallvocab.tasks.vocab_prediction import VocabPredictionConfig, VocabPredictionTask

    config = VocabPredictionConfig(data=str(data))
    config.train_subset, config.dataset_impl = "train", None
    return VocabPredictionTask.setup_task(config)


def test_coverage_of_a_map_that_allows_everything_and_of_one_that_allows_little(tiny_bin):
    task = _vp_task(tiny_bin)
    src, tgt = task.source_dictionary, task.target_dictionary
    model = _predictor(src, tgt)
    words = len(tgt) - tgt.nspecial
    everything = coverage(build_vmap(model, task, per_token=words, always=0), model, task, "valid", 40, batch=8)
    assert everything["candidates_covered"] == everything["reference_in_map"] == 100.0
    assert everything["allowed_per_sentence"] == everything["allowed_per_batch_8"] == len(tgt)
    assert everything["sentences"] == 40 and everything["k"] == 40

    little = coverage(build_vmap(model, task, per_token=1, always=0), model, task, "valid", 40, batch=8)
    assert little["candidates_covered"] < 100 and little["reference_in_map"] < 100
    assert little["reference_in_candidates"] == everything["reference_in_candidates"]  # the map plays no part
    punctuation = sum(not any(ch.isalnum() for ch in tgt[i]) for i in range(tgt.nspecial, len(tgt)))
    longest = max(len(task.dataset("valid").src[i]) for i in range(40)) if "valid" in task.datasets else 0
    assert little["allowed_per_sentence"] <= tgt.nspecial + punctuation + longest
    assert little["allowed_per_sentence"] <= little["allowed_per_batch_8"] < len(tgt)
