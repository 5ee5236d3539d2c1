"""translation_multi_smallvocab (fairseq's translation_multi_simple_epoch with candidates): each row's
candidates from its own pair's predictor, fairseq's specials and the row's target language token in every
row (not counted in K), every gold word in training rows; the row's pair as the model is told it; the
predictors' dictionaries checked against the shared one; rewards without language tokens, with each
hypothesis's target language; each target language's own mean reward logged. End to end (slow): a stock
multilingual checkpoint trained by stock fairseq fine-tunes with CE and REINFORCE and decodes with
fairseq-generate and fairseq-interactive; inside rows that hold every word it decodes as stock fairseq does;
stock fairseq decodes what it wrote."""

import re
import sys
import textwrap

import pytest
import torch
from fairseq.data import Dictionary
from helpers import copy_folder, cut_file, launch_two, poke_token, run
from multilingual_helpers import MODEL_ARGS, OURS, PAIRS, STOCK, ml_task, write_three_way
from vocab_predictor_helpers import TRAIN_ARGS, untrained_model, vp_task

from fairseq_smallvocab.candidates.multilingual import parse_predictors
from fairseq_smallvocab.predictor.scoring import select_candidates
from fairseq_smallvocab.reinforce.rewards import without_ids

K = 60


@pytest.fixture(scope="module")
def ml_bin(tmp_path_factory):
    from smallvocab_tools.data.multilingual_prep import prepare_multilingual

    folder = tmp_path_factory.mktemp("ml")
    raw = write_three_way(folder / "raw")
    splits = {"train": "train", "valid": "valid", "test": "test"}
    prepare_multilingual(raw, folder / "bin", PAIRS, splits, min_count=1, log=lambda m: None)
    return folder / "bin"


def _random_predictor(ptask, seed):
    """An untrained predictor whose output layer is drawn too (fairseq starts it at 0: every word alike)."""
    torch.manual_seed(seed)
    model = untrained_model(ptask).eval()
    torch.nn.init.normal_(model.output.weight)
    torch.nn.init.normal_(model.output.bias)
    return model


def _task_with_predictors(ml_bin, seed_fr=1):
    """The task (K = 60) with an untrained predictor per pair (each its own seed), loaded in place."""
    task = ml_task(ml_bin, "--vocab-predictor", "en-de:de.pt,en-fr:fr.pt", "--small-vocab-size", str(K))
    models = {}
    for tgt, seed in (("de", 0), ("fr", seed_fr)):
        ptask = vp_task(ml_bin, source_lang="en", target_lang=tgt)
        models[tgt] = _random_predictor(ptask, seed)
        task.predictors()._loaded[f"{tgt}.pt"] = (models[tgt], ptask.source_dictionary)
        task.predictors()._trained_on[f"{tgt}.pt"] = ("en", tgt)  # what its checkpoint would record
    return task, models


def _batch(task, split, n=12):
    task.load_dataset(split)
    ds = task.datasets[split]
    return ds.collater([ds[i] for i in torch.randperm(len(ds), generator=torch.Generator().manual_seed(0))[:n]])


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
    task, models = _task_with_predictors(ml_bin)
    sample = _batch(task, split)
    task.attach(sample, gold=gold)
    rows, target = sample["net_input"]["candidates"], sample["target"]
    d = task.target_dictionary
    assert rows.shape == (target.size(0), K + 1)  # the language token is not counted in K
    assert rows[:, :4].eq(torch.arange(4)).all()
    assert rows[:, 4].equal(target[:, 0])  # the row's own language token, the first token it must emit
    langs = {d.index("__de__"): "de", d.index("__fr__"): "fr"}
    assert set(langs) == set(target[:, 0].tolist())  # the batch mixes the pairs
    words = rows[:, 5:]
    assert (words >= 4).all() and (words < len(models["de"].prior)).all()  # words only: no specials, no langtoks
    for i, row in enumerate(rows):
        assert len(set(row.tolist())) == K + 1
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
            want = select_candidates(scores, K - 4, gold=forced)[0]
        else:
            want = select_candidates(scores, K - 4)[0]
        assert words[i].tolist() == want.tolist()  # its own pair's predictor's ranking


