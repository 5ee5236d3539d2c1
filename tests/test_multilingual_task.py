"""translation_multi_smallvocab (fairseq's translation_multi_simple_epoch with candidates): each row's
candidates from its own pair's predictor, fairseq's specials and the row's target language token in every
row (not counted in K), every gold word in training rows; the row's pair as the model is told it; the
predictors' dictionaries checked against the shared one; refused settings.  Rewards, logs and the end to
end runs: test_multilingual_end_to_end.py."""

import re

import pytest
import torch
from helpers import copy_folder, cut_file, poke_token
from multilingual_helpers import (
    ML_K,
    PAIRS,
    ml_task,
    pair_batch,
    random_predictor,
    task_with_predictors,
)
from vocab_predictor_helpers import vp_task

from fairseq_smallvocab.candidates.multilingual import parse_predictors
from fairseq_smallvocab.predictor.scoring import select_candidates


def test_prepare_multilingual_writes_one_shared_dictionary(ml_bin):
    texts = {lang: (ml_bin / f"dict.{lang}.txt").read_text() for lang in ("en", "de", "fr")}
    assert texts["en"] == texts["de"] == texts["fr"]
    words = {line.split()[0] for line in texts["en"].splitlines()}
    for pair, lang in (("en-de", "en"), ("en-de", "de"), ("en-fr", "fr")):  # every language's words
        assert set((ml_bin / "raw" / pair / f"train.{lang}").read_text().split()) <= words
    for pair in ("en-de", "en-fr"):
        assert (ml_bin / f"train.{pair}.{pair[-2:]}.bin").is_file()


def test_parse_predictors():
    assert parse_predictors("vp/checkpoint_best.pt") == {(None, "*"): "vp/checkpoint_best.pt"}
    assert parse_predictors("en-de:a.pt, fr:b.pt") == {("en", "de"): "a.pt", (None, "fr"): "b.pt"}
    assert parse_predictors(None) == {}
    with pytest.raises(ValueError, match="one per pair"):
        parse_predictors("en-de:a.pt,b.pt")
    with pytest.raises(ValueError, match="twice"):
        parse_predictors("de:a.pt,de:b.pt")


@pytest.mark.parametrize("split, gold", [("train", True), ("valid", False)])
def test_each_row_holds_the_specials_its_language_token_and_its_own_pairs_words(ml_bin, split, gold):
    task, models = task_with_predictors(ml_bin)
    sample = pair_batch(task, split)
    task.attach(sample, gold=gold)
    rows, target = sample["net_input"]["candidates"], sample["target"]
    d = task.target_dictionary
    assert rows.shape == (target.size(0), ML_K + 1)  # the language token is not counted in K
    assert rows[:, :4].eq(torch.arange(4)).all()
    assert rows[:, 4].equal(target[:, 0])  # the row's own language token, the first token it must emit
    langs = {d.index("__de__"): "de", d.index("__fr__"): "fr"}
    assert set(langs) == set(target[:, 0].tolist())  # the batch mixes the pairs
    words = rows[:, 5:]
    assert (words >= 4).all() and (words < len(models["de"].prior)).all()  # words only: no specials, no langtoks
    for i, row in enumerate(rows):
        assert len(set(row.tolist())) == ML_K + 1
        model = models[langs[int(target[i, 0])]]
        src = sample["net_input"]["src_tokens"][i:i + 1]
        src = src.masked_fill(src >= len(model.embed.weight), d.pad())
        scores = model.predict(src_tokens=src)
        scores[:, :4] = -1
        if gold:
            assert set(target[i].tolist()) <= set(row.tolist())  # every gold word, its language token too
            forced = torch.zeros_like(scores)
            ids = target[i][(target[i] >= 4) & (target[i] < scores.size(1))]
            forced[0, ids] = 1
            want = select_candidates(scores, ML_K - 4, gold=forced)[0]
        else:
            want = select_candidates(scores, ML_K - 4)[0]
        assert words[i].tolist() == want.tolist()  # its own pair's predictor's ranking


