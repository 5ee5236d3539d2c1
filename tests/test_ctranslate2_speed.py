"""The export's check of the vocabulary map (``ctranslate2_bench.map_verdict`` over ``ctranslate2_speed``): it times
what the Deploy code does (one translate_batch per batch of pieces, the model warmed up first, output pieces
counted) and agrees with a Deploy script's own timing of the same sentences on a tiny exported model; it says each
step as it goes; it runs on the threads the user asked for; its verdict follows the spread of its rounds, so that
identical runs agree, with exactly one sentence of advice; its BLEU is the project's, with its signature.  The
export itself: test_ctranslate2_export.py."""

import json
import random
import re
import sys

import pytest
from helpers import run

from smallvocab_tools.analysis import bleu as bleu_lib
from smallvocab_tools.deploy import ctranslate2_bench as bench
from smallvocab_tools.deploy import ctranslate2_speed as speed


class FakeDeploy:
    """A translator and a clock that only its calls move: a call of n sentences takes n * tokens_each / rate
    seconds of the side's ``rates`` (tokens/s) times a noise factor drawn from ``rng`` (1 + uniform(-noise,
    noise)); ``between`` seconds pass outside every call (what the timing must not count).  Each sentence
    translates into ``tokens_each`` pieces."""

    def __init__(self, rates, noise=0.0, seed=0, tokens_each=4, between=0.0, first_call=0.0):
        self.rates, self.noise, self.rng = rates, noise, random.Random(seed)
        self.tokens_each, self.between, self.first_call = tokens_each, between, first_call
        self.now, self.calls, self.warm, self.returned = 0.0, [], set(), False

    def clock(self):
        now = self.now
        if self.returned:  # read as a call returned; then time passes outside the calls (the loop, the bookkeeping)
            self.now += self.between
            self.returned = False
        return now

    def translate(self, batch, use_vmap):
        side = "vmap" if use_vmap else "full"
        self.calls.append((side, len(batch)))
        seconds = len(batch) * self.tokens_each / self.rates[side]
        seconds *= 1 + self.rng.uniform(-self.noise, self.noise)
        if side not in self.warm:  # a first call's allocations
            seconds += self.first_call
            self.warm.add(side)
        self.now += seconds
        self.returned = True
        return [["\u2581w"] * self.tokens_each for _ in batch]


def _timed(fake, sentences=100, batch=32, rounds=5, min_seconds=1.0):
    said = []
    result = speed.time_rounds(fake.translate, [["a", "b"]] * sentences, batch, rounds, clock=fake.clock,
                               say=said.append, min_seconds=min_seconds)
    return result, said


def test_only_the_deploy_calls_are_timed_after_a_warm_up_and_output_pieces_counted():
    """The Deploy call on consecutive batches, two passes each way not counted (a first call 100 s slow here), the
    time between calls not counted, tokens the output pieces, the sides alternating with the order swapped each
    round, and enough passes per round to last ``min_seconds``."""
    fake = FakeDeploy({"vmap": 2000.0, "full": 1000.0}, between=0.25, first_call=100.0)
    result, said = _timed(fake, sentences=70, batch=32, rounds=4, min_seconds=1.0)
    assert fake.calls[:6] == [("vmap", 32), ("vmap", 32), ("vmap", 6), ("full", 32), ("full", 32), ("full", 6)]
    assert result["tokens"] == {"vmap": 280, "full": 280}  # 70 sentences of 4 pieces, no eos
    # a warmed-up pass with the map takes 0.14 s: 8 passes make a second
    assert result["repeats"] == 8 and len(fake.calls) == 2 * 6 + 4 * 2 * 8 * 3
    assert [r["first"] for r in result["rounds"]] == ["vmap", "full", "vmap", "full"]
    summary = speed.speeds(result)
    assert summary["vmap"]["tokens_per_s"] == pytest.approx(2000.0)  # neither the warm-up nor the 0.25 s between
    assert summary["full"]["tokens_per_s"] == pytest.approx(1000.0)
    assert [summary[key] for key in ("ratio", "low", "high")] == pytest.approx([2.0] * 3)
    assert summary["full"]["seconds"] == pytest.approx(0.28)
    # said as it goes: the warm-up and each round's numbers
    assert said[0] == ("  warm-up: a first pass over the sentences took 100.14 s with the map, 100.28 s without it "
                       "(not counted)")
    assert said[1] == ("  warm-up done (two passes each way, not counted; the second took 0.14 s with the map, "
                       "0.28 s without it); each round translates the 70 sentences 8 time(s) each way: about 3.4 s a "
                       "round, 13.4 s in all")
    assert said[2:] == [f"  round {i}/4 ({first} the map first): 2000 tokens/s with the map, 1000 without (2.00x)"
                        for i, first in zip(range(1, 5), ["with", "without", "with", "without"])]