def test_a_pair_without_a_predictor_is_named(ml_bin):
    task = ml_task(ml_bin, "--vocab-predictor", "en-de:de.pt", "--small-vocab-size", str(K))
    task.predictors()._loaded["de.pt"] = _task_with_predictors(ml_bin)[0].predictors()._loaded["de.pt"]
    sample = _batch(task, "train")
    with pytest.raises(ValueError, match="no predictor for en-fr"):
        task.attach(sample, gold=True)


def _given(ml_bin, monkeypatch, spec, records, data=None, **langs):
    """The task given ``--vocab-predictor spec``, each path loading (load_predictor) an untrained predictor of
    ``data`` (default: the multilingual folder's en-de, whose shape every pair's has) whose checkpoint records
    ``records[path]``, its -s / -t (None: trained without)."""
    def load(path):
        ptask = vp_task(data or ml_bin, **(langs or {"source_lang": "en", "target_lang": "de"}))
        ptask.recorded_langs = records[path]
        return _random_predictor(ptask, 0), ptask

    monkeypatch.setattr("fairseq_smallvocab.candidates.multilingual.load_predictor", load)
    return ml_task(ml_bin, "--vocab-predictor", spec, "--small-vocab-size", str(K))


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
    sample = _batch(task, "valid")  # both pairs
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
    task, _ = _task_with_predictors(ml_bin)
    sample = _batch(task, "valid")
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
    task, _ = _task_with_predictors(ml_bin)
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
    task = ml_task(ml_bin, "--vocab-predictor", "all.pt", "--small-vocab-size", str(K))
    ptask = vp_task(tmp_path / "tagged", source_lang="src", target_lang="tgt")
    model = _random_predictor(ptask, 0)
    src_dict = ptask.source_dictionary
    task.predictors()._loaded["all.pt"] = (model, src_dict)
    sample = _batch(task, "valid")
    task.attach(sample, gold=False)
    rows, d = sample["net_input"]["candidates"], task.target_dictionary
    for i in range(rows.size(0)):
        words = [src_dict.index(d[t]) for t in sample["net_input"]["src_tokens"][i].tolist()
                 if d[t] in src_dict.indices]
        tag = src_dict.index(d[int(sample["target"][i, 0])])  # __de__ or __fr__
        assert d[int(sample["target"][i, 0])] in ("__de__", "__fr__") and tag != src_dict.unk()
        scores = model.predict(src_tokens=torch.tensor([words + [tag]]))
        scores[:, :4] = -1
        assert rows[i, 5:].tolist() == select_candidates(scores, K - 4)[0].tolist()


def test_refused_settings(ml_bin):
    with pytest.raises(ValueError, match="lang-tok-replacing-bos-eos"):
        ml_task(ml_bin, "--vocab-predictor", "x.pt", "--lang-tok-replacing-bos-eos")
    with pytest.raises(ValueError, match="leaves no room"):
        ml_task(ml_bin, "--vocab-predictor", "x.pt", "--small-vocab-size", "3")
    task = ml_task(ml_bin, "--small-vocab-size", "50")
    with pytest.raises(ValueError, match="needs --vocab-predictor"):
        task.build_model(task.args)
    assert ml_task(ml_bin, "--small-vocab-size", "0").k == 0  # the full softmax, the same model


def test_language_tokens_are_taken_out_of_rewards():
    tokens = torch.tensor([[9, 5, 6, 2, 1], [5, 9, 9, 7, 2]])
    out, lengths = without_ids(tokens, {9}, pad=1, lengths=torch.tensor([3, 4]))
    assert out.tolist() == [[5, 6, 2, 1, 1], [5, 7, 2, 1, 1]]
    assert lengths.tolist() == [2, 2]
    out, none = without_ids(tokens, {9, 7}, pad=1)
    assert out.tolist() == [[5, 6, 2, 1, 1], [5, 2, 1, 1, 1]] and none is None


LANG_REWARD = """
def score(hypotheses, references, sources, target_lang):
    return [{"de": 0.25, "fr": 0.75}[lang] for lang in target_lang]
"""