def test_a_pair_without_a_predictor_is_named(ml_bin):
    task = ml_task(ml_bin, "--vocab-predictor", "en-de:de.pt", "--small-vocab-size", str(ML_K))
    task.predictors()._loaded["de.pt"] = task_with_predictors(ml_bin)[0].predictors()._loaded["de.pt"]
    sample = pair_batch(task, "train")
    with pytest.raises(ValueError, match="no predictor for en-fr"):
        task.attach(sample, gold=True)


def _given(ml_bin, monkeypatch, spec, records, data=None, **langs):
    """The task given ``--vocab-predictor spec``, each path loading (load_predictor) an untrained predictor of
    ``data`` (default: the multilingual folder's en-de, whose shape every pair's has) whose checkpoint records
    ``records[path]``, its -s / -t (None: trained without)."""
    def load(path):
        ptask = vp_task(data or ml_bin, **(langs or {"source_lang": "en", "target_lang": "de"}))
        ptask.recorded_langs = records[path]
        return random_predictor(ptask, 0), ptask

    monkeypatch.setattr("fairseq_smallvocab.candidates.multilingual.load_predictor", load)
    return ml_task(ml_bin, "--vocab-predictor", spec, "--small-vocab-size", str(ML_K))


def _batch_of(task, tgt, split="valid", n=8):
    """A batch of the rows of one target language (their first target token is its language token)."""
    if split not in task.datasets:  # (fairseq 0.12's multilingual task cannot load a split twice)
        task.load_dataset(split)
    ds, langtok = task.datasets[split], task.target_dictionary.index(f"__{tgt}__")
    return ds.collater([ds[i] for i in range(len(ds)) if int(ds[i]["target"][0]) == langtok][:n])


DE, FR = ("en", "de"), ("en", "fr")


@pytest.mark.parametrize("spec, records, tgt, refused", [
    ("en-de:fr.pt,en-fr:de.pt", {"de.pt": DE, "fr.pt": FR}, "fr",  # swapped
     r"de\.pt was trained on en-de \(the -s / -t its checkpoint records\), but it is given under en-fr "
     r"\(--vocab-predictor \.\.\.en-fr:de\.pt\.\.\.\) and would predict the words of en-fr: give each pair the "
     r"predictor trained on it \(en-de:de\.pt,en-fr:PATH\)"),
    ("en-de:fr.pt,en-fr:de.pt", {"de.pt": DE, "fr.pt": FR}, "de", r"fr\.pt was trained on en-fr.*under en-de "),
    ("de:fr.pt,fr:de.pt", {"de.pt": DE, "fr.pt": FR}, "fr", r"de\.pt was trained on en-de.*under fr "),
    ("de:fr.pt,fr:de.pt", {"de.pt": (None, "de"), "fr.pt": (None, "fr")}, "fr",  # -t only
     r"de\.pt was trained on de .*under fr .*\(de:de\.pt,en-fr:PATH\)"),
    ("de.pt", {"de.pt": DE}, "fr", r"de\.pt was trained on en-de.*as the one predictor for every pair "
                                   r"\(--vocab-predictor de\.pt\) and would predict the words of en-fr"),
    ("en-de:de.pt,en-fr:fr.pt", {"de.pt": ("fr", "de"), "fr.pt": FR}, "de",  # another source language
     r"de\.pt was trained on fr-de.*under en-de"),
    ("en-de:de.pt,en-fr:fr.pt", {"de.pt": DE, "fr.pt": FR}, "de", None),
    ("en-de:de.pt,en-fr:fr.pt", {"de.pt": DE, "fr.pt": FR}, "fr", None),
    ("de:de.pt,fr:fr.pt", {"de.pt": DE, "fr.pt": FR}, "fr", None),
    ("de:de.pt,fr:fr.pt", {"de.pt": (None, "de"), "fr.pt": (None, "fr")}, "fr", None),
    ("de.pt", {"de.pt": DE}, "de", None),  # one pair's predictor for the rows of that pair
])
def test_a_predictor_serves_only_the_pair_its_checkpoint_records(ml_bin, monkeypatch, spec, records, tgt, refused):
    """Swapped predictors (under pairs' or target languages' keys), one pair's for every pair, or one of another
    source language are refused at the first row of a pair they were not trained on (they would give it the
    other pair's words: 88.6% of the gold words outside the rows), naming the key, what the file records and
    the fix; each predictor on its own pair's rows is taken."""
    task = _given(ml_bin, monkeypatch, spec, records)
    sample = _batch_of(task, tgt)
    if refused is None:
        task.attach(sample, gold=True)
        assert sample["net_input"]["candidates"].size(0) == sample["target"].size(0)
    else:
        with pytest.raises(ValueError, match="the vocabulary predictor " + refused):
            task.attach(sample, gold=True)


