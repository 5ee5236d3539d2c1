"""A multilingual data folder for fairseq's ``translation_multi_simple_epoch``
(and the plugin's ``translation_multi_smallvocab``): every language pair
binarized with one shared dictionary, as multilingual checkpoints (M2M-100,
NLLB) have one.

The dictionary counts each language's training side once (a language on
both sides of several pairs is not counted twice), keeps words seen at least
``min_count`` times, and is written as ``dict.LANG.txt`` for every language
(the same file: fairseq's multilingual task loads one per language and
checks that they are equal).  The language tokens (``__en__``) are not in it:
the task adds them when it loads the dictionary (``--langs`` or
``--lang-pairs``), as it does for a stock multilingual checkpoint."""

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from smallvocab_tools.data.errors import DataError
from smallvocab_tools.data.output_dir import atomic_output_dir, check_dest_apart_from_inputs
from smallvocab_tools.data.prep import fairseq_preprocess, write_json
from smallvocab_tools.data.stats import corpus_stats
from smallvocab_tools.data.text import read_parallel, warn_special_tokens, write_lines


def prepare_multilingual(raw_dir, dest, pairs: Sequence[Tuple[str, str]], splits: Dict[str, str],
                         min_count: int = 2, workers: int = 1, force: bool = False, log=print) -> Dict:
    """Binarize ``raw_dir/{prefix}.{lang}`` for each (src, tgt) in ``pairs``
    into ``dest`` with one shared dictionary; ``splits`` maps train / valid /
    test to file prefixes.  Returns the statistics (also in stats.json)."""
    if not pairs:
        raise DataError("no language pair given")
    for src, tgt in pairs:
        if src == tgt:
            raise DataError(f"source and target languages must differ (both {src!r})")
    if len(set(pairs)) != len(pairs):
        raise DataError(f"a language pair is given twice: {['-'.join(p) for p in pairs]}")
    if "train" not in splits:
        raise DataError("a train split is required (it defines the dictionary)")
    if min_count < 1:
        raise DataError(f"--min-count must be >= 1, got {min_count}")
    raw_dir, dest = Path(raw_dir), Path(dest)
    check_dest_apart_from_inputs(dest, [raw_dir])
    texts: Dict[Tuple[str, str], Dict[str, Dict[str, List[str]]]] = {}
    for src, tgt in pairs:  # read and check everything before writing
        texts[src, tgt] = {}
        for role, prefix in splits.items():
            s, t, _ = read_parallel(raw_dir / f"{prefix}.{src}", raw_dir / f"{prefix}.{tgt}", empty="fail")
            if not s:
                raise DataError(f"{raw_dir / prefix}.{{{src},{tgt}}} holds no sentence pair")
            for lang, lines in ((src, s), (tgt, t)):
                warn_special_tokens(raw_dir / f"{prefix}.{lang}", lines, log)
            texts[src, tgt][role] = {src: s, tgt: t}
    langs = sorted({lang for pair in pairs for lang in pair})
    with atomic_output_dir(dest, overwrite=force) as tmp:
        raw = tmp / "raw"
        raw.mkdir()
        train_of = {}  # each language's training side, once
        for (src, tgt), roles in texts.items():
            for lang in (src, tgt):
                train_of.setdefault(lang, roles["train"][lang])
        write_lines(raw / "all.txt", [line for lang in langs for line in train_of[lang]])
        fairseq_preprocess(raw, tmp / "dict", "txt", None, {"train": "all"}, min_count=min_count,
                           workers=workers, extra_args=["--dict-only"])
        shared = tmp / "dict" / "dict.txt.txt"
        stats = {"languages": langs, "lang_pairs": [f"{s}-{t}" for s, t in pairs], "min_count": min_count,
                 "shared_dictionary_words": sum(1 for _ in open(shared, encoding="utf-8")),
                 "source": str(raw_dir), "pairs": {}}
        for (src, tgt), roles in texts.items():
            pair_dir = raw / f"{src}-{tgt}"
            pair_dir.mkdir()
            for role, sides in roles.items():
                for lang, lines in sides.items():
                    write_lines(pair_dir / f"{role}.{lang}", lines)
            names = {role: role for role in roles}
            fairseq_preprocess(pair_dir, tmp, src, tgt, names, min_count=min_count, workers=workers,
                               extra_args=["--srcdict", str(shared), "--tgtdict", str(shared)])
            stats["pairs"][f"{src}-{tgt}"] = corpus_stats(pair_dir, src, tgt, names, dict_dir=tmp)
        for lang in langs:  # every language's dictionary is the shared one (fairseq-preprocess copied it)
            (tmp / f"dict.{lang}.txt").write_bytes(shared.read_bytes())
        for f in (tmp / "dict").iterdir():  # the shared dictionary's own run
            f.unlink()
        (tmp / "dict").rmdir()
        write_json(tmp / "stats.json", stats)
    return stats