def test_each_target_language_logs_its_own_reward(ml_bin, tmp_path, monkeypatch):
    """reward/de and reward/fr: the mean reward of each language's samples (a reward that pays 0.25 for German
    and 0.75 for French), over batches of different mixes, the same when fairseq's distributed trainer sums the
    logs first; the mean reward is their mix."""
    from helpers import same_reduced_values

    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lang_reward.py").write_text(LANG_REWARD)
    task, _ = _task_with_predictors(ml_bin)
    model = task.build_model(task.args).eval()
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(rl_samples=3, rl_baseline="loo",
                                                            reward="python:lang_reward.score"))
    task.load_dataset("valid")
    dataset, logs, langs = task.datasets["valid"], [], []
    for rows in (range(0, 80, 7), range(3, 8)):  # both pairs (40 sentences each), then one
        sample = dataset.collater([dataset[i] for i in rows])
        n = len(rows)
        task.attach(sample, gold=False)
        langs += task.target_languages(sample)
        logs.append(crit(model, sample)[2])
        assert logs[-1]["samples/de"] + logs[-1]["samples/fr"] == 3 * n
    assert {"de", "fr"} <= set(langs[:12]) and set(langs[12:]) == {"de"}  # both pairs, then German alone
    assert logs[0].keys() == logs[1].keys()  # the same keys in every batch: the all-reduce sums key by key
    values = same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), logs)
    assert values["reward/de"] == pytest.approx(25.0) and values["reward/fr"] == pytest.approx(75.0)
    share_fr = langs.count("fr") / len(langs)
    assert values["reward"] == pytest.approx(25.0 * (1 - share_fr) + 75.0 * share_fr, abs=0.01)
    german = [dict(log, **{"samples/fr": 0.0, "reward/fr": 0.0}) for log in logs]  # no French sample reduced
    assert "reward/fr" not in same_reduced_values(lambda outs: task.reduce_metrics(outs, crit), german)
    sys.modules.pop("lang_reward", None)


# -- end to end: stock fairseq's checkpoint, fine-tuned, tuned and decoded -----------------------------------

RECORDING_REWARD = """
    import json

    def score(hypotheses, references, sources, target_lang):
        with open("calls.jsonl", "a") as f:
            f.write(json.dumps([hypotheses, references, target_lang]) + "\\n")
        return [len(set(h.split()) & set(r.split())) / max(1, len(r.split())) for h, r in zip(hypotheses, references)]
"""


@pytest.fixture(scope="module")
def trained(ml_bin, tmp_path_factory):
    """A stock multilingual checkpoint (stock fairseq, 6 epochs), a predictor per pair, and this task's CE
    fine-tuning of the stock checkpoint (small softmax)."""
    out = tmp_path_factory.mktemp("ml-runs")
    run(["fairseq-train", ml_bin, *STOCK, *MODEL_ARGS, "--criterion", "label_smoothed_cross_entropy",
         "--label-smoothing", "0.1", "--max-epoch", "6", "--save-dir", out / "stock"])
    spec = []
    for tgt in ("de", "fr"):
        vp = run(["fairseq-train", ml_bin, *TRAIN_ARGS, "-s", "en", "-t", tgt, "--max-epoch", "3", "--recall-at",
                  str(K), "--best-checkpoint-metric", f"recall@{K}", "--maximize-best-checkpoint-metric",
                  "--save-dir", out / f"vp-{tgt}"])
        assert f"best_recall@{K} " in vp.stdout + vp.stderr  # the best checkpoint is chosen by recall at K
        spec.append(f"en-{tgt}:{out / f'vp-{tgt}' / 'checkpoint_best.pt'}")
    spec = ",".join(spec)
    result = run(["fairseq-train", ml_bin, *OURS, *MODEL_ARGS, "--vocab-predictor", spec, "--small-vocab-size",
                  str(K), "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                  "--finetune-from-model", out / "stock" / "checkpoint_last.pt", "--max-epoch", "2",
                  "--save-dir", out / "ce"])
    log = result.stderr + result.stdout
    outside = re.search(r"valid on 'valid' subset .*gold_outside_cands ([\d.]+)", log)
    assert outside, log[-3000:]  # validation inside predicted candidates
    # said when valid loads: K, |V| and the share of its references outside the rows the predictors make, which is
    # what validation measures
    fit = re.search(rf"candidates for valid: K = {K} of \|V\| = [\d,]+ target entries \([\d.]+%\); ([\d.]+)% of "
                    r"the reference words", log)
    assert fit and float(fit.group(1)) == pytest.approx(float(outside.group(1)), abs=0.006), log[-3000:]
    return out, spec