@pytest.mark.parametrize("recorded, said", [((None, None), r"records no language pair \(trained without -s / -t\)"),
                                            (("src", "tgt"), "records the pair src-tgt, not languages of this model")])
def test_a_predictor_that_records_no_pair_of_the_model_is_taken_with_a_warning(ml_bin, monkeypatch, caplog,
                                                                               recorded, said):
    """A predictor trained without -s / -t (fairseq records none) or on another folder's language names cannot
    be compared: taken (older predictors keep working), with a warning once for each file."""
    task = _given(ml_bin, monkeypatch, "en-de:fr.pt,en-fr:de.pt", {"de.pt": recorded, "fr.pt": recorded})
    sample = pair_batch(task, "valid")  # both pairs
    with caplog.at_level("WARNING", logger="fairseq_smallvocab.candidates.multilingual"):
        for _ in range(2):  # two batches
            task.attach(sample, gold=False)
    warned = [r.getMessage() for r in caplog.records if "without checking that it was trained" in r.getMessage()]
    assert len(warned) == 2, warned
    assert any(re.match(rf"the vocabulary predictor de\.pt {said}: it is taken under en-fr", m) for m in warned)


def test_a_predictor_told_other_target_languages_is_refused_for_a_new_one(ml_bin, tmp_path, monkeypatch):
    """A predictor trained on prepare_target_tagged's data of en-de alone reads __de__, not __fr__: refused for
    the rows of en-fr (it would predict them as German), taken for those of en-de."""
    from smallvocab_tools.data.multilingual_prep import prepare_target_tagged

    prepare_target_tagged(ml_bin, tmp_path / "tagged", PAIRS[:1], log=lambda m: None)
    task = _given(ml_bin, monkeypatch, "all.pt", {"all.pt": ("src", "tgt")}, data=tmp_path / "tagged",
                  source_lang="src", target_lang="tgt")
    task.attach(_batch_of(task, "de"), gold=False)
    with pytest.raises(ValueError, match=r"the vocabulary predictor all\.pt was told the target languages __de__ in "
                                         r"training \(prepare_target_tagged's data\), not __fr__, but it is given as "
                                         r"the one predictor for every pair"):
        task.attach(_batch_of(task, "fr"), gold=False)


@pytest.mark.parametrize("damage", ["id", "cut"])
@pytest.mark.parametrize("split, pair", [("train", "en-de"), ("test", "en-fr")])
def test_damaged_multilingual_data_is_named_when_the_split_is_loaded(ml_bin, tmp_path, damage, split, pair):
    """The checks of every other plugin task (binarized.check_binarized): a token id outside the shared
    dictionary and a .bin cut short are named with the file and the fix, in training and in decoding (fairseq
    would train into an IndexError, decode to a BLEU, or say "buffer is smaller than requested size")."""
    data = copy_folder(ml_bin, tmp_path)
    tgt = pair.split("-")[1]
    prefix = data / f"{split}.{pair}.{tgt}"
    task = ml_task(data, "--vocab-predictor", "x.pt", target_lang=None if split == "train" else tgt)
    if damage == "id":
        poke_token(prefix, 3, len(task.target_dictionary) + 3)
        said = rf"{re.escape(str(prefix))}\.bin: sentence 3 holds token id {len(task.target_dictionary) + 3}"
    else:
        cut_file(prefix.with_name(prefix.name + ".bin"), -10)
        said = rf"{re.escape(str(prefix))}\.bin is truncated"
    with pytest.raises(ValueError, match=said + ".*again"):
        task.load_dataset(split)


