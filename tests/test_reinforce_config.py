"""smallvocab_reinforce refuses bad settings with a message naming the flag: at start-up
(the flags' ranges, the reward, the samples a baseline needs), and before drawing
(a temperature whose scaled logits overflow, samples that cannot fit in memory)."""

import logging

import pytest
import torch
from helpers import B, K, _crit, _setup


def test_bad_rl_settings_are_named_at_start_up():
    _, task, _ = _setup()
    cases = [(dict(rl_samples=0), r"--rl-samples must be >= 1"),
             (dict(rl_baseline="loo"), r"--rl-baseline loo needs --rl-samples >= 2"),
             (dict(reward="rouge"), r"unknown reward 'rouge': --reward must be one of gleu, gleu_bp, bleu, chrf, "
                                    r"constant"),
             (dict(sample_temperature=0.0), r"--sample-temperature must be a finite number > 0"),
             (dict(sample_temperature=-1.0), r"--sample-temperature must be a finite number > 0"),
             (dict(sample_temperature=float("inf")), r"--sample-temperature must be a finite number > 0, got inf"),
             (dict(sample_temperature=float("nan")), r"--sample-temperature must be a finite number > 0, got nan"),
             (dict(sample_len_ratio=float("nan")), r"--sample-len-ratio must be a finite number >= 0 .*got nan"),
             (dict(sample_len_ratio=-1.0), r"--sample-len-ratio must be a finite number >= 0"),
             (dict(baseline_lr=float("inf")), r"--baseline-lr must be in \(0, 1\], got inf: Adam moves"),
             (dict(baseline_lr=1e10), r"--baseline-lr must be in \(0, 1\], got 1e\+10"),
             (dict(baseline_lr=float("nan")), r"--baseline-lr must be in \(0, 1\], got nan"),
             (dict(baseline_lr=0.0), r"--baseline-lr must be in \(0, 1\], got 0"),
             (dict(reward_post_process="sentencepeice"), r"--reward-post-process 'sentencepeice' is not a fairseq "
                                                         r"post-processing; choose one of 'sentencepiece'")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            _crit(task, **kwargs)


def test_a_temperature_whose_scaled_logits_overflow_is_refused():
    """tau = 1e-45: logits / tau are not finite, and every sample would be one
    word repeated to the limit (entropy nan, exit 0 before); a model whose own
    logits are not finite still has its batch skipped, not refused."""
    model, task, sample = _setup()
    with pytest.raises(ValueError, match=r"--sample-temperature 1e-45 makes the logits divided by it overflow"):
        _crit(task, rl_baseline="none", sample_temperature=1e-45)(model.train(), sample)
    _, _, log = _crit(task, rl_baseline="none", sample_temperature=0.5)(model, sample)
    assert log["nonfinite"] == 0 and log["entropy"] > 0
    with torch.no_grad():
        model.decoder.output_bias.fill_(float("nan"))
    _, _, log = _crit(task, rl_baseline="none", sample_temperature=0.5)(model, sample)
    assert log["nonfinite"] == 1


def test_samples_that_cannot_fit_in_memory_are_refused_before_drawing(monkeypatch):
    """--rl-samples 10000 died after 44 s with a bare allocation error: the
    scoring pass's size is estimated first."""
    from fairseq_smallvocab.engine import request

    model, task, sample = _setup()
    crit = _crit(task, rl_baseline="loo", rl_samples=10000)
    rows, steps = B * 10000, sample["target"].size(1)
    monkeypatch.setattr(request, "available_memory", lambda device: 8 * rows * steps * K - 1)
    drawn = []
    monkeypatch.setattr(model, "sample_and_score", lambda *a, **k: drawn.append(1))
    with pytest.raises(MemoryError, match=rf"--rl-samples 10000 with this batch of {B} sentences makes "
                                          rf"{rows:,} sampled sequences.*lower --rl-samples"):
        crit(model.train(), sample)
    assert not drawn
    monkeypatch.setattr(request, "available_memory", lambda device: 8 * rows * steps * K)
    with pytest.raises(TypeError):  # past the check: the stand-in sampler returns nothing
        crit(model, sample)
    assert drawn
    assert request.available_memory(torch.device("cpu")) > 0


def test_cuda_memory_the_allocator_holds_unused_counts_as_available(monkeypatch):
    """After a larger batch torch's caching allocator keeps its memory reserved (the device reports it used):
    the next batch gets it first, so it is available (a --largest-batch search was refused at 0.8 GiB free)."""
    from fairseq_smallvocab.engine import request

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100, 1000))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 700)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 300)
    assert request.available_memory(torch.device("cuda")) == 100 + 700 - 300


