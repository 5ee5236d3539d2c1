"""Every command the documentation shows is checked, so that none can rot unnoticed.

The documentation is README.md, docs/*.md (not docs/journal/: history, not maintained), examples/**/*.md, and the
usage lines in the comments of examples/**/*.sh and *.yaml. Commands are read from fenced shell blocks, indented
code blocks and inline `code` that starts like a command (python scripts/..., fairseq-* DATA, bash *.sh, make,
pip, ...). Each must be in tests/documented_commands.json, whose "about" says how an entry says what is done with
it: run here on tiny data, run by another file's test, parse-checked only (with the reason it cannot run here),
dry-run (example scripts), or checked as far as it can be (make, pip). Every command of the first three kinds is
parse-checked: its entry point exists and its parser accepts its flags (fairseq's parsers with the plugin loaded,
hydra's composition, the script's own argparse). A documented command missing from the table fails, so does an
entry the documentation no longer shows, and so does a link between the documents that leads nowhere.
"""

import json
import re
import runpy
import sys
from unittest import mock

import pytest
from documented import (
    COMMANDS,
    MARKDOWN,
    NAMED,
    OTHER_CHECKS,
    _defines,
    check_argv,
    check_benchmark,
    comment_commands,
    documented_commands,
    expand_steps,
    markdown_commands,
    split_command,
)
from helpers import REPO, USER_DIR, run


def test_every_documented_command_is_in_the_table_and_every_entry_is_documented():
    """A command added to the documentation needs an entry; an entry whose command is gone is removed."""
    where = documented_commands()
    missing = {command: places for command, places in where.items() if command not in COMMANDS}
    assert not missing, "documented commands that tests/documented_commands.json does not list:\n" + \
        "\n".join(f"  {', '.join(places)}: {command}" for command, places in missing.items())
    gone = sorted(set(COMMANDS) - set(where))
    assert not gone, "documented_commands.json lists commands the documentation no longer shows:\n" + "\n".join(gone)


def test_the_table_s_entries_are_well_formed_and_name_tests_that_exist():
    keys = {"kind", "why", "test", "fill", "check", "after", "steps", "name"}
    for command, doc in COMMANDS.items():
        assert set(doc) <= keys and doc["why"] and not doc["why"].startswith("@"), (command, doc)
        assert doc["kind"] in ("run", "elsewhere", "parse", "script", "other"), (command, doc)
        assert ("test" in doc) == (doc["kind"] in ("run", "elsewhere")), (command, doc)
        if doc["kind"] == "run":
            assert callable(globals().get(doc["test"])), f"{doc['test']}: no such test in this file"
        if doc["kind"] == "elsewhere":
            assert _defines(doc["test"]), f"{doc['test']}: no such test or fixture"
        if "check" in doc:
            assert doc["kind"] == "other" and doc["check"] in OTHER_CHECKS, (command, doc)


def test_documented_commands_parse(monkeypatch):
    """Each command's entry point exists and its parser accepts its flags (placeholders filled as the table
    says), run from the repository root as the documentation runs them."""
    import logging

    monkeypatch.chdir(REPO)
    logging.disable(logging.INFO)  # the plugin's and fairseq's import chatter
    failures = []
    try:
        for command, doc in COMMANDS.items():
            if doc["kind"] in ("run", "elsewhere", "parse"):
                try:
                    check_argv(split_command(command, doc.get("fill"))[1])
                except AssertionError as error:
                    failures.append(f"{command}\n    {error}")
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, f"{len(failures)} documented commands do not parse:\n" + "\n".join(failures)


def test_commands_no_parser_can_check():
    for command, doc in COMMANDS.items():
        if "check" in doc:
            assert OTHER_CHECKS[doc["check"]](command) is not False, command


def _anchor(heading):
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_documents_lead_somewhere():
    """Every relative link of the documentation names a file that exists, and a #section of a markdown file one
    of its headings (the README's results table links into docs/results.md)."""
    broken = []
    for name in MARKDOWN:
        for target in re.findall(r"\]\(([^)\s]+)\)", (REPO / name).read_text()):
            path, _, anchor = target.partition("#")
            if re.match(r"[a-z]+:", target) or not path:
                continue
            file = (REPO / name).parent / path
            text = file.read_text() if file.suffix == ".md" and file.is_file() else ""
            headings = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M)
            if not file.exists() or anchor and anchor not in {_anchor(h) for h in headings}:
                broken.append(f"{name}: {target}")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