def test_an_empty_translation_or_a_stopped_clock_is_refused_with_the_reason():
    class Empty(FakeDeploy):
        def translate(self, batch, use_vmap):
            super().translate(batch, use_vmap)
            return [[] for _ in batch]

    with pytest.raises(speed.SpeedError, match="translated all 10 sentences into nothing"):
        _timed(Empty({"vmap": 1.0, "full": 1.0}), sentences=10)
    stopped = FakeDeploy({"vmap": float("inf"), "full": float("inf")})
    with pytest.raises(speed.SpeedError, match="clock did not advance"):
        _timed(stopped, sentences=10)
    with pytest.raises(speed.SpeedError, match="no sentences"):
        _timed(FakeDeploy({"vmap": 1.0, "full": 1.0}), sentences=0)


@pytest.mark.parametrize("rates, kind", [
    ({"vmap": 1300.0, "full": 1000.0}, speed.PAYS),
    ({"vmap": 1000.0, "full": 1000.0}, speed.UNCLEAR),
    ({"vmap": 750.0, "full": 1000.0}, speed.SLOWS),
])
def test_identical_runs_give_the_same_verdict(rates, kind):
    """Three runs of the same speeds, each with its own noise (every call +-12%, as on a shared machine): one
    verdict.  The noise is no small one: single rounds of the equal speeds range beyond 1.1x and below 0.95x
    (the thresholds that a median of two rounds once crossed both ways between identical runs)."""
    verdicts, ratios = [], []
    for seed in (1, 2, 3):
        fake = FakeDeploy(rates, noise=0.12, seed=seed)
        summary = speed.speeds(_timed(fake, sentences=100, batch=100, rounds=5, min_seconds=0.1)[0])
        verdicts.append(speed.judge(summary["ratio"], summary["low"], summary["high"]))
        ratios += summary["ratios"]
    assert verdicts == [kind] * 3
    if kind == speed.UNCLEAR:
        assert max(ratios) > 1.1 and min(ratios) < 0.95


SCORE = bleu_lib.Score(30.0, 100, 100, "nrefs:1|tok:13a")
LOWER = bleu_lib.Score(29.5, 100, 100, "nrefs:1|tok:13a")


def _advice(ratio, low, high, with_bleu=SCORE, without_bleu=LOWER):
    kind, text = bench.verdict_text(200, "valid", 5, 32, 1, 5, 1000 * ratio, 1000, ratio, low, high, with_bleu,
                                    without_bleu)
    numbers, _, advice = text.partition(" without (nrefs:1|tok:13a). ")
    assert numbers.startswith("the vocabulary map on 200 valid sentences (beam 5, batches of 32, 1 thread, 5 rounds "
                              f"each way): {1000 * ratio:.0f} tokens/s with it, 1000 without, {ratio:.2f}x (rounds "
                              f"{low:.2f}x-{high:.2f}x); BLEU {with_bleu.bleu:.2f} with it, {without_bleu.bleu:.2f}")
    # exactly one sentence of advice, one use_vmap in it
    assert advice.count("use_vmap=") == 1 and advice.endswith(".") and ". " not in advice, advice
    return kind, advice


PAYS_ADVICE = "It pays here: translate with use_vmap=True."
SLOWS_ADVICE = ("It slows translation here (the model's |V| is small beside the words a batch allows): translate "
                "without it (use_vmap=False).")
WITHIN = ("No clear difference here (the ratio is within 5% of 1.00x, the machine's noise): translate without it "
          "(use_vmap=False), which loses no word outside the map.")
REACH = ("No clear difference here (the rounds' ratios reach 1.00x, the machine's noise): translate without it "
         "(use_vmap=False), which loses no word outside the map.")


@pytest.mark.parametrize("ratio, low, high, kind, advice", [
    (1.05, 1.001, 1.2, speed.PAYS, PAYS_ADVICE),  # the margin reached, every round above 1
    (1.3, 1.0001, 1.6, speed.PAYS, PAYS_ADVICE),
    (1.0499, 1.001, 1.2, speed.UNCLEAR, WITHIN),
    (1.3, 1.0, 1.6, speed.UNCLEAR, REACH),  # one round at 1.00x: the range reaches 1
    (1.3, 0.88, 1.35, speed.UNCLEAR, REACH),
    (1 / 1.05, 0.8, 0.999, speed.SLOWS, SLOWS_ADVICE),
    (0.7, 0.5, 0.9999, speed.SLOWS, SLOWS_ADVICE),
    (0.953, 0.8, 0.999, speed.UNCLEAR, WITHIN),
    (0.7, 0.5, 1.0, speed.UNCLEAR, REACH),
])
def test_the_three_verdicts_at_their_boundaries(ratio, low, high, kind, advice):
    assert speed.judge(ratio, low, high) == kind
    assert _advice(ratio, low, high) == (kind, advice)


