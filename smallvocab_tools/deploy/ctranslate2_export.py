"""Export a plugin checkpoint to CTranslate2 (``scripts/export_ctranslate2.py``).

The plugin keeps fairseq's model classes and state-dict keys, so a checkpoint it trained or tuned is a stock
fairseq Transformer: CTranslate2's own fairseq converter converts it, given the plugin as its user dir (its
torch.load runs within the plugin's allow-list, so torch's weights-only loader reads the argparse Namespace
every fairseq checkpoint holds).  This
module checks what the converter cannot say well (an LSTM, a predictor, dictionaries that are not the model's),
converts into a new folder beside the output and puts it in place only once it is complete (the data tools'
``atomic_output_dir``: ``--force`` replaces only a folder of what an export writes, SIGTERM and Ctrl-C remove
the new folder, the next export removes what a killed one left), writes the vocabulary map made from the
predictor (``vmap``) into the model, and records what it made in ``OUT/smallvocab_export.json``."""

import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

from smallvocab_tools.analysis.bleu import add_tokenize_option
from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.output_dir import atomic_output_dir
from smallvocab_tools.data.prep import exit_on_sigterm
from smallvocab_tools.deploy import ctranslate2_speed as speed

QUANTIZATIONS = ("int8", "float16", "float32")
DEFAULT_PER_TOKEN = 20  # the map's per-token words where they are not sized on a split
MULTILINGUAL_TASKS = ("translation_multi_simple_epoch", "translation_multi_smallvocab")
# CTranslate2's fairseq converter's model names (fairseq's model registry name of the --arch)
CONVERTIBLE = ("transformer", "transformer_align", "bart", "multilingual_transformer")
# What an export writes: CTranslate2's model (its vocabularies .json, .txt before CTranslate2 3), the map and
# the record.  A folder that an export wrote before exports marked theirs is replaced (--force) if it holds
# only these.
EXPORT_FILES = re.compile(r"model\.bin|config\.json|(?:shared|source|target)_vocabulary\.(?:json|txt)|vmap\.txt"
                          r"|smallvocab_export\.json")


class ExportError(ValueError):
    """A checkpoint or folder that cannot be exported, with the reason and the fix."""