def test_the_rows_pair_is_what_the_model_is_told(ml_bin):
    task, _ = task_with_predictors(ml_bin)
    sample = pair_batch(task, "valid")
    pairs, langtoks = task.row_pairs(sample)
    d = task.target_dictionary
    assert [f"__{tgt}__" for _, tgt in pairs] == [d[t] for t in sample["target"][:, 0].tolist()]
    assert {src for src, _ in pairs} == {"en"}  # from the encoder's language token
    assert task.target_languages(sample) == [tgt for _, tgt in pairs]
    assert task.symbols_to_strip() == {d.index(f"__{lang}__") for lang in ("en", "de", "fr")}
    broken = dict(sample, target=sample["target"].clone())
    broken["target"][0, 0] = 10
    with pytest.raises(ValueError, match="not a language token"):
        task.row_pairs(broken)
    decoding = ml_task(ml_bin, "--vocab-predictor", "en-fr:fr.pt", target_lang="fr")
    no_target = {"net_input": sample["net_input"]}  # fairseq-interactive: the language decoded
    assert {tgt for _, tgt in decoding.row_pairs(no_target)[0]} == {"fr"}


def test_a_predictor_with_another_dictionary_is_refused(ml_bin, tiny_bin):
    task, _ = task_with_predictors(ml_bin)
    other = vp_task(tiny_bin)
    with pytest.raises(ValueError, match="another target dictionary"):
        task.predictors().check_dictionary("vp.pt", other.target_dictionary)
    with pytest.raises(ValueError, match="another source dictionary"):
        task.predictors().source_map("vp.pt", other.source_dictionary)
    ours = vp_task(ml_bin, source_lang="en", target_lang="de")
    task.predictors().check_dictionary("vp.pt", ours.target_dictionary)  # the shared one: accepted
    assert task.predictors().source_map("vp.pt", ours.source_dictionary)[:len(ours.source_dictionary)].equal(
        torch.arange(len(ours.source_dictionary)))


def test_one_predictor_told_the_target_language_serves_every_pair(ml_bin, tmp_path):
    """A predictor trained on prepare_target_tagged's data (sources behind their target language's token)
    reads each row's words and its target language's token, mapped to its own ids."""
    from smallvocab_tools.data.multilingual_prep import prepare_target_tagged

    tagged = prepare_target_tagged(ml_bin, tmp_path / "tagged", PAIRS, log=lambda m: None)
    assert tagged["subsets"] == {"valid": "en-de", "valid1": "en-fr"}
    task = ml_task(ml_bin, "--vocab-predictor", "all.pt", "--small-vocab-size", str(ML_K))
    ptask = vp_task(tmp_path / "tagged", source_lang="src", target_lang="tgt")
    model = random_predictor(ptask, 0)
    src_dict = ptask.source_dictionary
    task.predictors()._loaded["all.pt"] = (model, src_dict)
    sample = pair_batch(task, "valid")
    task.attach(sample, gold=False)
    rows, d = sample["net_input"]["candidates"], task.target_dictionary
    for i in range(rows.size(0)):
        words = [src_dict.index(d[t]) for t in sample["net_input"]["src_tokens"][i].tolist()
                 if d[t] in src_dict.indices]
        tag = src_dict.index(d[int(sample["target"][i, 0])])  # __de__ or __fr__
        assert d[int(sample["target"][i, 0])] in ("__de__", "__fr__") and tag != src_dict.unk()
        scores = model.predict(src_tokens=torch.tensor([words + [tag]]))
        scores[:, :4] = -1
        assert rows[i, 5:].tolist() == select_candidates(scores, ML_K - 4)[0].tolist()


def test_refused_settings(ml_bin):
    with pytest.raises(ValueError, match="lang-tok-replacing-bos-eos"):
        ml_task(ml_bin, "--vocab-predictor", "x.pt", "--lang-tok-replacing-bos-eos")
    with pytest.raises(ValueError, match="leaves no room"):
        ml_task(ml_bin, "--vocab-predictor", "x.pt", "--small-vocab-size", "3")
    task = ml_task(ml_bin, "--small-vocab-size", "50")
    with pytest.raises(ValueError, match="needs --vocab-predictor"):
        task.build_model(task.args)
    assert ml_task(ml_bin, "--small-vocab-size", "0").k == 0  # the full softmax, the same model