@pytest.mark.parametrize("bad, message", [
    ("python scripts/no_such_script.py --k 1", "no such script"),
    ("python scripts/export_candidates.py --predictor p.pt --top-k 5 --out-dir o", "required: --k"),
    ("python scripts/benchmark.py --quik", "unrecognized arguments: --quik"),
    ("fairseq-train DATA --user-dir fairseq_smallvocab --task translation_smallvocab --arch lstm_smallvocab "
     "--small-vocab 500", "unrecognized arguments: --small-vocab 500"),
    ("fairseq-generate DATA --user-dir fairseq_smallvocab --task translation_smallvocab --candidates-dirs c",
     "unrecognized arguments: --candidates-dirs"),
    ("fairseq-hydra-train --config-dir examples/hydra --config-name translation_ce common.user_dir=x "
     "task.vocab_predicter=p.pt", "task.vocab_predicter"),
    ("sacrebleu -tok nothing -b ref.txt -i hyp.txt", "invalid choice: 'nothing'"),
    ("python scripts/benchmark.py --device cuda --modes reinforce --ab capture=of,cuda-graphs", "capture=of"),
    ("python scripts/sweep_lenpen.py --path c.pt --data d --beam 5 -- --user-dir fairseq_smallvocab "
     "--task translation_smallvocab --small-vocab 500", "unrecognized arguments: --small-vocab 500"),
])
def test_the_parse_check_catches_what_rots(bad, message, monkeypatch):
    """What the parse check is for: a removed script, a renamed flag, a misspelt hydra key."""
    monkeypatch.chdir(REPO)
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_argv(split_command(bad)[1])


def test_reading_the_documentation():
    """What counts as a command: fenced shell lines (continuations joined, comments and loop syntax dropped,
    `a && b` split), indented blocks and inline code that start like a command, usage lines of scripts."""
    text = "\n".join([
        "Run `python scripts/x.py --a 1` or `fairseq-train` (a mention) and `K=5 bash examples/y.sh`.",
        "```bash", "source .venv/bin/activate && fairseq-train DATA \\", "  --lr 1  # the rate", "for r in 0 1; do",
        "  fairseq-train DATA --rank $r &", "done; wait", "```", "```", "python scripts/output.py", "```", "",
        "    python scripts/indented.py --b \\", "        2", "text `python3 scripts/z.py", "--c` more"])
    assert [c for _, c in markdown_commands(text)] == [
        "source .venv/bin/activate", "fairseq-train DATA --lr 1", "fairseq-train DATA --rank $r",
        "python scripts/indented.py --b 2", "python scripts/x.py --a 1", "K=5 bash examples/y.sh",
        "python3 scripts/z.py --c"]
    script_text = "#!/bin/bash\n# Run it:\n#   K=1 bash examples/a.sh \\\n#     && echo\n# fairseq-train flags, prose\n"
    assert comment_commands(script_text) == [(3, "K=1 bash examples/a.sh")]
    assert split_command("X=1 fairseq-generate D --k 2 > out.txt < in.txt", {"--k 2": "--k 3"}) == (
        {"X": "1"}, ["fairseq-generate", "D", "--k", "3"], {">": "out.txt", "<": "in.txt"})
    assert expand_steps(["a", [2, ["b", [2, ["c"]]]]]) == ["a", "b", "c", "c", "b", "c", "c"]
    assert _anchor("The demo (make demo)") == "the-demo-make-demo" and _anchor("A: b's (3 seeds)") == "a-bs-3-seeds"


def adapt(command, values=None, extra=(), fill=None):
    """The argv of a documented command run on tiny data: ``values`` maps a documented token to the tiny one, or a
    flag (``--k``) to its new value; each must be in the command (an adaptation cannot outlive what it adapts)."""
    _, argv, _ = split_command(command, fill)
    values, out, used = dict(values or {}), [], set()
    for i, token in enumerate(argv):
        key = argv[i - 1] if i and argv[i - 1] in values and argv[i - 1].startswith("-") else token
        if key in values and (key != token or not token.startswith("-")):
            out.append(str(values[key]))
            used.add(key)
        else:
            out.append(token)
    assert used == set(values), f"not in the command any more: {set(values) - used}: {command}"
    out += [str(e) for e in extra]
    if out[0] in ("python", "python3") and out[1].endswith(".py"):  # helpers.run forks it from its server
        out = [str(REPO / out[1]), *out[2:]]
    return out