def test_a_map_that_pays_but_costs_bleu_says_so_in_its_one_sentence():
    costly = bleu_lib.Score(28.0, 100, 100, "nrefs:1|tok:13a")
    kind, advice = _advice(1.3, 1.1, 1.5, with_bleu=costly, without_bleu=bleu_lib.Score(29.5, 100, 100,
                                                                                        "nrefs:1|tok:13a"))
    assert kind == speed.PAYS
    assert advice == ("It pays here in speed but costs 1.50 BLEU on these sentences: translate with use_vmap=True "
                      "where that speed is worth more than the BLEU.")
    # a point of BLEU or less: the plain advice
    assert _advice(1.3, 1.1, 1.5, with_bleu=bleu_lib.Score(28.5, 100, 100, "nrefs:1|tok:13a"),
                   without_bleu=bleu_lib.Score(29.5, 100, 100, "nrefs:1|tok:13a"))[1] == PAYS_ADVICE


def test_threads_are_the_users():
    assert speed.threads_from(3, {"OMP_NUM_THREADS": "1"}) == (3, "--threads")
    assert speed.threads_from(None, {"OMP_NUM_THREADS": "1"}) == (1, "OMP_NUM_THREADS=1")
    assert speed.threads_from(None, {"OMP_NUM_THREADS": "4,2"}) == (4, "OMP_NUM_THREADS=4,2")
    assert speed.threads_from(None, {}) == (2, "the default; OMP_NUM_THREADS is not set")
    for bad in ("two", "0", "-1", "1.5"):
        with pytest.raises(ValueError, match=rf"OMP_NUM_THREADS='{re.escape(bad)}' is not a number of threads: set "
                                             r"it to a whole number >= 1 .* or give --threads N"):
            speed.threads_from(None, {"OMP_NUM_THREADS": bad})
    with pytest.raises(ValueError, match="--threads 0: the threads to translate on must be 1 or more"):
        speed.threads_from(0, {})


def _fake_measure(rates, noise=0.0, seed=0, seen=None):
    """A ``measure`` that times a FakeDeploy (no CTranslate2): what map_verdict and run are given back."""
    def measure(model_dir, sources, threads, batch, beam, rounds, sides, compute_type, max_len):
        if seen is not None:
            seen.update(model=model_dir, sentences=len(sources), threads=threads, batch=batch, beam=beam,
                        rounds=rounds, sides=tuple(sides), compute_type=compute_type)
        fake = FakeDeploy(rates, noise=noise, seed=seed)
        return speed.time_rounds(fake.translate, sources, batch, rounds, sides, clock=fake.clock,
                                 say=lambda line: None, min_seconds=0.1)
    return measure


def test_the_check_says_what_it_measures_on_the_users_threads_with_the_projects_bleu(monkeypatch):
    monkeypatch.setattr(bench, "split_tokens", lambda data, src, tgt, split: ([["a"]] * 300, ["\u2581w " * 4] * 300))
    monkeypatch.setattr(bench, "target_scheme", lambda data, tgt: "sentencepiece")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the quick start's THREADS=1
    seen, said = {}, []
    verdict = bench.map_verdict("ct2", "data", "en", "de", "valid", measure=_fake_measure(
        {"vmap": 1300.0, "full": 1000.0}, seen=seen), say=said.append)
    assert seen == {"model": "ct2", "sentences": 200, "threads": 1, "batch": 32, "beam": 5, "rounds": 5,
                    "sides": ("vmap", "full"), "compute_type": "default"}
    assert said == ["checking whether the vocabulary map pays on this machine (--check-map N sentences; 0 skips it): "
                    "the first 200 valid sentences, the Deploy code's translate_batch(pieces, beam_size=5, "
                    "use_vmap=True/False) on batches of 32, on 1 thread (OMP_NUM_THREADS=1), 5 rounds with and "
                    "without the map, alternating"]
    assert (verdict.kind, verdict.threads, verdict.ratio) == (speed.PAYS, 1, pytest.approx(1.3))
    # the hypotheses' pieces joined into words, scored by the project's BLEU, its signature printed
    assert verdict.bleu_with == bleu_lib.corpus(["w w w w"] * 200, ["w w w w"] * 200)
    assert str(verdict).startswith("the vocabulary map on 200 valid sentences (beam 5, batches of 32, 1 thread, 5 "
                                   "rounds each way): 1300 tokens/s with it, 1000 without, 1.30x (rounds "
                                   "1.30x-1.30x); BLEU 100.00 with it, 100.00 without (nrefs:1|case:mixed|eff:no|"
                                   "tok:13a|smooth:exp|version:")
    assert str(verdict).endswith(PAYS_ADVICE)
    tokenized = bench.map_verdict("ct2", "data", "en", "de", "valid", threads=3, tokenize="none",
                                  measure=_fake_measure({"vmap": 1000.0, "full": 1000.0}), say=said.append)
    assert "2 thread" not in said[-1] and "on 3 threads (--threads)" in said[-1]
    assert "tok:none" in tokenized.text and tokenized.kind == speed.UNCLEAR
    with pytest.raises(ValueError, match="2 round.*needs 3 or more"):
        bench.map_verdict("ct2", "data", "en", "de", "valid", rounds=2, measure=_fake_measure({}))


