"""smallvocab_reinforce through fairseq-train (slow): fine-tuning and resuming with the
learned baseline's state, several samples with a sacrebleu reward and a
temperature, bad settings stopping the run; and distributed: DDP on CPU with gloo
(validating as one process, a stock transformer), on 2 GPUs, and the learned
baseline identical across workers."""

import os
import re

import pytest
import torch
from helpers import USER_DIR, D, _crit, _setup, free_port, launch_two, run

from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals

MT = ["--user-dir", USER_DIR, "--task", "translation_smallvocab", "--arch", "lstm_smallvocab", "--embed-dim", "16",
      "--batch-size", "32", "--cpu", "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
      "--no-epoch-checkpoints", "--log-interval", "1"]


@pytest.fixture(scope="module")
def ce_checkpoint(tiny_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("ce")
    run(["fairseq-train", tiny_bin, *MT, "--small-vocab-size", "0", "--criterion", "cross_entropy",
         "--optimizer", "adam", "--lr", "0.01", "--max-epoch", "2", "--save-dir", save])
    return save / "checkpoint_best.pt"


@pytest.mark.slow
def test_fairseq_train_fine_tunes_and_resumes_with_the_baseline_state(tiny_bin, ce_checkpoint, tmp_path):
    rl = [*MT, "--small-vocab-size", "0", "--criterion", "smallvocab_reinforce", "--optimizer", "sgd", "--lr", "0.01",
          "--save-dir", tmp_path / "rl", "--max-sample-len", "20"]
    run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "1", "--finetune-from-model", ce_checkpoint])
    def baseline_state():
        with allowed_globals():
            ckpt = torch.load(tmp_path / "rl" / "checkpoint_last.pt", weights_only=True)
        assert ckpt["criterion"] is None  # no parameters: fairseq neither saves nor wraps the criterion
        return ckpt["extra_state"]["TranslationSmallVocabTask"]["reinforce_gleu.baseline"]

    state = baseline_state()
    steps = state["_extra_state"]["adam"]["state"][0]["step"]
    assert steps > 0 and state["weight"].abs().sum() > 0
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "2", "--batch-splits", "2"])  # resumes
    log = out.stdout + out.stderr
    assert "Loaded checkpoint" in log and "reward" in log and "baseline_mse" in log
    assert "restored reinforce_gleu.baseline from the checkpoint" in log
    state2 = baseline_state()
    # the resumed epoch continued the saved Adam: the same updates, each now two chunks (--batch-splits 2)
    # with one baseline step each; a fresh baseline would count 2 * steps
    assert state2["_extra_state"]["adam"]["state"][0]["step"] == steps + 2 * steps

    # resumed with another baseline: the saved one is not restored, and the log says so
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "3", "--rl-baseline", "loo", "--rl-samples", "2"])
    assert "the checkpoint holds reinforce_gleu.baseline, which this run does not use" in out.stdout + out.stderr

    # resumed from weights gone to NaN: every batch is skipped, and nothing replaces the saved checkpoints
    last = tmp_path / "rl" / "checkpoint_last.pt"
    ckpt = torch.load(last, weights_only=False)
    for value in ckpt["model"].values():
        value.fill_(float("nan"))
    torch.save(ckpt, last)
    saved = {p.name: p.read_bytes() for p in (tmp_path / "rl").glob("checkpoint*.pt")}
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "4", "--rl-baseline", "loo", "--rl-samples", "2"],
              check=False)
    assert out.returncode != 0 and "was skipped because its reward or loss was not finite" in out.stderr
    assert re.search(r"valid on 'valid' subset \| nonfinite \d+ \| loss inf", out.stdout)  # not fairseq's -1
    assert {p.name: p.read_bytes() for p in (tmp_path / "rl").glob("checkpoint*.pt")} == saved