def test_bad_settings_are_named():
    _, task, _ = _setup()
    for value in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"--ce-weight must be in \[0, 1\]"):
            _crit(task, ce_weight=value)
    for value in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"--label-smoothing must be in \[0, 1\) \(the CE term's\)"):
            _crit(task, label_smoothing=value)


def test_every_bad_setting_is_named_in_one_error():
    """Three bad flags: one error names all three (a user fixes them in one go, not one start-up each); one bad
    flag's error is its message alone."""
    from fairseq_smallvocab.reinforce.config import SmallVocabReinforceConfig, check_config

    with pytest.raises(ValueError) as err:
        check_config(SmallVocabReinforceConfig(rl_samples=0, ce_weight=2.0, rl_engine="capture=graphs"))
    lines = str(err.value).splitlines()
    assert lines[0] == "3 of the criterion's settings need fixing:"
    assert [line.split(" ")[2] for line in lines[1:]] == ["--rl-samples", "--ce-weight", "--rl-engine:"]
    with pytest.raises(ValueError, match=r"^--ce-weight must be in \[0, 1\], got 2.0$"):
        check_config(SmallVocabReinforceConfig(ce_weight=2.0))


def test_a_cuda_only_mode_asked_for_on_the_cpu_is_said_to_run_as_off(caplog):
    """--rl-engine capture / graphed_pass=cuda-graphs ran eagerly on the CPU without a word: the log
    says once what runs instead; the other modes are not warned about."""
    import logging

    model, task, sample = _setup()
    with caplog.at_level(logging.WARNING):
        _crit(task, rl_baseline="none", rl_engine="capture=buckets,graphed_pass=off")(model, sample)
        assert not caplog.records
        crit = _crit(task, rl_baseline="none", rl_engine="capture=cuda-graphs,graphed_pass=cuda-graphs")
        crit(model, sample)
        crit(model, sample)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # once each, not per batch
    assert messages[0].startswith("--rl-engine capture=cuda-graphs: CUDA graphs cannot be captured on cpu, not a "
                                  "CUDA device, so the sampling step runs as --rl-engine capture=off")
    assert messages[1].startswith("--rl-engine graphed_pass=cuda-graphs: CUDA graphs cannot be captured on cpu")


def test_a_device_mode_not_yet_tested_on_a_gpu_is_refused_there_naming_its_flag():
    """--rl-engine compile=fuse / reduce-overhead have not run their benchmark step on a GPU: off by default,
    refused on a CUDA device (by the plan, which the criterion makes at its first batch), each named;
    --rl-engine untested_cuda_modes=on runs them; the CPU refuses nothing (there they run as their CPU tests
    say).  The captured sampling step and graphed pass passed theirs: asked for, they run."""
    from fairseq_smallvocab.engine.settings import UNTESTED_ON_CUDA, EngineSettings

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    default = EngineSettings()
    assert all(getattr(default, name) != value for name, value in UNTESTED_ON_CUDA)
    default.check_device(cuda)
    for (name, value), seen in UNTESTED_ON_CUDA.items():
        asked = default.changed(**{name: value})
        with pytest.raises(ValueError, match=f"^--rl-engine {name}={value} \\(.*: not yet passed its tests on a GPU, "
                                             "so it is not run on cuda; leave it at its default, or pass "
                                             "--rl-engine untested_cuda_modes=on to run it"):
            asked.check_device(cuda)
        assert seen in asked.untested_on(cuda)[0]
        asked.check_device(cpu)
        asked.changed(untested_cuda_modes=True).check_device(cuda)
    assert sorted(UNTESTED_ON_CUDA) == [("compile", "fuse"), ("compile", "reduce-overhead")]
    both = default.changed(capture="cuda-graphs", graphed_pass="cuda-graphs")
    assert both.untested_on(cuda) == []
    assert [m.split(" (")[0] for m in both.changed(compile="fuse").untested_on(cuda)] == ["--rl-engine compile=fuse"]
    # the criterion: at its first batch, from its flags
    _, task, _ = _setup()
    crit = _crit(task, rl_baseline="none", rl_engine="compile=fuse")
    model, _, _ = _setup()
    with pytest.raises(ValueError, match="^--rl-engine compile=fuse"):
        crit.plan(model, cuda)
    _crit(task, rl_baseline="none", rl_engine="compile=fuse,untested_cuda_modes=on").settings.check_device(cuda)
    assert _crit(task, rl_baseline="none").settings.capture == "auto"