def _checkpoint_config(path):
    """(task name, arch, its fairseq model name, model config, task config) of a fairseq checkpoint, read with the
    plugin's loader (fairseq's, through torch's weights-only unpickler and the plugin's allow-list)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from fairseq_smallvocab.compat.checkpoint_loading import CheckpointLoadError, checkpoint_configs

    try:
        model_cfg, task_cfg = checkpoint_configs(path)
    except (FileNotFoundError, CheckpointLoadError) as err:
        raise ExportError(str(err)) from None
    arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    task = getattr(task_cfg, "_name", None) or getattr(model_cfg, "task", None)
    return task, arch, ARCH_MODEL_NAME_REGISTRY.get(arch), model_cfg, task_cfg


def check_exportable(path) -> dict:
    """What the checkpoint is (task, arch, whether it is multilingual, the K it was trained with: None where its
    task has none, 0 for the full softmax), or an ``ExportError`` saying why CTranslate2 cannot run it."""
    task, arch, model_name, model_cfg, task_cfg = _checkpoint_config(path)
    if arch == "vocab_predictor":
        raise ExportError(f"{path} is a vocabulary predictor, not a translation model: export the translation "
                          "checkpoint (--path) and give the predictor to --vmap-from")
    if model_name is None:
        raise ExportError(f"{path} does not name a fairseq architecture CTranslate2 knows (arch {arch!r})")
    if model_name not in CONVERTIBLE:
        why = ("the paper's LSTM (and fairseq's) is not a CTranslate2 model: CTranslate2 runs Transformers"
               if "lstm" in model_name else f"CTranslate2's fairseq converter has no '{model_name}' model")
        raise ExportError(f"cannot export {path} (arch {arch}, model {model_name}): {why}. Decode it with "
                          "fairseq-generate / fairseq-interactive and the plugin (--user-dir fairseq_smallvocab)")
    return {"task": task, "arch": arch, "multilingual": task in MULTILINGUAL_TASKS,
            "source_lang": getattr(model_cfg, "source_lang", None),
            "target_lang": getattr(model_cfg, "target_lang", None),
            "small_vocab_size": getattr(task_cfg, "small_vocab_size", None)}


def refuse_map_for_multilingual(path, info):
    if info["multilingual"]:
        raise ExportError(f"{path} is multilingual ({info['task']}): a CTranslate2 vocabulary map is keyed by "
                          "source tokens only and cannot tell the target languages apart; export it without "
                          "--vmap-from")


def _convert(path, data, out_dir, quantization, vmap_file):
    from ctranslate2.converters import FairseqConverter

    import fairseq_smallvocab
    from fairseq_smallvocab.compat.checkpoint_loading import allowed_globals

    plugin_dir = os.path.dirname(os.path.abspath(fairseq_smallvocab.__file__))
    converter = FairseqConverter(str(path), str(data), user_dir=plugin_dir)
    try:
        with allowed_globals():  # the converter's own torch.load (the checkpoint was read safely before)
            converter.convert(str(out_dir), vmap=vmap_file, quantization=quantization, force=True)
    except RuntimeError as err:
        if "size mismatch" in str(err):
            raise ExportError(f"the dictionaries of {data} are not the ones {path} was trained with (the "
                              f"embedding sizes differ): give --data the folder the model was trained on "
                              f"({str(err).splitlines()[-1].strip()})") from None
        raise
    except ValueError as err:  # CTranslate2's check of options it does not support
        raise ExportError(f"CTranslate2 cannot convert {path}: {err}") from None


def export(path, data, out, quantization: str = "float32", vmap=None, force: bool = False,
           record: Optional[dict] = None, info: Optional[dict] = None) -> Path:
    """Convert checkpoint ``path`` (its dictionaries in ``data``) into the CTranslate2 folder ``out`` with
    weights in ``quantization``; ``vmap`` (a ``VocabMap``) goes into the model as its vocabulary map.
    ``out`` is replaced only with ``force``, only once the new model is complete, and only if it holds
    nothing but what an export writes (a user's file in it is named, and nothing changed).  ``record`` is
    written with what was made to ``out/smallvocab_export.json``; ``info`` is ``check_exportable(path)``
    where the caller has it already (the checkpoint is not read again)."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ExportError("ctranslate2 is not installed: pip install ctranslate2 (make setup installs it)") \
            from None
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"--quantization {quantization}: one of {', '.join(QUANTIZATIONS)}")
    out = check_out(out, force)
    info = info or check_exportable(path)
    if vmap is not None:
        refuse_map_for_multilingual(path, info)
    meta = {"checkpoint": os.path.abspath(path), "data": os.path.abspath(data), "quantization": quantization,
            **info, **(record or {})}
    try:
        with atomic_output_dir(out, overwrite=force, derived=None, unmarked=EXPORT_FILES) as work:
            # CTranslate2 converts into a folder it makes (removing one there): its own, inside the new one
            model = work / "model"
            vmap_file = None
            if vmap is not None:
                vmap_file = work / "vmap.source.txt"
                vmap.write(vmap_file)
            _convert(path, data, model, quantization, vmap_file and str(vmap_file))
            (model / "smallvocab_export.json").write_text(json.dumps(meta, indent=2) + "\n")
            if vmap_file is not None:
                vmap_file.unlink()
            for item in model.iterdir():
                os.replace(item, work / item.name)
            model.rmdir()
    except DataError as err:  # the folder's: one that is not the export's, files that are not
        raise ExportError(str(err)) from None
    return out


def check_out(out, force: bool) -> Path:
    """``out`` as a Path, or an ``ExportError`` where it may not be written: it exists and ``force`` is not
    given, or it exists and is no CTranslate2 model folder (told before anything is computed)."""
    out = Path(out)
    if out.exists() and not force:
        raise ExportError(f"{out} exists: give --force to replace it, or another --out")
    if out.exists() and not (out / "model.bin").is_file():
        raise ExportError(f"{out} exists and is not a CTranslate2 model folder (no model.bin): it is not "
                          "replaced, even with --force; give another --out")
    return out