def _run_in_process(argv, capsys):
    """A project script (or python -c) in this process, as `python ...` runs it; returns its stdout."""
    capsys.readouterr()
    if argv[:2] == ["python", "-c"]:
        exec(compile(argv[2], "python -c", "exec"), {"__name__": "__main__"})
    else:
        with mock.patch.object(sys, "argv", argv):
            try:
                runpy.run_path(argv[0], run_name="__main__")
            except SystemExit as exit_:
                assert exit_.code in (None, 0), f"{' '.join(argv)}: exit {exit_.code}\n{capsys.readouterr().err}"
    return capsys.readouterr().out


def test_scripts_run_in_process_on_tiny_settings(tmp_path, capsys):
    """The documented commands that take a second or two, run in this process (no subprocess), each adapted
    as the table says."""
    from helpers import TINY

    c = NAMED
    runs = {
        c["USER_DIR_OF_AN_INSTALL"]: adapt(c["USER_DIR_OF_AN_INSTALL"]),
        c["PLOTS_README"]: adapt(c["PLOTS_README"], {"bench.json": REPO / "docs" / "data" / "bench_synthetic.json",
                                                     "--out-dir": tmp_path / "plots"}),
        c["PLOTS"]: adapt(c["PLOTS"], {"--out-dir": tmp_path / "docs"}),
        c["REWARDS"]: adapt(c["REWARDS"], extra=["--batch", "8", "--repeats", "1", "--vocab-size", "300", "--threads",
                                                 "1"]),
        c["REWARDS_ALL"]: adapt(c["REWARDS_ALL"], {"--batch": 8}, extra=["--repeats", "1", "--vocab-size", "300"]),
        c["CAPTIONS_RAW"]: adapt(c["CAPTIONS_RAW"], {"--out": tmp_path / "captions-raw"}, extra=[
            arg for name, value in TINY.__dict__.items() for arg in (f"--{name.replace('_', '-')}", value)]),
    }
    assert set(runs) == {command for command, doc in COMMANDS.items()
                         if doc.get("test") == "test_scripts_run_in_process_on_tiny_settings"}
    out = {command: _run_in_process(argv, capsys) for command, argv in runs.items()}  # (conftest puts threads back)
    assert out[c["USER_DIR_OF_AN_INSTALL"]].strip() == str(USER_DIR)  # what --user-dir takes
    for name in ("speedup", "time_vs_k", "memory"):  # the plots docs/ shows, redrawn from its records
        assert (REPO / "docs" / "data" / f"bench_{name}.png").exists()
        assert (tmp_path / "docs" / f"bench_{name}.png").exists()
        assert (tmp_path / "plots" / f"bench_{name}.png").exists()
    for name in ("REWARDS", "REWARDS_ALL"):
        records = [json.loads(line) for line in out[c[name]].splitlines() if line.startswith("{")]
        assert {r["reward"] for r in records} == {"gleu", "gleu_bp", "bleu", "chrf", "constant"}, out[c[name]]
        assert all(r["median_ms"] >= 0 for r in records)
    written = {path.name for path in (tmp_path / "captions-raw").iterdir()}
    assert {"train.npy", "train.index", "train.en", "test.index"} <= written, written


README_OWN_MODEL = ["OWN_FLAGS", "OWN_VP", "OWN_CE", "OWN_REINFORCE", "OWN_GENERATE", "OWN_GENERATE_STOCK",
                    "OWN_EXPORT"]
TINY_TRANSFORMER = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                    "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
QUIET = ["--cpu", "--num-workers", "0", "--no-progress-bar"]


def _readme_section(title):
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n{title}\n")
    end = re.search(r"\n#{2,3} ", text[start + len(title) + 2:])  # the next heading (a shell comment has one #)
    return text[start:start + len(title) + 2 + (end.start() if end else len(text))]