def _hypotheses(output):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", output, re.M)}


@pytest.mark.slow
def test_reinforce_tunes_a_multilingual_model_with_a_reward_of_its_own(trained, ml_bin, tmp_path, monkeypatch):
    out, spec = trained
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recording_reward.py").write_text(textwrap.dedent(RECORDING_REWARD))
    run(["fairseq-train", ml_bin, *OURS, *MODEL_ARGS, "--vocab-predictor", spec, "--small-vocab-size", str(K),
         "--criterion", "smallvocab_reinforce", "--rl-samples", "2", "--rl-baseline", "loo",
         "--reward", "python:recording_reward.score", "--finetune-from-model", out / "ce" / "checkpoint_last.pt",
         "--max-update", "3", "--save-dir", tmp_path / "rl"], cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)})
    import json

    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(calls) >= 3
    for hypotheses, references, langs in calls:
        assert len(hypotheses) == len(references) == len(langs) and set(langs) <= {"de", "fr"}
        assert not any("__" in text for text in hypotheses + references)  # no language token in the strings
        for ref, lang in zip(references, langs):  # French words all begin with f, German ones do not
            assert all(w.startswith("f") for w in ref.split()) == (lang == "fr")
    assert (tmp_path / "rl" / "checkpoint_last.pt").is_file()
    sys.modules.pop("recording_reward", None)