def predictor_vmap(predictor, path, info, data, per_token, always, bigrams, split, k, batch):
    """The vocabulary map of ``predictor`` for the model ``path`` (``check_exportable``'s ``info``; data
    ``data``), its size and coverage on ``split`` (``vmap.coverage``), and that coverage as sentences to print.
    ``per_token`` None: the map's lines sized on ``split`` (``vmap.sized_vmap``; 20 words where no split)."""
    from fairseq_smallvocab.candidates.space import default_small_vocab_size
    from fairseq_smallvocab.predictor.inference import PredictorError, load_predictor
    from smallvocab_tools.deploy.vmap import build_vmap, coverage, describe_coverage, map_size, sized_vmap

    try:
        model, task = load_predictor(predictor, data=data)
    except PredictorError as err:
        raise ExportError(f"--vmap-from: {err}") from None
    refuse_map_for_multilingual(path, info)
    langs = (info["source_lang"], info["target_lang"])
    mine = (task.cfg.source_lang, task.cfg.target_lang)
    if None not in langs and langs != mine:
        raise ExportError(f"--vmap-from {predictor} predicts {mine[1]} words from {mine[0]}; {path} translates "
                          f"{langs[0]} into {langs[1]}: give the predictor of the model's language pair")
    k = k or info.get("small_vocab_size") or default_small_vocab_size(len(task.target_dictionary))
    tried, cover = [], None
    if per_token is None and split:
        vmap, per_token, cover, tried = sized_vmap(model, task, split, k, start=DEFAULT_PER_TOKEN, always=always,
                                                   bigrams=bigrams, batch=batch)
    else:
        per_token = DEFAULT_PER_TOKEN if per_token is None else per_token
        vmap = build_vmap(model, task, per_token=per_token, always=always, bigrams=bigrams)
        if split:
            cover = coverage(vmap, model, task, split, k, batch)
    stats = {"predictor": os.path.abspath(predictor), "per_token": per_token, "always": always,
             "bigrams": bigrams, "size": map_size(vmap)}
    if tried:
        stats["per_token_tried"] = [{"per_token": n, "reference_in_map": pct} for n, pct in tried]
    said = []
    if cover is not None:
        stats["coverage"] = {"split": split, **cover}
        said = describe_coverage(cover, split, per_token, tried)
    return vmap, stats, said


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Export a plugin checkpoint (a fairseq Transformer) to "
                                                 "CTranslate2, with a vocabulary map made from its predictor.")
    parser.add_argument("--path", required=True, help="the checkpoint to export")
    parser.add_argument("--data", required=True, help="its data folder (the dictionaries it was trained with)")
    parser.add_argument("--out", required=True, help="the CTranslate2 model folder to write")
    parser.add_argument("--quantization", default="float32", choices=QUANTIZATIONS,
                        help="the weights' type (int8: CPU serving; float16: GPU)")
    parser.add_argument("--vmap-from", metavar="PREDICTOR",
                        help="a vocab_predictor checkpoint of the model's data: its vocabulary map goes into the "
                             "model (translate with use_vmap=True)")
    parser.add_argument("--vmap-per-token", type=int,
                        help="target words per source word (and at most per bigram) in the map (default: "
                             f"{DEFAULT_PER_TOKEN}, doubled until the map allows, on --coverage-split, the "
                             "reference words within a point of what the K candidates allow, at most K)")
    parser.add_argument("--vmap-always", type=int, default=100,
                        help="the words in the most training targets, always allowed (punctuation always is)")
    parser.add_argument("--vmap-bigrams", type=int, default=0,
                        help="this many most frequent source bigrams get a line of the words they add")
    parser.add_argument("--coverage-split", default="valid",
                        help="the split the map's coverage is measured on ('' for none)")
    parser.add_argument("--k", type=int, help="K of the predicted candidates the coverage is measured against "
                                              "(default: the K the checkpoint was trained with; for a full-softmax "
                                              "or stock checkpoint, the plugin's default K for the vocabulary)")
    parser.add_argument("--batch", type=int, default=32,
                        help="sentences per batch of the allowance measured, and of the check's translate_batch calls")
    parser.add_argument("--check-map", type=int, default=200, metavar="N",
                        help="with --vmap-from: translate the first N sentences of --coverage-split with and "
                             "without the map as the Deploy code does (beam 5, batches of --batch, "
                             "--check-rounds rounds each way, alternating) and say whether it pays here (0: no check)")
    parser.add_argument("--check-rounds", type=int, default=speed.DEFAULT_ROUNDS, metavar="R",
                        help=f"the check's rounds each way (at least {speed.MIN_ROUNDS}: their spread tells a speed-up "
                             "from the machine's noise)")
    parser.add_argument("--threads", type=int,
                        help="the threads the check translates on, as CTranslate2's intra_threads (default: "
                             f"OMP_NUM_THREADS, else {speed.DEFAULT_THREADS}); give the number your deployment uses")
    add_tokenize_option(parser)  # (the check's BLEU)
    parser.add_argument("--force", action="store_true",
                        help="replace --out if it is a CTranslate2 model folder holding only what an export writes")
    args = parser.parse_args(argv)
    if args.check_map < 0:
        parser.error(f"--check-map {args.check_map}: the sentences to check the map on, 1 or more (0: no check)")
    check = args.vmap_from and args.check_map > 0 and bool(args.coverage_split)
    if check:  # the check's settings refused before anything is computed
        if args.batch < 1:
            parser.error(f"--batch {args.batch}: sentences per batch, 1 or more")
        if args.check_rounds < speed.MIN_ROUNDS:
            parser.error(f"--check-rounds {args.check_rounds}: at least {speed.MIN_ROUNDS} (the spread of the rounds "
                         f"tells a speed-up from the machine's noise; {speed.DEFAULT_ROUNDS} by default)")
        try:
            speed.threads_from(args.threads)
        except ValueError as err:
            parser.error(str(err))
    try:
        with exit_on_sigterm():  # so that the cleanup runs: the new model's temporary folder removed
            info = check_exportable(args.path)  # before the map: a model that cannot be exported stops first
            check_out(args.out, args.force)  # and so does an --out that cannot be written
            vmap, record = None, {}
            if args.vmap_from:
                vmap, stats, said = predictor_vmap(args.vmap_from, args.path, info, args.data,
                                                   args.vmap_per_token, args.vmap_always, args.vmap_bigrams,
                                                   args.coverage_split, args.k, args.batch)
                record = {"vmap": stats}
                for line in said:
                    print(line, file=sys.stderr if line.startswith("warning") else sys.stdout, flush=True)
                print("vocabulary map: " + json.dumps(stats), flush=True)
            out = export(args.path, args.data, args.out, args.quantization, vmap=vmap, force=args.force,
                         record=record, info=info)
    except ExportError as err:
        raise SystemExit(f"error: {err}") from None
    except KeyboardInterrupt:
        print(f"interrupted: nothing was written to {args.out}", file=sys.stderr)
        raise SystemExit(130) from None
    check = check and vmap is not None
    print(f"CTranslate2 model ({args.quantization}) written to {out}" + (" with its vocabulary map (vmap.txt)"
          + ("" if check else ": translate with use_vmap=True") if vmap is not None else ""), flush=True)
    if check:
        from smallvocab_tools.deploy.ctranslate2_bench import map_verdict

        meta = json.loads((Path(out) / "smallvocab_export.json").read_text())
        try:
            with exit_on_sigterm():  # the timing process stopped with this one
                verdict = map_verdict(out, args.data, meta.get("source_lang"), meta.get("target_lang"),
                                      args.coverage_split, sentences=args.check_map, batch=args.batch,
                                      threads=args.threads, rounds=args.check_rounds, tokenize=args.tokenize)
        except (speed.SpeedError, ValueError) as err:
            raise SystemExit(f"error: the check of the vocabulary map: {err} (the model is written: {out}; "
                             "--check-map 0 exports without the check)") from None
        except KeyboardInterrupt:
            print(f"interrupted: the check of the vocabulary map stopped; the model is written: {out}",
                  file=sys.stderr)
            raise SystemExit(130) from None
        print(verdict, flush=True)
