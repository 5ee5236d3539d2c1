"""The vocabulary map CTranslate2 reads, made from a predictor: its lines are the predictor's own rankings (an
oracle computed here), bigram lines add what their words alone do not allow, the file is written as
CTranslate2 reads it and never left partial, sizes are checked, and the map is sized until it allows, on a
split, the reference words the K candidates hold (its coverage reported).  The export itself:
test_ctranslate2_export.py."""

from types import SimpleNamespace

import pytest
import torch
from helpers import make_dictionary

from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig
from smallvocab_tools.deploy.vmap import VocabMap, build_vmap, coverage, describe_coverage, sized_vmap


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


def test_the_map_is_sized_until_it_allows_what_the_candidates_allow(tiny_bin):
    """A user's case: the default map allowed 87% of their reference words where the K candidates held 95% (-12 BLEU).
    Per-token lines double from the start until the map allows, on the split, the reference words within a point
    of the candidates, or reach K; each size tried is the coverage of the map built at that size."""
    task = _vp_task(tiny_bin)
    model = _predictor(task.source_dictionary, task.target_dictionary)
    vmap, per_token, cover, tried = sized_vmap(model, task, "valid", 40, start=1, always=0, batch=8)
    target = cover["reference_in_candidates"] - 1.0
    sizes = [n for n, _ in tried]
    assert len(sizes) >= 3 and sizes == [min(2 ** i, 40) for i in range(len(sizes))]
    for n, allowed in tried:
        built = build_vmap(model, task, per_token=n, always=0)
        assert allowed == coverage(built, model, task, "valid", 40, batch=8)["reference_in_map"]
    assert all(allowed < target for _, allowed in tried[:-1])  # stopped at the first size that does
    assert tried[-1][1] >= target or per_token == 40
    assert per_token == sizes[-1] and vmap == build_vmap(model, task, per_token=per_token, always=0)
    assert cover == coverage(vmap, model, task, "valid", 40, batch=8)

    said = describe_coverage(cover, "valid", per_token, tried)
    assert f"{per_token} words per source word" in said[0] and "raised" in said[1]
    assert not any(line.startswith("warning") for line in said) == (tried[-1][1] >= target)
    short = dict(cover, reference_in_map=cover["reference_in_candidates"] - 1.5)
    assert describe_coverage(short, "valid", 1)[-1].startswith("warning: the map allows 1.5 points fewer")
    close = dict(cover, reference_in_map=cover["reference_in_candidates"] - 0.5)
    assert len(describe_coverage(close, "valid", 1)) == 1  # within a point: no warning, nothing raised