@pytest.mark.slow
def test_two_workers_log_each_languages_reward(trained, ml_bin, tmp_path):
    """fairseq's DDP with 2 CPU processes (gloo) tuning the multilingual model: the workers' logs, each
    language's reward among them, are summed key by key (no worker waits on a key another lacks), in
    training and validation; the mean reward lies between the languages' (their mix)."""
    out, spec = trained
    outs = launch_two([ml_bin, *OURS, *MODEL_ARGS, "--vocab-predictor", spec, "--small-vocab-size", K,
                       "--criterion", "smallvocab_reinforce", "--rl-samples", "2", "--rl-baseline", "loo",
                       "--finetune-from-model", out / "ce" / "checkpoint_last.pt", "--max-update", "2",
                       "--save-dir", tmp_path / "rl", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"])
    assert "as rank 1" in outs[1]
    for kind in ("train", "valid"):
        line = [line for line in outs[0].splitlines() if f"| {kind} |" in line][-1]
        values = {name: float(value) for name, value in re.findall(r"(reward(?:/\w+)?)[ =]([-\d.]+)", line)}
        assert {"reward", "reward/de", "reward/fr"} <= set(values), line
        low, high = sorted((values["reward/de"], values["reward/fr"]))
        assert low - 0.01 <= values["reward"] <= high + 0.01, line


@pytest.mark.slow
def test_generate_refuses_swapped_predictors_and_damaged_data(trained, ml_bin, tmp_path):
    """Through fairseq-generate, with the predictors' real checkpoints (what they record of their pair) and a
    copy of the data with an id outside the dictionary: each refused, named, where fairseq gave a BLEU."""
    out, spec = trained
    paths = dict(item.split(":", 1) for item in spec.split(","))
    decode = ["fairseq-generate", ml_bin, *OURS, "--path", out / "ce" / "checkpoint_last.pt", "--gen-subset",
              "test", "--beam", "1", "--cpu", "-s", "en", "-t", "fr", "--max-len-b", "40"]
    swapped = f"en-de:{paths['en-fr']},en-fr:{paths['en-de']}"
    for given, named in ((swapped, "under en-fr"), (paths["en-de"], "as the one predictor for every pair")):
        result = run([*decode, "--vocab-predictor", given], check=False)
        assert result.returncode != 0, result.stdout[-2000:]
        assert f"the vocabulary predictor {paths['en-de']} was trained on en-de" in result.stderr, result.stderr[-3000:]
        assert named in result.stderr and "BLEU" not in result.stdout
    run([*decode, "--vocab-predictor", f"en-fr:{paths['en-fr']}"])  # its own pair's: decodes
    data = copy_folder(ml_bin, tmp_path)
    poke_token(data / "test.en-fr.fr", 2, 60000)
    result = run([*decode[:1], data, *decode[2:]], check=False)
    assert result.returncode != 0 and "BLEU" not in result.stdout
    assert f"{data / 'test.en-fr.fr.bin'}: sentence 2 holds token id 60000" in result.stderr, result.stderr[-3000:]


@pytest.mark.slow
def test_a_predictor_records_its_pair_only_when_trained_with_it(trained, predictor):
    """What the check compares (load_predictor's recorded_langs): the -s / -t that fairseq-train wrote into the
    checkpoint, and nothing for a predictor trained without them (its task infers its folder's pair at load:
    not necessarily the one it was trained on)."""
    from fairseq_smallvocab.predictor.inference import load_predictor

    _, spec = trained
    paths = dict(item.split(":", 1) for item in spec.split(","))
    assert load_predictor(paths["en-fr"])[1].recorded_langs == ("en", "fr")
    _, task = load_predictor(predictor)  # trained on tiny_bin without -s / -t
    assert task.recorded_langs == (None, None) and (task.cfg.source_lang, task.cfg.target_lang) == ("src", "tgt")


@pytest.mark.slow
@pytest.mark.parametrize("tgt", ["de", "fr"])
def test_it_decodes_inside_candidates_as_stock_fairseq_decodes_with_every_word(trained, ml_bin, tgt):
    """Rows holding every word of the predictor's dictionary (K = its size): greedy decoding equals stock
    fairseq's (the other languages' tokens aside, which the model never emits after the first one)."""
    out, spec = trained
    ckpt = out / "ce" / "checkpoint_last.pt"
    decode = ["--gen-subset", "test", "--beam", "1", "--batch-size", "8", "--cpu", "-s", "en", "-t", tgt,
              "--max-len-b", "40"]
    # stock fairseq's task and generator (--user-dir only lets torch >= 2.6 read the checkpoint's argparse Namespace)
    # (--required-batch-size-multiple 1: fairseq 0.12 would drop the last batch of 6, which this task keeps)
    stock = run(["fairseq-generate", ml_bin, "--user-dir", OURS[1], *STOCK, "--path", ckpt, *decode,
                 "--required-batch-size-multiple", "1"])
    every = len(Dictionary.load(str(ml_bin / "dict.de.txt")))  # the predictor's dictionary
    ours = run(["fairseq-generate", ml_bin, *OURS, "--path", ckpt, *decode, "--small-vocab-size", str(every)])
    hyps = _hypotheses(ours.stdout)
    assert len(hyps) == 30 and hyps == _hypotheses(stock.stdout)
    small = run(["fairseq-generate", ml_bin, *OURS, "--path", ckpt, *decode, "--beam", "4"])  # the recorded ones
    hyps = _hypotheses(small.stdout)
    assert len(hyps) == 30 and not any("__" in h for h in hyps.values())
    line = (ml_bin / "raw" / "en-de" / "test.en").read_text().splitlines()[0]
    inter = run(["fairseq-interactive", ml_bin, *OURS, "--path", ckpt, "--beam", "2", "--cpu", "-s", "en", "-t",
                 tgt], stdin=line + "\n")
    assert len(_hypotheses(inter.stdout)) == 1


def test_prepare_multi30k_multilingual_and_tagged_from_a_folder(tmp_path):
    """scripts/prepare_multi30k.py --multilingual --tagged on a three-way folder (Multi30k's file names)."""
    from helpers import load_script

    raw = write_three_way(tmp_path / "corpus", size=120)
    for ours, theirs in (("valid", "val"), ("test", "test2016")):
        for lang in ("en", "de", "fr"):
            (raw / f"{ours}.{lang}").rename(raw / f"{theirs}.{lang}")
    load_script("prepare_multi30k").main(["--source", str(raw), "--out-dir", str(tmp_path / "bin"), "--pairs",
                                          "en-de", "en-fr", "--multilingual", "--tagged", "--min-count", "1"])
    folder = tmp_path / "bin" / "multi30k.en-de.en-fr"
    assert (folder / "dict.en.txt").read_text() == (folder / "dict.fr.txt").read_text()
    tagged = folder.with_name(folder.name + ".tagged")
    assert {"__de__", "__fr__"} <= set((tagged / "dict.src.txt").read_text().split())
    assert (tagged / "valid1.src-tgt.src.bin").is_file() and (tagged / "test1.src-tgt.tgt.bin").is_file()
    assert (tagged / "raw" / "valid_1.src").read_text().startswith("__fr__ ")


@pytest.mark.slow
def test_a_predictor_told_the_language_trains_and_serves_decoding(trained, ml_bin, tmp_path):
    """The tagged predictor as examples/translation/README.md trains it (valid and valid1: recall per pair), then
    decoding both pairs with it alone (--vocab-predictor CKPT) loads it with its own dictionaries."""
    from smallvocab_tools.data.multilingual_prep import prepare_target_tagged

    out, _ = trained
    prepare_target_tagged(ml_bin, tmp_path / "tagged", PAIRS, log=lambda m: None)
    result = run(["fairseq-train", tmp_path / "tagged", *TRAIN_ARGS, "-s", "src", "-t", "tgt", "--valid-subset",
                  "valid,valid1", "--ignore-unused-valid-subsets", "--recall-at", "100,500", "--max-epoch", "2",
                  "--best-checkpoint-metric", "recall@500", "--maximize-best-checkpoint-metric",
                  "--save-dir", tmp_path / "vp"])
    logs = result.stdout + result.stderr
    assert "valid on 'valid' subset" in logs and "valid on 'valid1' subset" in logs
    for tgt in ("de", "fr"):
        gen = run(["fairseq-generate", ml_bin, *OURS, "--path", out / "ce" / "checkpoint_last.pt", "--vocab-predictor",
                   tmp_path / "vp" / "checkpoint_best.pt", "--gen-subset", "test", "--beam", "2", "--batch-size", "8",
                   "--cpu", "-s", "en", "-t", tgt, "--max-len-b", "40"])
        assert len(_hypotheses(gen.stdout)) == 30


@pytest.mark.slow
def test_a_multilingual_checkpoint_exports_to_ctranslate2_and_translates_as_fairseq(trained, ml_bin, tmp_path):
    """scripts/export_ctranslate2.py on the fine-tuned multilingual checkpoint: CTranslate2 given the encoder's
    language token before the source and the target language token as the target prefix translates as
    fairseq-generate does with every word (greedy); a vocabulary map is refused (it cannot tell languages apart)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from helpers import REPO

    from smallvocab_tools.deploy.ctranslate2_bench import split_tokens

    out, spec = trained
    ckpt = out / "ce" / "checkpoint_last.pt"
    export = ["python", str(REPO / "scripts" / "export_ctranslate2.py"), "--path", ckpt, "--data", ml_bin]
    refused = run([*export, "--out", tmp_path / "mapped", "--vmap-from", spec.split(",")[0].split(":", 1)[1]],
                  check=False)
    assert refused.returncode != 0 and "cannot tell the target languages apart" in refused.stderr
    run([*export, "--out", tmp_path / "ct2"])
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    every = len(Dictionary.load(str(ml_bin / "dict.de.txt")))
    for tgt in ("de", "fr"):
        fairseq = run(["fairseq-generate", ml_bin, *OURS, "--path", ckpt, "--gen-subset", "test", "--beam", "1",
                       "--batch-size", "8", "--cpu", "-s", "en", "-t", tgt, "--max-len-b", "40",
                       "--small-vocab-size", str(every)])
        want = _hypotheses(fairseq.stdout)
        sources, _ = split_tokens(ml_bin, "en", tgt, "test")
        got = translator.translate_batch([["__en__", *s] for s in sources], target_prefix=[[f"__{tgt}__"]] *
                                         len(sources), beam_size=1, max_decoding_length=41)
        hyps = {i: r.hypotheses[0] for i, r in enumerate(got)}
        assert all(h[0] == f"__{tgt}__" for h in hyps.values()) and len(want) == 30
        # where either reaches the length limit the two cut differently (fairseq counts the prefix and ends
        # with eos): there, the same words up to the shorter cut but its last; everywhere else, the same translation
        # (a tiny model runs most sentences to the limit, so both kinds are compared)
        for i, h in hyps.items():
            got, words = h[1:], want[i].split()
            if max(len(got), len(words)) < 38:
                assert got == words, i
            else:
                cut = min(len(got), len(words)) - 1
                assert cut >= 30 and got[:cut] == words[:cut], (i, got, words)