@pytest.mark.slow
def test_the_former_names_run_unchanged(tiny_bin, ce_checkpoint, tmp_path):
    """``--criterion reinforce_gleu`` and ``--rl-lambda``, the first names of ``smallvocab_reinforce`` and
    ``--ce-weight``, run as they did; a checkpoint written under the first names (its config and its optimizer
    history's class name) resumes under the new ones, and the other way round."""
    def rl(criterion, weight_flag, epochs, save="rl"):
        return run(["fairseq-train", tiny_bin, *MT, "--small-vocab-size", "0", "--criterion", criterion,
                    weight_flag, "0.5", "--optimizer", "sgd", "--lr", "0.01", "--save-dir", tmp_path / save,
                    "--max-sample-len", "20", "--rl-samples", "2", "--rl-baseline", "loo", "--max-epoch", str(epochs),
                    *(["--finetune-from-model", ce_checkpoint] if epochs == 1 else [])])

    old = rl("reinforce_gleu", "--rl-lambda", 1)
    new = rl("smallvocab_reinforce", "--ce-weight", 1, save="new")
    losses = [re.findall(r"train_inner \| .* loss=([-\d.]+)", out.stdout + out.stderr) for out in (old, new)]
    assert losses[0] and losses[0] == losses[1]  # the same run
    # as written before the renames: the class name in the optimizer history, the config's keys
    last = tmp_path / "rl" / "checkpoint_last.pt"
    ckpt = torch.load(last, weights_only=False)
    ckpt["optimizer_history"][-1]["criterion_name"] = "ReinforceGleuCriterion"
    ckpt["cfg"]["criterion"]["_name"] = "reinforce_gleu"
    ckpt["cfg"]["criterion"]["rl_lambda"] = ckpt["cfg"]["criterion"].pop("ce_weight")
    torch.save(ckpt, last)
    out = rl("smallvocab_reinforce", "--ce-weight", 2)
    assert "Loaded checkpoint" in out.stdout + out.stderr and "epoch 002" in out.stdout + out.stderr
    out = rl("reinforce_gleu", "--rl-lambda", 3)
    assert "epoch 003" in out.stdout + out.stderr
    bad = run(["fairseq-train", tiny_bin, *MT, "--criterion", "reinforce_gleu", "--rl-lambda", "2",
               "--save-dir", tmp_path / "bad"], check=False)
    assert bad.returncode != 0 and "--ce-weight must be in [0, 1], got 2.0" in bad.stderr


@pytest.mark.slow
def test_fairseq_train_with_several_samples_a_sacrebleu_reward_and_temperature(tiny_bin, ce_checkpoint, tmp_path):
    """--rl-samples 3 --rl-baseline loo --reward chrf --sample-temperature 0.8 through fairseq-train: the
    new metrics are logged, a resumed run continues (the leave-one-out baseline keeps no state; fairseq-train
    takes --rl-engine, whose device modes' effect test_capture.py checks), and bad settings stop
    fairseq-train at start-up with the criterion's message."""
    rl = [*MT, "--small-vocab-size", "0", "--criterion", "smallvocab_reinforce", "--optimizer", "sgd", "--lr", "0.01",
          "--save-dir", tmp_path / "rl", "--max-sample-len", "20", "--rl-samples", "3", "--rl-baseline", "loo",
          "--reward", "chrf", "--sample-temperature", "0.8"]
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "1", "--finetune-from-model", ce_checkpoint])
    log = out.stdout + out.stderr
    values = {key: float(re.findall(rf"\| {key} ([-\d.]+)", log)[-1])
              for key in ("reward", "reward_std", "greedy_frac", "entropy")}
    assert 0 < values["reward"] < 100 and values["reward_std"] > 0 and 0 <= values["greedy_frac"] <= 1
    assert values["entropy"] > 0 and "baseline_mse" not in log and "| baseline " not in log  # loo's is the reward
    ckpt = torch.load(tmp_path / "rl" / "checkpoint_last.pt", weights_only=False)
    assert "reinforce_gleu.baseline" not in str(ckpt["extra_state"].get("TranslationSmallVocabTask", {}))
    out = run(["fairseq-train", tiny_bin, *rl, "--max-epoch", "2", "--rl-engine",
               "capture=buckets,graphed_pass=buckets"])
    assert "Loaded checkpoint" in out.stdout + out.stderr and "epoch 002" in out.stdout + out.stderr
    # (the others: test_bad_rl_settings)
    for flags, message in ((["--rl-samples", "1"], "--rl-baseline loo needs --rl-samples >= 2"),
                           (["--reward", "rouge"], "unknown reward 'rouge': --reward must be one of gleu, gleu_bp, "
                                                   "bleu, chrf, constant, or python:MODULE.FUNCTION"),
                           (["--rl-engine", "capture=graphs"], "--rl-engine: capture=graphs: capture takes one of"),
                           (["--rl-capture", "buckets"], "--rl-capture was replaced by --rl-engine, which takes "
                                                         "the device settings as one comma-separated KEY=VALUE "
                                                         "list (e.g. --rl-engine capture=off,stop_check_every=4): "
                                                         "use --rl-engine capture=buckets")):
        bad = run(["fairseq-train", tiny_bin, *rl, *flags, "--max-epoch", "3"], check=False)
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr[-2000:]