def test_the_bench_times_through_the_same_measure_and_scores_with_the_projects_bleu(tmp_path, monkeypatch):
    (tmp_path / "vmap.txt").write_text("\tw\n")
    seen = {}
    records = bench.run(tmp_path, [["a"]] * 40, ["w w w w"] * 40, ["int8"], [8], [1], 3, 2, 256,
                        scheme="sentencepiece", tokenize="none", say=lambda line: None,
                        measure=_fake_measure({"vmap": 1500.0, "full": 1000.0}, seen=seen))
    assert seen["threads"] == 2 and seen["batch"] == 8 and seen["sides"] == ("full", "vmap")
    full, vmap = records
    assert (full["vmap"], vmap["vmap"]) == (False, True)
    assert full["tokens_per_s"] == pytest.approx(1000.0) and vmap["speedup"] == pytest.approx(1.5)
    assert full["bleu"] == pytest.approx(100.0) and "tok:none" in full["bleu_signature"]
    text = bench.table(records, {"plugin": bleu_lib.corpus(["w w w"] * 40, ["w w w w"] * 40, "none")})
    assert "| CTranslate2 | int8 | 1 | 8 | predictor | 100.00 | 1500 | 1.50x (1.50-1.50) |" in text
    assert re.search(r"^\| plugin \| \| \| \| \| \d+\.\d\d \| \| \|$", text, re.M)
    assert f"BLEU: sacrebleu on words, {full['bleu_signature']}" in text


def test_the_exports_check_settings_are_refused_before_anything_is_read(tmp_path, monkeypatch, capsys):
    """A bad --threads, OMP_NUM_THREADS, --batch, --check-rounds, --check-map or --tokenize stops the export at once
    (the checkpoint given here does not exist: it is never read), naming the setting and the fix."""
    from smallvocab_tools.deploy import ctranslate2_export as ct2

    base = ["--path", str(tmp_path / "missing.pt"), "--data", str(tmp_path), "--out", str(tmp_path / "ct2"),
            "--vmap-from", str(tmp_path / "vp.pt")]
    for extra, env, said in [
        (["--threads", "0"], None, "--threads 0: the threads to translate on must be 1 or more"),
        ([], "two", "OMP_NUM_THREADS='two' is not a number of threads"),
        (["--check-rounds", "2"], None, "--check-rounds 2: at least 3"),
        (["--batch", "0"], None, "--batch 0: sentences per batch, 1 or more"),
        (["--check-map", "-1"], None, "--check-map -1: the sentences to check the map on, 1 or more (0: no check)"),
        (["--tokenize", "words"], None, "argument --tokenize: invalid choice: 'words' (choose from"),
    ]:
        if env is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", env)
        with pytest.raises(SystemExit) as stop:
            ct2.main(base + extra)
        assert stop.value.code == 2 and said in capsys.readouterr().err
    monkeypatch.setenv("OMP_NUM_THREADS", "two")  # without the check, OMP_NUM_THREADS is not the export's concern
    with pytest.raises(SystemExit) as stop:
        ct2.main(base + ["--check-map", "0"])
    assert "missing.pt" in str(stop.value.code)