def test_the_plan_resolves_auto_once_for_the_model_and_its_device(monkeypatch, caplog):
    """``engine.passes.plan`` decides what runs: the default capture and graphed_pass, "auto", are "cuda-graphs"
    on a CUDA device without autocast in one process (the captured sampling step for a Transformer, and the
    graphed pass too for an LSTM, whose pass is a loop over steps), "off" on the CPU, under autocast and beside
    other processes; what the user set is kept; a mode that does not apply to the model is off, with its
    reason in the plan's description; "auto" never leaves the plan.  The criterion makes the plan at its first
    batch, keeps it on the model (no second plan for the next batch) and says it."""
    from model_families import STATIC

    from fairseq_smallvocab.engine import passes
    from fairseq_smallvocab.engine.settings import EngineSettings
    from fairseq_smallvocab.models.restricted import restrict

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    default = EngineSettings()
    lstm, task, _ = _setup()
    transformer = restrict(STATIC["transformer"]())

    def modes(plan):
        return plan.name, plan.settings.capture, plan.settings.graphed_pass

    assert modes(passes.plan(default, cpu, lstm)) == ("eager", "off", "off")
    assert modes(passes.plan(default, cuda, lstm, autocast=False)) == ("device", "cuda-graphs", "cuda-graphs")
    on_cuda = passes.plan(default, cuda, transformer, autocast=False)
    assert modes(on_cuda) == ("device", "cuda-graphs", "off")
    assert on_cuda.describe().startswith("capture=cuda-graphs, graphed_pass=off (TransformerDecoderBase has no "
                                         "recurrent pass to graph), merged_pass=off, compile=off"), on_cuda.describe()
    assert modes(passes.plan(default.changed(capture="buckets"), cuda, lstm, autocast=False)) == (
        "device", "buckets", "cuda-graphs")
    assert modes(passes.plan(default.changed(capture="off"), cuda, lstm, autocast=False))[1] == "off"
    amp = passes.plan(default, cuda, lstm, autocast=True)
    assert modes(amp) == ("eager", "off", "off") and amp.notes["capture"] == "auto: autocast is on (--amp)"
    no_static = passes.plan(default.changed(static_state=False), cuda, transformer, autocast=False)
    assert modes(no_static) == ("eager", "off", "off")
    assert "static_state=off samples in fairseq's incremental state" in no_static.notes["capture"]
    with monkeypatch.context() as patched:  # two processes
        patched.setattr(torch.distributed, "is_initialized", lambda: True)
        patched.setattr(torch.distributed, "get_world_size", lambda *group: 2)
        assert modes(passes.plan(default, cuda, lstm, autocast=False)) == ("eager", "off", "off")
    # the criterion: at its first batch, kept on the model, said once
    crit = _crit(task, rl_baseline="none")
    assert modes(crit.plan(lstm, cpu)) == ("eager", "off", "off") and lstm.engine_plan.device == cpu
    crit = _crit(task, rl_baseline="none")
    with caplog.at_level(logging.INFO, logger="fairseq_smallvocab.criterions.smallvocab_reinforce"):
        plan = crit.plan(lstm, cuda)
        assert crit.plan(lstm, cuda) is plan is lstm.engine_plan
    assert modes(plan) == ("device", "cuda-graphs", "cuda-graphs")
    # the model's passes without a request (CE with another criterion, validation) and its decoding run it too
    from fairseq_smallvocab.models.generation import _transposed_min_rows

    assert lstm.plan_on(cuda) is plan and _transposed_min_rows(lstm) == plan.settings.transposed_min_rows
    assert caplog.text.count("smallvocab_reinforce: on cuda, capture=cuda-graphs, graphed_pass=cuda-graphs") == 1
    assert crit.settings == default  # the settings stay what the user gave