@pytest.mark.slow
def test_readme_own_model_then_deploy_run_in_the_readme_s_order(tiny_raw, tmp_path):
    """README's "A stock Transformer" and "Deploy with CTranslate2" as a user types them (once run "elsewhere",
    six of them failed a user), in the README's order, from the user's own folder (so --user-dir is the whole
    path, as the README says there): the user's raw text binarized with one dictionary (the README's
    prepare_data.py --joined-dictionary), their stock Transformer trained with --share-all-embeddings, then the
    predictor, CE inside the candidates, REINFORCE, both decodings, the export and the README's Python lines.
    The text is sentencepiece pieces, as the README's commands are written for: the reward, dev BLEU, test BLEU
    and the deployed model's output are words. Each command is shrunk only in sizes (epochs, updates, d, and K:
    the tiny corpus has fewer pieces than the paper's rule's K)."""
    pytest.importorskip("ctranslate2")
    shown = [command for _, command in sorted(markdown_commands(_readme_section("### A stock Transformer")))]
    shown += [command for _, command in sorted(markdown_commands(_readme_section("## Deploy with CTranslate2")))]
    assert shown == [NAMED[name] for name in README_OWN_MODEL]  # the order a user reads them in

    user = tmp_path / "user"  # the user's folder, outside the repository
    raw = user / "my-corpus"
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        for side, lang in (("src", "en"), ("tgt", "de")):
            (raw / f"{split}.{lang}").write_bytes((tiny_raw / f"{split}.{side}").read_bytes())
    data = user / "data-bin" / "wmt.en-de"
    run([REPO / "scripts" / "prepare_data.py", "--raw-dir", raw, "--src", "en", "--tgt", "de", "--dest", data,
         "--min-count", "1", "--subword", "sentencepiece", "--sp-vocab-size", "300", "--joined-dictionary"], cwd=user)
    small = ["--small-vocab-size", "120"]
    run(["fairseq-train", "data-bin/wmt.en-de", "--task", "translation", "--arch", "transformer",
         "--share-all-embeddings", *TINY_TRANSFORMER, "--criterion", "label_smoothed_cross_entropy",
         "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.005", "--max-epoch", "3", "--batch-size", "32",
         *QUIET, "--save-dir", "checkpoints/transformer"], cwd=user)  # the user's model, stock fairseq

    def readme(name, values=None, extra=()):
        whole_path = {"--user-dir": USER_DIR} if "--user-dir" in NAMED[name] else {}
        # a $(command) is run first, from the same folder, and its output's words put in its place, as a shell does
        fill = {found.group(0): run(adapt(found.group(1)), cwd=user).stdout.strip()
                for found in re.finditer(r"\$\(([^()]+)\)", NAMED[name])}
        return run(adapt(NAMED[name], {**whole_path, **(values or {})}, extra=extra, fill=fill), cwd=user)

    flags = readme("OWN_FLAGS").stdout.split()  # the model's flags, which the strict loads below check
    assert flags[:2] == ["--arch", "transformer"] and "--share-all-embeddings" in flags
    # the arch sets the decoder's dims from the encoder's
    assert set(TINY_TRANSFORMER[::2]) - set(flags) == {"--decoder-embed-dim", "--decoder-ffn-embed-dim"}
    out = readme("OWN_VP", {"--max-epoch": 2, "--recall-at": 120, "--best-checkpoint-metric": "recall@120"},
                 extra=QUIET)  # (at the tiny corpus's K)
    assert re.search(r"valid on 'valid' subset .*\| recall@120 [\d.]+ \| freq_recall@120 ", out.stdout + out.stderr)
    assert (user / "checkpoints" / "vp" / "checkpoint_best.pt").exists()
    flags_of = "$(python scripts/checkpoint_flags.py checkpoints/transformer/checkpoint_best.pt)"
    wrong = run(adapt(NAMED["OWN_CE"], {"--user-dir": USER_DIR, "--max-epoch": 1}, extra=[*QUIET, *small],
                      fill={flags_of: "--arch transformer --share-all-embeddings"}),
                cwd=user, check=False)  # a default Transformer's flags, not the model's: said in one message
    said = wrong.stdout + wrong.stderr
    assert wrong.returncode != 0 and "does not fit the model this command builds" in said, said[-3000:]
    assert "python scripts/checkpoint_flags.py checkpoints/transformer/checkpoint_best.pt" in said
    assert "please ensure that the architectures match" not in said  # (nor fairseq's state-dict dump)
    assert "$(python scripts/checkpoint_flags.py checkpoints/transformer/checkpoint_best.pt)" in NAMED["OWN_CE"]
    out = readme("OWN_CE", {"--max-epoch": 1}, extra=[*QUIET, *small])  # (it stops by itself)
    assert "no longer experimental" not in out.stderr and "ConfigStore" not in out.stderr  # compat/quiet_logs.py
    assert "scores pieces" not in out.stdout + out.stderr  # dev BLEU on words
    assert re.search(r"candidates for valid: K = \d+ of \|V\| = \d+", out.stdout + out.stderr), out.stderr[-3000:]
    out = readme("OWN_REINFORCE", {"--max-update": 4, "--validate-interval-updates": 2, "--save-interval-updates": 2,
                                   "--batch-size": 16}, extra=[*QUIET, *small])
    log = out.stdout + out.stderr
    assert re.search(r"valid on 'valid' subset .*\| bleu [\d.]+", log) and " reward " in log, log[-3000:]
    assert "scores pieces" not in log and "'reward_post_process': 'sentencepiece'" in log  # the reward on words
    tests = len((raw / "test.de").read_text().splitlines())
    for name in ("OWN_GENERATE", "OWN_GENERATE_STOCK"):  # every test sentence (stock: by its batch multiple 1)
        out = readme(name, extra=["--cpu"])
        hypotheses = re.findall(r"^H-\d+\t\S+\t(.*)$", out.stdout, re.M)
        assert len(hypotheses) == tests and "BLEU" in out.stdout, out.stderr[-3000:]
        assert not any("\u2581" in h for h in hypotheses)  # words, scored against the words
    out = readme("OWN_EXPORT", extra=["--vmap-per-token", "10", "--vmap-always", "20"])
    assert (user / "ct2-en-de" / "model.bin").exists(), out.stdout + out.stderr
    assert re.search(r"^the vocabulary map on \d+ valid sentences \(.*(It pays here|It slows|No clear difference)",
                     out.stdout, re.M), out.stdout  # whether to use it, measured on this model

    python = re.search(r"```python\n(.*?)```", _readme_section("## Deploy with CTranslate2"), re.S).group(1)
    script = user / "readme_deploy.py"
    script.write_text(python)
    out = run(["python", script], cwd=user)
    assert out.stdout.strip() and "\u2581" not in out.stdout, out.stderr[-3000:]  # one translation, in words