# The README's Deploy code timed by hand, as a user times it (a loop of passes over the sentences, total pieces
# over total seconds), in a process of its own; the passes with and without the map alternate
DEPLOY = """
import json, sys, time
import ctranslate2
model, sources_file, beam, batch, threads, passes = sys.argv[1:]
sources = json.load(open(sources_file))
translator = ctranslate2.Translator(model, device="cpu", intra_threads=int(threads))
batches = [sources[i:i + int(batch)] for i in range(0, len(sources), int(batch))]
for use_vmap in (True, False):  # warmed up
    for b in batches:
        translator.translate_batch(b, beam_size=int(beam), use_vmap=use_vmap)
out = {side: {"tokens": 0, "seconds": 0.0} for side in ("vmap", "full")}
for i in range(int(passes)):
    for use_vmap in ((True, False) if i % 2 == 0 else (False, True)):
        side, hyps = out["vmap" if use_vmap else "full"], []
        for b in batches:
            start = time.perf_counter()
            result = translator.translate_batch(b, beam_size=int(beam), use_vmap=use_vmap)
            side["seconds"] += time.perf_counter() - start
            hyps += [r.hypotheses[0] for r in result]
        side["tokens"] += sum(len(h) for h in hyps)
        side["hyps"] = hyps
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tiny_export(tiny_bin, tmp_path_factory):
    """A stock fairseq Transformer of ``tiny_bin`` after two updates, exported with a vocabulary map of 10
    words a source word and 20 always allowed."""
    pytest.importorskip("ctranslate2")
    from fairseq.data import Dictionary
    from test_ctranslate2_export import ARCH, COMMON

    from smallvocab_tools.deploy.ctranslate2_export import export
    from smallvocab_tools.deploy.vmap import VocabMap

    root = tmp_path_factory.mktemp("speed")
    run(["fairseq-train", tiny_bin, "--task", "translation", *ARCH, *COMMON, "--criterion", "cross_entropy",
         "--optimizer", "adam", "--lr", "0.001", "--max-update", "2", "--save-dir", root])
    src, tgt = (Dictionary.load(str(tiny_bin / f"dict.{lang}.txt")) for lang in ("src", "tgt"))
    words = [tgt[i] for i in range(tgt.nspecial, len(tgt))]
    rng = random.Random(0)
    vmap = VocabMap(always=words[:20], words={(src[i],): rng.sample(words, 10) for i in range(src.nspecial, len(src))})
    return export(root / "checkpoint_last.pt", tiny_bin, root / "ct2", vmap=vmap)


@pytest.mark.slow
def test_the_check_agrees_with_the_deploy_codes_own_timing(tiny_export, tiny_bin, tmp_path, capfd):
    """The same 40 sentences, beam 5, batches of 32, 1 thread: the Deploy code timed by hand in a process of its
    own, and the check, give the same translations and tokens/s within 20% each way (the check once measured
    16-50 tokens/s where the Deploy code made 1,050).  The hand timing runs before the check and after it, and the
    check is held to the two: a slow spell of the shared machine during one of them is bracketed."""
    sources, refs = bench.split_tokens(tiny_bin, "src", "tgt", "valid")
    (tmp_path / "sources.json").write_text(json.dumps(sources))

    def by_hand():
        done = run([sys.executable, "-c", DEPLOY, tiny_export, tmp_path / "sources.json", 5, 32, 1, 10])
        return json.loads(done.stdout)

    before = by_hand()
    verdict = bench.map_verdict(tiny_export, tiny_bin, "src", "tgt", "valid", sentences=40, threads=1)
    after = by_hand()
    err = capfd.readouterr().err
    assert "on 1 thread (--threads), 5 rounds" in err
    assert len(re.findall(r"^  round \d/5 \((with|without) the map first\): \d+ tokens/s with the map, \d+ "
                          r"without \([\d.]+x\)$", err, re.M)) == 5
    assert verdict.sentences == 40 and verdict.threads == 1
    said = []
    for side, got in (("vmap", verdict.with_map), ("full", verdict.without)):
        hand = [run[side]["tokens"] / run[side]["seconds"] for run in (before, after)]
        said.append(f"{'with' if side == 'vmap' else 'without'} the map: the Deploy code {hand[0]:.0f} before the "
                    f"check, {hand[1]:.0f} after it; the check {got:.0f}")
        assert 0.8 * min(hand) < got < 1.2 * max(hand), said[-1]
    # the same call: the same translations, scored as the check scored them
    assert verdict.bleu_with == bleu_lib.corpus([" ".join(h) for h in before["vmap"]["hyps"]], refs)
    assert verdict.bleu_without == bleu_lib.corpus([" ".join(h) for h in before["full"]["hyps"]], refs)
    print("tokens/s on 1 thread, " + "; ".join(said))