def test_the_stock_translation_task_is_refused_when_the_criterion_is_built():
    """--criterion smallvocab_reinforce with the stock --task translation trained until the first batch, which
    failed with "unexpected keyword argument 'sample_request'": the criterion refuses that task when it is built,
    naming the task to use (and how it trains the full softmax); the plugin's task is taken."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask
    from helpers import make_dictionary

    stock = TranslationTask(TranslationConfig(), make_dictionary(20), make_dictionary(20))
    with pytest.raises(ValueError) as err:
        _crit(stock, ce_weight=0.5)
    message = str(err.value)
    assert "--criterion smallvocab_reinforce" in message and "--task translation's cannot" in message
    assert "--task translation_smallvocab" in message and "--small-vocab-size 0" in message


def test_the_plugins_task_is_taken_and_its_k_bounds_the_risk_beam_at_start_up(tiny_bin):
    """--risk-candidates beam's width (--rl-samples) at or above the task's K is refused when the criterion is
    built, naming --rl-samples, not at the first batch."""
    from translation_helpers import mt_task

    task = mt_task(tiny_bin, small_vocab_size=40)
    _crit(task, rl_objective="risk", risk_candidates="beam", rl_samples=39)
    with pytest.raises(ValueError, match=r"--rl-samples 40 \(--risk-candidates beam's width\) is not below the "
                                         r"small vocabulary of each input \(K = 40"):
        _crit(task, rl_objective="risk", risk_candidates="beam", rl_samples=40)


def _parse_training_flags(flags):
    """fairseq-train's parse of ``flags`` (with the plugin's task, model and this criterion), in-process."""
    from fairseq import options

    import fairseq_smallvocab  # noqa: F401  (registers the task, the model and the criterion)

    return options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--criterion",
        "smallvocab_reinforce", *flags])


@pytest.mark.parametrize("flags, replacement", [
    (["--rl-capture", "off"], "--rl-engine capture=off"),
    (["--rl-compile", "fuse"], "--rl-engine compile=fuse"),
    (["--rl-graphed-pass", "buckets"], "--rl-engine graphed_pass=buckets"),
    (["--rl-merged-pass", "on"], "--rl-engine merged_pass=on"),
    (["--rl-stop-check-every", "4"], "--rl-engine stop_check_every=4"),
    (["--rl-untested-cuda-modes"], "--rl-engine untested_cuda_modes=VALUE"),
])
def test_a_former_device_flag_is_refused_naming_its_rl_engine_key(flags, replacement, capsys):
    """The device flags --rl-engine replaced said only "unrecognized arguments": each names the key that
    replaced it, with its value; --rl-engine itself and the former --rl-lambda still parse."""
    with pytest.raises(SystemExit) as exit_:
        _parse_training_flags(flags)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{flags[0]} was replaced by --rl-engine" in err and f"use {replacement}" in err
    assert "unrecognized arguments" not in err
    args = _parse_training_flags(["--rl-engine", "capture=off", "--rl-lambda", "0.5"])
    assert args.rl_engine == "capture=off" and args.ce_weight == 0.5 and not hasattr(args, "rl_capture")


def test_a_former_device_option_in_a_hydra_config_is_refused_naming_rl_engine():
    """fairseq-hydra-train with +criterion.rl_capture=off failed in fairseq's add_defaults with omegaconf's
    "Key 'rl_capture' not in 'SmallVocabReinforceConfig'": it names criterion.rl_engine and how to give it (a
    quoted override, or the YAML key); the option that replaced it merges as before."""
    from fairseq.dataclass.initialize import add_defaults
    from omegaconf import OmegaConf

    from fairseq_smallvocab.compat.former_options import FormerOptionError
    from fairseq_smallvocab.engine.settings import ENGINE_KEYS
    from fairseq_smallvocab.reinforce.config import FORMER_ENGINE_OPTIONS

    assert set(FORMER_ENGINE_OPTIONS) <= set(ENGINE_KEYS)  # each has its key
    for name in ("smallvocab_reinforce", "reinforce_gleu"):
        cfg = OmegaConf.create({"criterion": {"_name": name, "rl_capture": "off"}})
        with pytest.raises(FormerOptionError) as err:
            add_defaults(cfg)
        assert str(err.value) == (
            "criterion.rl_capture was replaced by criterion.rl_engine, --rl-engine's comma-separated KEY=VALUE "
            "settings: give +criterion.rl_engine='capture=off' (quoted) on the command line, or rl_engine: "
            "capture=off under criterion: in the YAML file")
    cfg = OmegaConf.create({"criterion": {"_name": "smallvocab_reinforce", "rl_engine": "capture=off"}})
    add_defaults(cfg)
    assert cfg.criterion.rl_engine == "capture=off" and cfg.criterion.rl_samples == 1