def _launch_two(tiny_bin, ce_ckpt, save, extra, model=MT):
    """Two fairseq-train workers (ranks 0 and 1) of one distributed run
    (fine-tuning ``ce_ckpt``, or from scratch when None)."""
    return launch_two([tiny_bin, *model, "--small-vocab-size", "0", "--criterion", "smallvocab_reinforce",
                       "--optimizer", "sgd", "--lr", "0.01", "--max-epoch", "1", "--batch-size", "16",
                       *(["--finetune-from-model", ce_ckpt] if ce_ckpt else []), "--save-dir", save,
                       "--max-sample-len", "30", *extra])


def _valid_stats(out):
    """The first validation's logged values, as {name: text}."""
    line = re.search(r"valid on 'valid' subset \| (.*)", out).group(1)
    return dict(part.strip().split(" ", 1) for part in line.split(" | "))


@pytest.mark.slow
def test_distributed_data_parallel_on_cpu_with_gloo_validates_as_one_process(tiny_bin, ce_checkpoint, predictor,
                                                                              tmp_path):
    """fairseq's DDP with 2 CPU processes: gloo, --ddp-backend legacy_ddp (PyTorch's
    DDP wrapper wants devices), fine-tuning from a checkpoint (rank 0 broadcasts
    it through torch.load: the plugin's allow-list is routed there too), inside
    predicted vocabularies, validating: fairseq sums the workers' logging outputs
    as tensors there, and the teacher-forced validation numbers equal a single
    process's on the same data and weights (learning rate 0)."""
    small = ["--small-vocab-size", "100", "--vocab-predictor", predictor, "--candidates-dir", tmp_path / "cands",
             "--lr", "0"]
    one = run(["fairseq-train", tiny_bin, *MT, "--criterion", "smallvocab_reinforce", "--optimizer", "sgd",
               "--max-epoch", "1", "--batch-size", "16", "--max-sample-len", "30", "--finetune-from-model",
               ce_checkpoint, "--save-dir", tmp_path / "one", *small])  # also writes the lists both workers read
    outs = _launch_two(tiny_bin, ce_checkpoint, tmp_path / "rl",
                       ["--cpu", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", *small])
    assert "initialized host" in outs[1] and "as rank 1" in outs[1]
    assert re.search(r"train \| epoch 001 .*baseline_mse .*bsz 3\d", outs[0])  # 2 x 16 sentences per update
    assert (tmp_path / "rl" / "checkpoint_last.pt").exists()
    single, both = _valid_stats(one.stdout + one.stderr), _valid_stats(outs[0])
    for key in ("ce", "gold_outside_cands"):
        assert float(both[key]) == float(single[key]), (key, single, both)
    assert float(single["gold_outside_cands"]) > 0  # valid lists are the predictor's own: some gold words miss


TRANSFORMER_MT = [*MT[:4], "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                  "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                  "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                  "--share-decoder-input-output-embed", *MT[8:]]


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the sampling step captured as CUDA graphs)")
@pytest.mark.parametrize("arch", ["lstm_smallvocab", "transformer"])
@pytest.mark.parametrize("small", [True, False])
def test_fairseq_train_on_a_gpu_replays_what_the_eager_loop_computes(tiny_bin, predictor, tmp_path, arch, small):
    """fairseq-train on one GPU, the way a user runs it: the sampling step captured per bucket
    (--rl-engine capture=cuda-graphs; for the LSTM its teacher-forced passes too, graphed_pass=cuda-graphs),
    while fairseq's DataLoader pins the next batches in a thread of its own, over two epochs of batches and
    validations.  At learning rate 0 (the same weights and draws at every update) and without dropout (the
    graphed pass draws its masks in an order of its own) each update logs the loss and reward of the eager
    passes (--rl-engine capture=off,graphed_pass=off), inside predicted vocabularies and with the full
    softmax.  Without --rl-engine ("auto") the step is captured as with the flags."""
    model = [arg for arg in (MT if arch == "lstm_smallvocab" else TRANSFORMER_MT) if arg != "--cpu"]
    args = ["fairseq-train", tiny_bin, *model, "--criterion", "smallvocab_reinforce", "--optimizer", "sgd", "--lr", "0",
            "--max-epoch", "2", "--max-sample-len", "20", "--rl-samples", "2", "--rl-baseline", "loo",
            "--seed", "3", "--no-save", "--dropout", "0",
            *(["--small-vocab-size", "100", "--vocab-predictor", predictor, "--candidates-dir", tmp_path / "cands"]
              if small else ["--small-vocab-size", "0"])]
    graphed = ",graphed_pass=cuda-graphs" if arch == "lstm_smallvocab" else ""
    logs = {mode: run([*args, *flags]) for mode, flags in (
        ("cuda-graphs", ["--rl-engine", "capture=cuda-graphs" + graphed]),
        ("off", ["--rl-engine", "capture=off,graphed_pass=off"]), ("auto", []))}

    def updates(out):
        return [tuple(map(float, match)) for match in re.findall(
            r"train_inner \| .* loss=([-\d.]+), .*\breward=([\d.]+)", out.stdout + out.stderr)]

    captured, eager, auto = updates(logs["cuda-graphs"]), updates(logs["off"]), updates(logs["auto"])
    assert len(captured) == len(eager) == len(auto) >= 4
    for got, want in [*zip(captured, eager), *zip(auto, eager)]:
        assert got == pytest.approx(want, rel=1e-3, abs=2e-3)
    assert all(len(re.findall(r"valid on 'valid' subset", out.stdout)) == 2 for out in logs.values())
    captured_log, eager_log, auto_log = (logs[mode].stdout + logs[mode].stderr for mode in ("cuda-graphs", "off",
                                                                                           "auto"))
    assert "captured the sampling step" not in eager_log and "graphed_pass: captured" not in eager_log
    assert "capture=cuda-graphs, graphed_pass=cuda-graphs (auto)" in auto_log
    for log in (captured_log, auto_log):
        assert "captured the sampling step for" in log
        assert ("graphed_pass: captured the training pass" in log) == (arch == "lstm_smallvocab")


@pytest.mark.slow
def test_distributed_reinforce_on_a_transformer_with_gloo(tiny_bin, tmp_path):
    """The generic sampler through fairseq's DDP: a stock transformer, 2 CPU processes."""
    assert MT[4:8] == ["--arch", "lstm_smallvocab", "--embed-dim", "16"]
    outs = _launch_two(tiny_bin, None, tmp_path / "rl", ["--cpu", "--distributed-backend", "gloo",
                                                         "--ddp-backend", "legacy_ddp"], model=TRANSFORMER_MT)
    assert re.search(r"train \| epoch 001 .*reward .*baseline_mse .*bsz 3\d", outs[0])
    assert (tmp_path / "rl" / "checkpoint_last.pt").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (PyTorch DDP, NCCL)")
@pytest.mark.parametrize("engine", [[], ["--rl-engine", "capture=cuda-graphs,graphed_pass=cuda-graphs"]])
def test_distributed_data_parallel_on_gpus(tiny_bin, ce_checkpoint, tmp_path, engine):
    """Two GPUs, PyTorch's DDP: the default (with several processes "auto" keeps the sampling step and the
    graphed pass eager) and both captured, as asked for (what "auto" would choose once this passes)."""
    _launch_two(tiny_bin, ce_checkpoint, tmp_path / "rl", ["--rl-baseline", "self-critical", *engine])


def _baseline_worker(rank, port, out):
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    _, task, _ = _setup()
    crit = _crit(task, rl_baseline="learned", baseline_lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each worker sees other states and rewards
    first = torch.tensor([0.1, 0.2, 0.3, 0.4]) + 0.4 * rank  # a fresh baseline starts at both workers' mean
    torch.save(crit.baseline.values(torch.randn(4, 3, D, generator=gen), torch.ones(4, 3), first).clone(),
               out / f"start{rank}.pt")
    for _ in range(3):
        crit.baseline.learn(torch.randn(4, 3, D, generator=gen), torch.ones(4, 3), torch.rand(4, generator=gen))
    torch.save(crit.state_dict()["baseline.weight"], out / f"w{rank}.pt")
    torch.distributed.destroy_process_group()
    # gloo's run-loop thread may still be releasing the last all_reduce's tensors, which takes the GIL: during the
    # interpreter's teardown that aborts the worker (SIGABRT, pytorch/pytorch#38228; 5 of 20 runs here). Its
    # results are written, so it leaves now.
    os._exit(0)


@pytest.mark.slow
def test_learned_baseline_stays_identical_across_workers(tmp_path):
    torch.multiprocessing.spawn(_baseline_worker, args=(free_port(), tmp_path), nprocs=2, join=True)
    w0, w1 = torch.load(tmp_path / "w0.pt"), torch.load(tmp_path / "w1.pt")
    assert w0.abs().sum() > 0 and torch.equal(w0, w1)
    for rank in (0, 1):  # (0.1 + ... + 0.4 + 0.5 + ... + 0.8) / 8
        torch.testing.assert_close(torch.load(tmp_path / f"start{rank}.pt"), torch.full((4, 3), 0.45))


@pytest.mark.slow
def test_fairseq_train_with_risk_logs_it_and_distributed_workers_validate_as_one(tiny_bin, ce_checkpoint, tmp_path):
    """--rl-objective risk through fairseq-train: the risk (x 100) and the distinct samples per input logged, no
    baseline; two gloo workers (the logs summed as tensors) validate as one process does at learning rate 0."""
    risk = ["--rl-objective", "risk", "--rl-samples", "3", "--risk-sharpness", "2", "--ce-weight", "0.1",
            "--lr", "0"]
    one = run(["fairseq-train", tiny_bin, *MT, "--small-vocab-size", "0", "--criterion", "smallvocab_reinforce",
               "--optimizer", "sgd", "--max-epoch", "1", "--batch-size", "16", "--max-sample-len", "30",
               "--finetune-from-model", ce_checkpoint, "--save-dir", tmp_path / "one", *risk])
    log = one.stdout + one.stderr
    assert "--rl-objective risk: the expected cost over each input's distinct samples" in log
    train = re.search(r"train \| epoch 001 \| (.*)", log).group(1)
    stats = dict(part.strip().split(" ", 1) for part in train.split(" | "))
    assert 0 < float(stats["risk"]) <= 100 and 1 <= float(stats["distinct"]) <= 3 and "baseline" not in stats
    outs = _launch_two(tiny_bin, ce_checkpoint, tmp_path / "rl", ["--cpu", "--distributed-backend", "gloo",
                                                                  "--ddp-backend", "legacy_ddp", *risk])
    assert re.search(r"train \| epoch 001 .*risk .*distinct .*bsz 3\d", outs[0])
    single, both = _valid_stats(log), _valid_stats(outs[0])
    assert float(both["ce"]) == float(single["ce"]), (single, both)
