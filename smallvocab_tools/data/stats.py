"""Statistics of a prepared corpus: sentences, tokens, types and lengths per
split and language, the out-of-vocabulary rate against the fairseq
dictionaries, the rare-word tail of the training split (``tail_stats``, Zipf
slope); as a dict (stats.json) and as the table the commands print
(``format_stats``)."""

from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

from smallvocab_tools.data.text import read_lines


def dictionary_size(path) -> int:
    """Number of real words in a fairseq dict.txt (no specials, no padding)."""
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("madeupword"):
                n += 1
    return n


def zipf_slope(counts: Sequence[int], top: Optional[int] = None):
    """Least-squares slope of log(frequency) against log(rank)."""
    import numpy as np  # here: the command lines that import this module's checks load without numpy

    freq = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    freq = freq[freq > 0][:top]
    ranks = np.arange(1, len(freq) + 1)
    return float(np.polyfit(np.log(ranks), np.log(freq), 1)[0])


def tail_stats(counts: Iterable[int]) -> Dict:
    """How heavy the rare-word tail of a word-count distribution is: the share
    of types seen once and at most three times, the share of tokens covered by
    the 10% most frequent types, and the Zipf slope."""
    freqs = sorted(counts, reverse=True)
    n = max(1, len(freqs))
    return {"singleton_share": round(sum(1 for c in freqs if c == 1) / n, 4),
            "at_most_3_share": round(sum(1 for c in freqs if c <= 3) / n, 4),
            "top10pct_token_share": round(sum(freqs[: len(freqs) // 10]) / max(1, sum(freqs)), 4),
            "zipf_slope": round(zipf_slope(freqs), 3)}


def corpus_stats(raw_dir, src, tgt, splits: Dict[str, str], dict_dir: Optional[Path] = None) -> Dict:
    """Sentence, token, type and length statistics of raw text splits, and the
    out-of-vocabulary rate against fairseq dictionaries when ``dict_dir`` is
    given."""
    dicts = {}
    if dict_dir is not None:
        for lang in (src, tgt):
            with open(Path(dict_dir) / f"dict.{lang}.txt", encoding="utf-8") as f:
                dicts[lang] = {line.split(" ", 1)[0] for line in f}
    stats = {"languages": [src, tgt], "splits": {}}
    for role, prefix in splits.items():
        entry = {}
        for lang in (src, tgt):
            lines = read_lines(Path(raw_dir) / f"{prefix}.{lang}")
            counts = Counter(w for line in lines for w in line.split())
            lengths = [len(line.split()) for line in lines]
            tokens = sum(lengths)
            side = {"sentences": len(lines), "tokens": tokens, "types": len(counts),
                    "mean_len": round(tokens / max(1, len(lines)), 2),
                    "min_len": min(lengths, default=0), "max_len": max(lengths, default=0)}
            if role == "train" and len(counts) > 10:
                side.update(tail_stats(counts.values()))
            if lang in dicts:
                oov = sum(c for w, c in counts.items() if w not in dicts[lang])
                side["oov_rate"] = round(oov / max(1, tokens), 5)
            entry[lang] = side
        stats["splits"][role] = entry
    if dict_dir is not None:
        stats["dictionary_words"] = {
            lang: dictionary_size(Path(dict_dir) / f"dict.{lang}.txt") for lang in (src, tgt)}
    return stats


def format_stats(stats: Dict) -> str:
    src, tgt = stats["languages"]
    rows = [f"{'split':<8}{'lang':<6}{'sents':>8}{'tokens':>11}{'types':>9}{'len mean/min/max':>19}"
            f"{'oov':>9}"]
    for role, entry in stats["splits"].items():
        for lang in (src, tgt):
            s = entry[lang]
            oov = f"{100 * s['oov_rate']:.2f}%" if "oov_rate" in s else "-"
            rows.append(f"{role:<8}{lang:<6}{s['sentences']:>8}{s['tokens']:>11}{s['types']:>9}"
                        f"{s['mean_len']:>10}/{s['min_len']}/{s['max_len']:<5}{oov:>9}")
    if "dictionary_words" in stats:
        dw = stats["dictionary_words"]
        rows.append("dictionary (words, without specials): " + ", ".join(f"{k}={v}" for k, v in dw.items()))
    train = stats["splits"].get("train", {})
    slopes = [f"{lang}={train[lang]['zipf_slope']}" for lang in (src, tgt) if "zipf_slope" in train.get(lang, {})]
    if slopes:
        rows.append("Zipf slope of train (log freq vs log rank): " + ", ".join(slopes))
    return "\n".join(rows)