@pytest.mark.slow
def test_translation_recipe_runs_on_tiny_data(predictor, tiny_bin, tiny_raw, tmp_path):
    """examples/vocab_predictor's export and examples/translation's CE training, decoding (fairseq-generate on
    the exported lists, fairseq-interactive on the predictor the checkpoint names) and REINFORCE, on tiny_bin."""
    cands, ce, rl = tmp_path / "candidates", tmp_path / "ce", tmp_path / "rl"
    data = {"data-bin/multi30k.en-de": tiny_bin, "-s": "src", "-t": "tgt"}
    small = {**data, "--candidates-dir": cands, "--small-vocab-size": 50}
    tiny_model = ["--embed-dim", "16", "--num-workers", "0", "--no-progress-bar"]
    run(adapt(NAMED["VP_EXPORT"], {"--predictor": predictor, "--k": 60, "--out-dir": cands}), cwd=REPO)
    assert (cands / "train.k60.npy").exists() and (cands / "test.k60.json").exists()
    # from the repository root, as documented (--user-dir fairseq_smallvocab); every output goes to tmp_path
    out = run(adapt(NAMED["MT_CE"], {**small, "--max-epoch": 1, "--save-dir": ce}, extra=tiny_model), cwd=REPO)
    assert "gold_outside_cands" in out.stdout + out.stderr and "| bleu " in out.stdout + out.stderr
    out = run(adapt(NAMED["MT_GENERATE"], {**small, "--path": ce / "checkpoint_best.pt"}), cwd=REPO)
    hypotheses = re.findall(r"^H-\d+\t", out.stdout, re.M)
    assert len(hypotheses) == len((tiny_raw / "test.src").read_text().splitlines()) and "BLEU" in out.stdout
    sources = (tiny_raw / "test.src").read_text().splitlines()[:4] + [""]
    out = run(adapt(NAMED["MT_INTERACTIVE"], {**data, "--small-vocab-size": 50, "--path": ce / "checkpoint_best.pt"}),
              stdin="\n".join(sources) + "\n", cwd=REPO)
    assert len(re.findall(r"^H-\d+\t", out.stdout, re.M)) == len(sources), out.stdout + out.stderr[-3000:]
    out = run(adapt(NAMED["MT_REINFORCE"], {**small, "--finetune-from-model": ce / "checkpoint_best.pt",
                                            "--max-epoch": 1, "--save-dir": rl}, extra=tiny_model), cwd=REPO)
    assert " reward " in out.stdout + out.stderr and (rl / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_captioning_export_runs_on_tiny_data(cap_predictor, cap_bin, tmp_path):
    """examples/captioning's export of the predictor's lists from image features."""
    out = tmp_path / "candidates"
    run(adapt(NAMED["CAPTIONS_EXPORT"], {"--predictor": cap_predictor, "data-bin/captions": cap_bin, "--k": 40,
                                         "--out-dir": out}), cwd=REPO)
    for split, gold in (("train", True), ("valid", False), ("test", False)):
        meta = json.loads((out / f"{split}.k40.json").read_text())
        assert meta["gold_included"] is gold and (out / f"{split}.k40.npy").exists()


def test_benchmark_quick_is_its_options_spelled_out():
    """``benchmark.py --quick`` makes the configurations of its options spelled out, each with every setting its
    worker reads (once --quick re-parsed the command line after d had been defaulted, and every worker got None)."""
    from smallvocab_tools.bench import benchmark as bench

    quick = list(bench.configurations(bench.parse_args(["--quick"])))
    assert quick == list(bench.configurations(bench.parse_args(
        ["--modes", "ce", "reinforce", "--vocab-sizes", "24000", "--k", "1000", "--k-sweep", "--steps", "2",
         "--warmup", "1"])))
    assert all(cfg["d"] == 256 and cfg["steps"] == 2 and cfg["warmup"] == 1 for cfg in quick)
    check_benchmark(["--quick"])
    small = bench.parse_args(["--quick", "--embed-dim", "32", "--steps", "4"])  # an explicit option still wins
    assert (small.embed_dim, small.steps, small.warmup, small.vocab_sizes) == (32, 4, 1, [24000])


@pytest.mark.slow
def test_benchmark_quick_runs_end_to_end(tmp_path):
    """``python scripts/benchmark.py --quick`` as documented, shrunk to a tiny |V| and batch (d and everything else
    left to --quick), through the worker process it starts."""
    run(adapt(NAMED["QUICK"], extra=["--vocab-sizes", "300", "--k", "40", "--batch", "4", "--max-len", "6", "--steps",
                                     "1", "--threads", "1", "--modes", "reinforce", "--no-full", "--json",
                                     tmp_path / "q.json"]), cwd=REPO)
    record, = json.loads((tmp_path / "q.json").read_text())
    assert (record["mode"], record["softmax"], record["K"], record["d"]) == ("reinforce", "small", 40, 256)
    assert record["steps"] == 1 and record["warmup"] == 1 and record["sec_per_step"] > 0


def test_a_hydra_parse_leaves_fairseqs_own_hydra_calls_working(tmp_path):
    """The parse check of a fairseq-hydra-train command composes its config with hydra's global API, whose version
    base is the process's: left at hydra's own (1.3), it made fairseq's convert_namespace_to_omegaconf (its
    hydra.experimental.initialize) raise ImportError in every later test of that worker that builds a task from
    fairseq-train's flags, so those tests failed or passed by the order they ran in."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from hydra.version import VersionBase

    base = VersionBase.instance().getbase()
    check_argv(["fairseq-hydra-train", "--config-dir", "examples/hydra", "--config-name", "vocab_predictor",
                f"common.user_dir={USER_DIR}", f"task.data={tmp_path}", f"checkpoint.save_dir={tmp_path / 'vp'}"])
    assert VersionBase.instance().getbase() == base
    args = options.parse_args_and_arch(options.get_training_parser(), [str(tmp_path), "--arch", "lstm"])
    assert convert_namespace_to_omegaconf(args).model.arch == "lstm"