def prepare_target_tagged(ml_dir, dest, pairs: Sequence[Tuple[str, str]], lang_tok_style: str = "multilingual",
                          workers: int = 1, force: bool = False, log=print) -> Dict:
    """The training data of one vocabulary predictor for every pair of a
    multilingual folder (``prepare_multilingual``'s ``ml_dir``), told the
    target language: each source sentence with its pair's target language
    token in front (``__de__ a man ...``), the pairs' examples together.

    Written as the pair src -> tgt for ``--task vocab_prediction -s src -t
    tgt``: the target dictionary is the shared one, the source dictionary the
    shared one with the language tokens; ``valid`` / ``test`` hold the first
    pair's examples, ``valid1`` / ``test1`` the second's, and so on, so that
    fairseq-train reports recall@K per pair."""
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    ml_dir, dest = Path(ml_dir), Path(dest)
    raw = ml_dir / "raw"
    shared = ml_dir / f"dict.{pairs[0][1]}.txt"
    for src, tgt in pairs:
        if not (raw / f"{src}-{tgt}").is_dir():
            raise DataError(f"{ml_dir} holds no {src}-{tgt} pair (raw/{src}-{tgt}): prepare it with "
                            "scripts/prepare_multi30k.py --multilingual, or give its pairs")
    check_dest_apart_from_inputs(dest, [ml_dir])
    tags = {tgt: get_lang_tok(tgt, lang_tok_style) for _, tgt in pairs}
    with atomic_output_dir(dest, overwrite=force) as tmp:
        text = tmp / "raw"
        text.mkdir()
        roles: Dict[str, List[str]] = {}
        for role in ("train", "valid", "test"):
            names = []
            for i, (src, tgt) in enumerate(pairs):
                folder = raw / f"{src}-{tgt}"
                if not (folder / f"{role}.{src}").is_file():
                    continue
                name = role if role == "train" else f"{role}_{i}"
                sources = [f"{tags[tgt]} {line}" for line in (folder / f"{role}.{src}").read_text().splitlines()]
                targets = (folder / f"{role}.{tgt}").read_text().splitlines()
                mode = "a" if role == "train" and i else "w"
                with open(text / f"{name}.src", mode, encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in sources))
                with open(text / f"{name}.tgt", mode, encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in targets))
                if name not in names:
                    names.append(name)
            if names:
                roles[role] = ",".join(str((text / n).resolve()) for n in names)
        src_dict = tmp / "src_dict.txt"
        src_dict.write_text(shared.read_text(encoding="utf-8")
                            + "".join(f"{tag} 1\n" for tag in sorted(set(tags.values()))), encoding="utf-8")
        fairseq_preprocess(text, tmp, "src", "tgt", roles, workers=workers,
                           extra_args=["--srcdict", str(src_dict), "--tgtdict", str(shared)])
        src_dict.unlink()
        stats = {"pairs": [f"{s}-{t}" for s, t in pairs], "tags": tags, "source": str(ml_dir),
                 "subsets": {"valid" + (str(i) if i else ""): f"{s}-{t}" for i, (s, t) in enumerate(pairs)}}
        write_json(tmp / "stats.json", stats)
    return stats
